"""Fresh task processes without paying for imports each time: a preloaded fork server.

``run_forked`` runs one call like ``isolation.run_isolated`` — its own process,
pinned to one core, capped to the platform's memory, its output captured, its
failures reported rather than raised — but the process is forked from
Python's ``multiprocessing`` fork server, which has already imported the heavy
libraries (numpy, h5py, s3fs, zarr, obstore, boto3, the handlers). The child
inherits imported modules only: no open files, no connections, no caches that
held data, so every case is still cold where it matters, as in a Lambda cold
start whose imports ran in the init phase (outside the timed region here as
there). It saves about a second of imports per task, which is most of the
local pipeline's time per benchmark case.

The fork server is started once per process that uses this (the local cloud
server), pinned to the server cores; children move themselves to the
measured core before running anything.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import signal
import tempfile
import threading
import time

from layoutlab.local.isolation import IsolatedResult, _child, result_of, write_request

PRELOAD = [
    "numpy", "h5py", "s3fs", "zarr", "obstore", "boto3", "botocore.session",
    "aws_lambda_powertools",
    "layoutlab.bench.runner", "layoutlab.bench.patterns", "layoutlab.bench.readers",
    "layoutlab.handlers.bench", "layoutlab.handlers.convert", "layoutlab.handlers.plan",
    "layoutlab.handlers.summarize", "layoutlab.handlers.record_failure", "layoutlab.local.dispatch",
]

_lock = threading.Lock()
_context = None


def _fork_context():
    """The fork-server context, started on first use with ``PRELOAD`` imported."""
    global _context
    with _lock:
        if _context is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(PRELOAD)
            _context = context
        return _context


def _forked_child(request_path: str, output_path: str, env: dict) -> None:
    """Runs in the forked process: take the task's output and environment, then ``isolation._child``."""
    fd = os.open(output_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.update(env)
    code = _child(request_path)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(request_path + ".usage", "w") as fh:
        json.dump({"user": usage.ru_utime, "system": usage.ru_stime}, fh)
    os._exit(code)


def run_forked(target: str, payload: object, *, memory_mb: int | None = None, cpu: int | None = None,
               env: dict[str, str] | None = None, timeout: float | None = None, on_output=None) -> IsolatedResult:
    context = _fork_context()
    with tempfile.TemporaryDirectory(prefix="layoutlab-task-") as workdir:
        request_path, result_path, output_path = write_request(workdir, target, payload, cpu, memory_mb)
        started = time.perf_counter()
        process = context.Process(target=_forked_child, args=(request_path, output_path, dict(env or {})))
        process.start()
        process.join(timeout)
        timed_out = process.is_alive()
        if timed_out:
            process.kill()
            process.join()
        wall = time.perf_counter() - started
        printed = open(output_path, "rb").read() if os.path.exists(output_path) else b""
        if on_output is not None:
            on_output(printed)
        tail = printed[-4000:].decode("utf-8", "replace")
        try:
            with open(result_path) as fh:
                outcome = json.load(fh)
        except (OSError, ValueError):
            outcome = None
        try:
            with open(request_path + ".usage") as fh:
                usage = json.load(fh)
        except (OSError, ValueError):
            usage = {"user": 0.0, "system": 0.0}
    returncode = process.exitcode if process.exitcode is not None else -signal.SIGKILL
    common = dict(returncode=returncode, process_wall_s=wall, user_cpu_s=usage["user"], system_cpu_s=usage["system"],
                  peak_rss_mb=(outcome or {}).get("peak_rss_mb") or 0.0,
                  peak_rss_source="VmHWM (forked: includes the preloaded modules)", cpu=cpu, memory_mb=memory_mb,
                  output_tail=tail, timed_out=timed_out, env_keys=sorted((env or {}).keys()))
    return result_of(target, outcome, common, timeout)
