"""Issue 36: SIGTERM during a rechunk always ends it with its signal status.

The signal's ``Terminated`` is raised wherever the main thread is; when that is inside one of the event
loop's callbacks (``_read_from_self``, which the signal itself wakes), asyncio catches it, logs
"Exception in callback ... Terminated" and goes on: the rechunk exited 0 (1 run in ~25). Made
deterministic here by sending the signal from a callback of the loop that ``_run`` drives."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import asyncio, os, signal, sys
from layoutlab.errors import Terminated, unwind_on_sigterm
from layoutlab.convert.rechunk_zarr import _run
unwind_on_sigterm()

async def work():
    asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGTERM)
    await asyncio.sleep(5)
    return "finished"

async def quick():
    return "next call"

try:
    print(_run(work()))
except Terminated as stop:
    print("terminated:", stop)
    print(_run(quick()))  # (a later call gets a fresh loop)
    sys.exit(143)
"""


def test_sigterm_inside_an_event_loop_callback_is_not_swallowed():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 143, (done.stdout, done.stderr)
    assert done.stdout.splitlines() == ["terminated: stopped by SIGTERM", "next call"], done.stdout
    assert "Exception in callback" not in done.stderr, done.stderr
