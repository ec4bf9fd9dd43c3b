"""A local cloud started by a process ends with that process, however it ends.

A benchmark stopped with SIGTERM or SIGKILL runs no ``finally``: its cloud used to stay, holding
its objects (a 7 GB granule's on disk) and its ports. ``local up`` (detach) still outlives its caller.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from layoutlab.local.cloud import pid_running

STARTER = """
import sys, time
from layoutlab.local.cloud import start_local_cloud
cloud = start_local_cloud(latency_ms=0, bandwidth_mbps=0)
print(cloud.pid, flush=True)
time.sleep(600)
"""


def wait_until_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_running(pid):
            return True
        time.sleep(0.1)
    return False


def test_the_cloud_stops_when_the_process_that_started_it_is_killed():
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True)
    cloud_pid = None
    try:
        cloud_pid = int(starter.stdout.readline())
        assert pid_running(cloud_pid)
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
        assert wait_until_gone(cloud_pid, 15), "the local cloud outlived the process that started it"
    finally:
        starter.kill()
        if cloud_pid and pid_running(cloud_pid):
            import os

            os.kill(cloud_pid, signal.SIGKILL)
