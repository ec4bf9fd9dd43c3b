"""The local stand-in for Lambda's runtime bootstrap and for the Fargate image's command.

Not imported by the package: ``layoutlab.local.artifact_runtime`` copies this file
into the emulated runtime directory (Lambda's ``/var/runtime``) and runs it with the
runtime's Python — an interpreter with nothing but its standard library, like
Lambda's ``/var/lang`` — in an environment made from scratch (nothing of the
development venv). It uses the standard library only until it has put the
deployment artifacts on ``sys.path``, the way the platform does:

- ``lambda``: ``PYTHONPATH`` is only the runtime directory, as on Lambda; the
  bootstrap puts ``LAMBDA_TASK_ROOT`` (the function asset) first and appends the
  layer's ``python/lib/python3.X/site-packages`` and ``python/``, in-process, as
  Lambda's bootstrap does with ``/opt``. A child interpreter started by a handler
  sees only the environment, as on Lambda.
- ``fargate``: ``sys.path`` comes from ``PYTHONPATH`` as the image sets it
  (cdk/container/Dockerfile), with the working directory first, as
  ``python -m layoutlab.handlers.task`` has it.

``serve KIND``: import the handlers once (the init phase), then for each request
line on stdin fork a child that takes its environment, output file, scratch
directory (``TMPDIR``), core and memory limit, runs the call and writes its
outcome file; the parent waits for it (killing it at its timeout or when its
scratch outgrows the configured ephemeral storage) and answers one JSON line.
``once KIND REQUEST``: one call in this fresh interpreter (``serve`` execs it when
a request asks for a fresh interpreter).
"""

import json
import os
import resource
import select
import signal
import sys
import time

KINDS = ("lambda", "fargate")
# Imported in the init phase of a serving process, so a forked task starts with them loaded
# (outside anything a task measures, as a Lambda cold start's init is outside its handler).
PRELOAD = (
    "numpy", "h5py", "s3fs", "zarr", "obstore", "boto3", "botocore.session", "aws_lambda_powertools",
    "layoutlab.bench.runner", "layoutlab.bench.patterns", "layoutlab.bench.readers", "layoutlab.handlers.ingest",
    "layoutlab.handlers.plan", "layoutlab.handlers.convert", "layoutlab.handlers.bench",
    "layoutlab.handlers.summarize", "layoutlab.handlers.record_failure", "layoutlab.handlers.task",
    "layoutlab.handlers.backfill",
)
SCRATCH_POLL_S = 0.25


def set_sys_path(kind: str) -> None:
    """``sys.path`` as the platform makes it (see the module's docstring)."""
    if kind == "lambda":
        task_root = os.environ["LAMBDA_TASK_ROOT"]
        # read raw: layoutlab (and its settings) becomes importable only once this path is set
        layer = os.path.join(os.environ["LAYOUTLAB_LAYER_ROOT"], "python")
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        front = [task_root, os.path.join(layer, "lib", version, "site-packages"), layer]
        sys.path[:] = front + [entry for entry in sys.path if entry not in front]
    else:
        # `python -m`: the working directory first, then PYTHONPATH; not this script's directory
        sys.path[0] = os.getcwd()


class LambdaContext:
    """The attributes of Lambda's context object that Powertools and the handlers read."""

    def __init__(self, name: str, memory_mb: int, timeout_s: float):
        import uuid

        from layoutlab import settings  # (sys.path is the platform's by now: set_sys_path ran)

        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", name)
        self.function_version = "$LATEST"
        self.invoked_function_arn = settings.value("LAYOUTLAB_FUNCTION_ARN")
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def call(request: dict):
    """Run the request's call here: a Lambda handler, the Fargate command, or a plain function."""
    import importlib

    target = request["target"]
    kind, _, name = target.partition(":")
    if kind == "handler":
        module = importlib.import_module(f"layoutlab.handlers.{name}")
        context = LambdaContext(name, request.get("memory_mb") or 0, request.get("timeout") or 900)
        return module.handler(request["payload"], context)
    if kind == "task":
        from layoutlab.handlers.task import main

        code = main([name])
        if code != 0:
            # what Step Functions gets from ecs:runTask.sync: the task stopped with a non-zero exit code
            raise TaskExit(f"essential container exited with code {code}")
        return None
    if kind == "probe":
        return probe(request["payload"] or {})
    function = getattr(importlib.import_module(kind), name)
    return function() if request["payload"] is None else function(request["payload"])


def probe(payload: dict) -> dict:
    """What a task sees of its runtime (for the tests): interpreter, sys.path, where modules come from."""
    import importlib

    found = {}
    for name in payload.get("modules", []):
        try:
            found[name] = getattr(importlib.import_module(name), "__file__", None)
        except ImportError as error:
            found[name] = f"ImportError: {error}"
    if payload.get("write_scratch_bytes"):
        import tempfile

        with tempfile.NamedTemporaryFile(delete=False) as fh:
            for _ in range(int(payload["write_scratch_bytes"]) // 2**20):
                fh.write(b"\1" * 2**20)
                fh.flush()
                time.sleep(0.01)
    return {"executable": sys.executable, "prefix": sys.prefix, "version": list(sys.version_info[:3]),
            "sys_path": sys.path, "modules": found, "environ": dict(os.environ),
            "cpus": sorted(os.sched_getaffinity(0)), "rlimit_data": resource.getrlimit(resource.RLIMIT_DATA)[0]}


class TaskExit(Exception):
    """The Fargate command exited non-zero."""


def run_request(request: dict) -> int:
    """In the task's process: pin, cap, call, write the outcome file; the exit status.

    The steps are the bench's isolated child's (``layoutlab.bench.isolation``), importable
    here because ``set_sys_path`` has put the artifacts on ``sys.path``. What differs is this
    runtime's: its ``call`` (handlers, the Fargate command), a result JSON cannot hold made
    a string (``default=str``), and a Fargate command's non-zero exit reported as Step
    Functions reports it.
    """
    from layoutlab.bench.isolation import run_in_this_process

    return run_in_this_process(request, call, json_default=str, plain_failures={TaskExit: "States.TaskFailed"})


def enter_task(request: dict) -> None:
    """In the task's process, before anything runs: its output file, environment and scratch directory."""
    fd = os.open(request["output_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.update(request.get("env") or {})
    scratch = request.get("scratch")
    if scratch:
        import tempfile

        os.environ["TMPDIR"] = scratch
        tempfile.tempdir = scratch  # gettempdir() may have been cached in the init phase


def disk_usage(path: str) -> int:
    """Bytes allocated under ``path`` (blocks, so preallocated and sparse files count as the disk sees them)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total


def wait_for(pid: int, request: dict) -> dict:
    """Wait for the task: kill it at its timeout or when its scratch outgrows the limit; its rusage."""
    started = time.monotonic()
    timeout = request.get("timeout")
    scratch, limit = request.get("scratch"), request.get("scratch_limit_bytes")
    pidfd = os.pidfd_open(pid)
    reason, scratch_peak = None, 0
    try:
        while True:
            ready, _, _ = select.select([pidfd], [], [], SCRATCH_POLL_S)
            if ready:
                break
            if scratch:
                scratch_peak = max(scratch_peak, disk_usage(scratch))
                if limit and scratch_peak > limit:
                    reason = "scratch"
            if timeout and time.monotonic() - started > timeout:
                reason = "timeout"
            if reason:
                os.kill(pid, signal.SIGKILL)
                break
        _, status, usage = os.wait4(pid, 0)
    finally:
        os.close(pidfd)
    if scratch:
        scratch_peak = max(scratch_peak, disk_usage(scratch))
    return {"returncode": os.waitstatus_to_exitcode(status), "user_cpu_s": usage.ru_utime,
            "system_cpu_s": usage.ru_stime, "wall_s": time.monotonic() - started,
            "timed_out": reason == "timeout", "scratch_exceeded": reason == "scratch",
            "scratch_peak_bytes": scratch_peak}


def serve(kind: str) -> int:
    # Replies go to the original stdout; everything else this process or its imports print goes to stderr.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    replies.write(json.dumps({"ready": True, "python": sys.version.split()[0], "executable": sys.executable,
                              "sys_path": sys.path}) + "\n")
    for line in sys.stdin:
        with open(json.loads(line)["request_path"]) as fh:
            request = json.load(fh)
        pid = os.fork()
        if pid == 0:  # the task
            code = 1
            try:
                if request.get("fresh"):
                    os.environ.update(request.get("env") or {})
                    os.execv(sys.executable, [sys.executable, "-s", __file__, "once", kind, request["request_path"]])
                enter_task(request)
                code = run_request(request)
            finally:
                os._exit(code)
        replies.write(json.dumps(wait_for(pid, request)) + "\n")
    return 0


def once(kind: str, request_path: str) -> int:
    with open(request_path) as fh:
        request = json.load(fh)
    enter_task(request)
    return run_request(request)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("serve", "once") or argv[1] not in KINDS:
        print(f"usage: {os.path.basename(__file__)} serve {{{'|'.join(KINDS)}}} | once KIND REQUEST.json",
              file=sys.stderr)
        return 2
    _non_dumpable()
    set_sys_path(argv[1])
    return serve(argv[1]) if argv[0] == "serve" else once(argv[1], argv[2])


def _non_dumpable() -> None:
    """``prctl(PR_SET_DUMPABLE, 0)``: this task host holds the tasks' credentials in its environment; its
    ``/proc/<pid>/environ`` and memory are then closed to other processes of the same user (a task's
    worker among them) that lack CAP_SYS_PTRACE. The tasks it forks inherit the flag. (Inlined, not
    layoutlab.sandbox's: this file runs before the package is on sys.path, as Lambda's bootstrap does.)"""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4 (linux/prctl.h)
    except (OSError, AttributeError):  # not Linux
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
