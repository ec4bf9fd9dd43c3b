"""Run one function call in a fresh, cold process: how a benchmark case is kept cold.

``run_isolated("pkg.module:function", payload, memory_mb=1769)`` starts a new
Python interpreter that, before importing anything heavy, pins itself to one
core when asked (``cpu=``; the local CLI passes the core its servers leave
free; on Lambda and Fargate the child keeps the task's own CPUs) and caps its memory
(``resource.setrlimit(RLIMIT_DATA)``: heap and anonymous mappings, the part of a
process that grows with the data it reads, as Lambda's memory limit does;
``RLIMIT_AS`` would also count address space that libraries only reserve). It
then calls ``function(payload)`` and returns its JSON result together with what
the parent observed of the child: wall time of the whole process and CPU time
from ``os.wait4`` (per child, unlike ``RUSAGE_CHILDREN`` which keeps the maximum
over all children ever waited for).

Peak RSS is the child's own ``VmHWM`` (``peak_rss_mb()``), read just before it
exits. ``ru_maxrss`` cannot be used for it: Linux carries the high-water mark
of the pre-exec (v)forked image across ``exec``, so every child would report at
least the parent's RSS (150+ MB under pytest for a 14 MB child).

The child is started with the parent's interpreter and sees the parent's
``sys.path`` (passed as ``PYTHONPATH``): on Lambda the bootstrap adds the layer
(``/opt/python``) to ``sys.path`` in-process while the environment says only
``PYTHONPATH=/var/runtime``, so a child given the environment alone could not
import numpy.

This is cloud code (the bench handler runs every case through it on Lambda and
Fargate): it never imports the local emulator.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field

# RLIMIT_DATA counts each thread's whole stack reservation (glibc's default: 8 MiB), which Lambda's memory limit
# (the pages a function touches) does not: h5coro, which starts a thread pool per group and per dataset, failed
# "can't start new thread" in 1 case of 6 under 1769 MB with ~100 MB resident. Under a memory cap, Python threads
# get stacks of this size (more than Python's own recursion limit needs; macOS gives 512 KiB).
CAPPED_THREAD_STACK_BYTES = 1 << 20


@dataclass
class IsolatedResult:
    ok: bool
    result: object | None  # what the function returned (JSON), when ok
    error: str | None  # one line: exception type and message, "killed by signal ..."
    error_type: str | None
    traceback: str | None
    returncode: int
    process_wall_s: float  # interpreter start to exit, as seen by the parent
    user_cpu_s: float
    system_cpu_s: float
    peak_rss_mb: float
    cpu: int | None
    memory_mb: int | None
    output_tail: str = ""  # last lines the child printed (stdout+stderr)
    memory_limit: str = "RLIMIT_DATA"
    peak_rss_source: str = "VmHWM"
    timed_out: bool = False
    env_keys: list[str] = field(default_factory=list)
    sandbox: dict | None = None  # what confined the child (layoutlab/sandbox.py's Isolation), as it reported

    def to_dict(self) -> dict:
        return asdict(self)


def peak_rss_mb() -> float:
    """Peak resident memory of this process image (VmHWM), in MiB; getrusage where /proc is missing."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def describe_process(_payload=None) -> dict:
    """What an isolated task sees of itself (a smoke test for the dispatch path)."""
    return {"pid": os.getpid(), "ppid": os.getppid(), "cpus": sorted(os.sched_getaffinity(0)),
            "rlimit_data": resource.getrlimit(resource.RLIMIT_DATA)[0], "modules": len(sys.modules)}


def start_threads(count: int) -> int:
    """Start ``count`` Python threads that all run at once, as a reader's thread pools do; how many ran."""
    barrier = threading.Barrier(int(count) + 1, timeout=60)
    threads = [threading.Thread(target=barrier.wait) for _ in range(int(count))]
    for thread in threads:
        thread.start()
    barrier.wait()
    for thread in threads:
        thread.join()
    return len(threads)


def child_pythonpath(environ: dict[str, str]) -> str:
    """``PYTHONPATH`` for a child interpreter: this process's ``sys.path`` (what it can import), then the
    environment's own entries. Entries that are not directories (the stdlib zip that may be missing) are
    kept: the child's interpreter adds its standard library itself."""
    entries = [entry for entry in sys.path if entry]
    entries += [entry for entry in environ.get("PYTHONPATH", "").split(os.pathsep) if entry and entry not in entries]
    return os.pathsep.join(entries)


def write_request(workdir: str, target: str, payload: object, cpu, memory_mb) -> tuple[str, str, str]:
    """Write a task's request into ``workdir``; returns (request, result, output) paths."""
    request_path = os.path.join(workdir, "request.json")
    result_path = os.path.join(workdir, "result.json")
    output_path = os.path.join(workdir, "output.txt")
    with open(request_path, "w") as fh:
        json.dump({"target": target, "payload": payload, "cpu": cpu, "memory_mb": memory_mb,
                   "result_path": result_path}, fh)
    return request_path, result_path, output_path


def run_isolated(target: str, payload: object, *, memory_mb: int | None = None, cpu: int | None = None,
                 env: dict[str, str] | None = None, timeout: float | None = None,
                 on_output=None) -> IsolatedResult:
    """Call ``target`` ("module:function") with ``payload`` in a fresh pinned, memory-capped process.

    ``cpu`` pins the child to that core; ``None`` (default) leaves the affinity it inherits.
    ``env`` is added to the current environment. ``on_output``, if given, is
    called with everything the child printed (bytes). Never raises for a failure
    of the child: the result says what happened.
    """
    child_env = dict(os.environ)
    child_env.update(env or {})
    child_env["PYTHONPATH"] = child_pythonpath(child_env)
    with tempfile.TemporaryDirectory(prefix="layoutlab-task-") as workdir:
        request_path, result_path, output_path = write_request(workdir, target, payload, cpu, memory_mb)
        started = time.perf_counter()
        with open(output_path, "wb") as output:
            process = subprocess.Popen([sys.executable, "-m", "layoutlab.bench.isolation", request_path],
                                       stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                       env=child_env, close_fds=True)
        status, usage, timed_out = _wait(process.pid, timeout)
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4; tell Popen
        return _child_result(target, status, usage, time.perf_counter() - started, timed_out, result_path,
                             output_path, forked=False, cpu=cpu, memory_mb=memory_mb, env=env, timeout=timeout,
                             on_output=on_output)


def run_forked(target: str, payload: object, *, memory_mb: int | None = None, cpu: int | None = None,
               env: dict[str, str] | None = None, timeout: float | None = None, on_output=None,
               libraries: tuple[str, ...] = ()) -> IsolatedResult:
    """``run_isolated``'s contract, but the child is a fork of this process instead of a new interpreter.

    The child inherits the modules this process imported and nothing else that a case
    could warm: a benchmark case's parent (the bench handler) never reads data, so the
    child starts with no open files, connections or caches that held data, as a cold
    start whose init phase imported the libraries. It saves the child's imports
    (~0.6 s of numpy, h5py, s3fs, zarr per case, billed on Lambda) and needs nothing of
    ``multiprocessing`` (its semaphores need /dev/shm, which Lambda lacks).

    ``libraries``: modules the call needs beyond what this process imported (a reader's own: xarray,
    h5netcdf). They are imported once in a zygote, a fork of this process kept for that set, and each
    call's child is forked from it: this process stays without them, so a call that does not need them
    does not carry them in its memory (its peak RSS), and a call that does skips importing them (xarray
    takes ~1.5 s to import, every case). A module that starts a thread when imported (icechunk's tokio
    workers) is left for the child to import: a fork keeps only the forking thread, so a child forked
    after it would miss those threads.
    """
    missing = tuple(sorted(name for name in libraries if name not in sys.modules))
    zygote = _zygote_for(missing) if missing else None
    with tempfile.TemporaryDirectory(prefix="layoutlab-task-") as workdir:
        request_path, result_path, output_path = write_request(workdir, target, payload, cpu, memory_mb)
        sys.stdout.flush()
        sys.stderr.flush()
        started = time.perf_counter()
        answer = zygote.run(request_path, output_path, env, timeout) if zygote is not None else None
        if answer is not None:
            status, usage, timed_out = answer
        else:  # no zygote, or it ended before it forked the child: fork from here
            pid = os.fork()
            if pid == 0:
                _forked_child(request_path, output_path, env)
            status, usage, timed_out = _wait(pid, timeout)
        return _child_result(target, status, usage, time.perf_counter() - started, timed_out, result_path,
                             output_path, forked=True, cpu=cpu, memory_mb=memory_mb, env=env, timeout=timeout,
                             on_output=on_output, zygote_libraries=zygote.libraries if answer is not None else ())


def _forked_child(request_path: str, output_path: str, env: dict[str, str] | None) -> None:
    """In a forked child: its own output, environment and limits, then the call; never returns."""
    code = 1
    try:
        fd = os.open(output_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.environ.update(env or {})
        code = _child(request_path)
    finally:
        os._exit(code)


class _Zygote:
    """A fork of this process that imported ``libraries`` once and forks each call's child from itself.

    Requests and answers are JSON lines over two pipes. For each request the zygote forks the child, says
    its pid, waits for it (``wait4``: its own rusage) and answers with the wait status and the child's
    CPU times; the parent times the call and kills the child (a grandchild: same user) at the timeout.
    The zygote ends when the parent closes the request pipe or dies (``PR_SET_PDEATHSIG``). It first says
    whether it is ready: a library whose import started a thread makes it unusable (``StartsThreads``)."""

    def __init__(self, libraries: tuple[str, ...]):
        self.libraries = libraries
        request_read, self._request_write = os.pipe()
        self._answer_read, answer_write = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(self._request_write)
                os.close(self._answer_read)
                from layoutlab.guard import die_with_parent

                die_with_parent(parent)
                with os.fdopen(answer_write, "w", closefd=False) as hello:
                    for name in libraries:
                        importlib.import_module(name)
                        if len(os.listdir("/proc/self/task")) > 1:  # a fork keeps one thread: this one
                            hello.write(json.dumps({"ready": False, "starts_threads": name}) + "\n")
                            break
                    else:
                        hello.write(json.dumps({"ready": True}) + "\n")
                code = self._serve(request_read, answer_write)
            finally:
                os._exit(code)
        os.close(request_read)
        os.close(answer_write)
        self.pid = pid
        self._answers = os.fdopen(self._answer_read, "r")
        try:
            hello = json.loads(self._answers.readline())
        except ValueError:
            hello = {"ready": False}
        if not hello.get("ready"):
            self.close()
            raise StartsThreads(hello.get("starts_threads"))

    def close(self) -> None:
        os.close(self._request_write)  # the zygote's loop ends at end of file
        self._answers.close()
        os.waitpid(self.pid, 0)

    @staticmethod
    def _serve(request_read: int, answer_write: int) -> int:
        with os.fdopen(request_read, "r") as requests, os.fdopen(answer_write, "w") as answers:
            for line in requests:
                request = json.loads(line)
                child = os.fork()
                if child == 0:
                    requests.close()
                    answers.close()
                    _forked_child(request["request_path"], request["output_path"], request["env"])
                answers.write(json.dumps({"pid": child}) + "\n")
                answers.flush()
                _, status, usage = os.wait4(child, 0)
                answers.write(json.dumps({"status": status, "utime": usage.ru_utime,
                                          "stime": usage.ru_stime, "maxrss": usage.ru_maxrss}) + "\n")
                answers.flush()
        return 0

    def alive(self) -> bool:
        try:
            return os.waitpid(self.pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False

    def run(self, request_path: str, output_path: str, env: dict[str, str] | None, timeout: float | None):
        """(wait status, rusage-like, timed out) of one call's child, killed once ``timeout`` has passed; None
        when the zygote ended before it forked the child (it is forgotten; the caller forks from itself)."""
        import select
        import types

        try:
            os.write(self._request_write, (json.dumps({"request_path": request_path, "output_path": output_path,
                                                       "env": env or {}}) + "\n").encode())
            child = json.loads(self._answers.readline())["pid"]
        except (OSError, ValueError, KeyError):
            _zygotes.pop(self.libraries, None)
            return None
        ready, _, _ = select.select([self._answers], [], [], timeout)
        if not ready:
            os.kill(child, signal.SIGKILL)
        try:
            answer = json.loads(self._answers.readline())
        except ValueError:  # the zygote itself was killed while it waited: so was the call, as far as we know
            _zygotes.pop(self.libraries, None)
            answer = {"status": signal.SIGKILL, "utime": 0.0, "stime": 0.0, "maxrss": 0}
        usage = types.SimpleNamespace(ru_utime=answer["utime"], ru_stime=answer["stime"], ru_maxrss=answer["maxrss"])
        return answer["status"], usage, not ready


class StartsThreads(Exception):
    """A library whose import starts a thread (its name, None if the zygote could not say)."""


_zygotes: dict[tuple[str, ...], _Zygote] = {}
_starts_threads: set[str] = set()  # libraries a zygote found starting threads: the children import them


def _zygote_for(libraries: tuple[str, ...]) -> _Zygote | None:
    """The live zygote for ``libraries`` (less those that start threads), started on first use; None where
    none can start (then the call's child is forked from this process and imports them itself)."""
    while True:
        wanted = tuple(name for name in libraries if name not in _starts_threads)
        if not wanted:
            return None
        zygote = _zygotes.get(wanted)
        if zygote is not None and zygote.alive():
            return zygote
        try:
            zygote = _zygotes[wanted] = _Zygote(wanted)
            return zygote
        except StartsThreads as found:
            if found.args[0] is None:
                return None
            _starts_threads.add(found.args[0])
        except OSError:
            return None


def _wait(pid: int, timeout: float | None):
    """(wait status, rusage, timed out) of child ``pid``, killed once ``timeout`` seconds have passed."""
    import select

    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
    finally:
        os.close(pidfd)
    return status, usage, not ready


def _child_result(target: str, status: int, usage, process_wall: float, timed_out: bool, result_path: str,
                  output_path: str, *, forked: bool, cpu: int | None, memory_mb: int | None,
                  env: dict[str, str] | None, timeout: float | None, on_output,
                  zygote_libraries: tuple[str, ...] = ()) -> IsolatedResult:
    """What an ended child left behind (its output, its outcome file) and what the parent saw of it, as a result.

    Peak RSS is the child's own VmHWM from its outcome file. A forked child's includes the modules the
    parent imported; a new interpreter that wrote no outcome falls back to wait4's ``ru_maxrss``, which
    includes the parent's image (see the module's docstring)."""
    with open(output_path, "rb") as fh:
        printed = fh.read()
    if on_output is not None:
        on_output(printed)
    try:
        with open(result_path) as fh:
            outcome = json.load(fh)
    except (OSError, ValueError):
        outcome = None
    peak = (outcome or {}).get("peak_rss_mb")
    if forked and zygote_libraries:
        peak_rss, peak_source = peak or 0.0, ("VmHWM (forked: includes the modules the parent imported and "
                                              f"{', '.join(zygote_libraries)})")
    elif forked:
        peak_rss, peak_source = peak or 0.0, "VmHWM (forked: includes the modules the parent imported)"
    elif peak is not None:
        peak_rss, peak_source = peak, "VmHWM"
    else:
        peak_rss, peak_source = usage.ru_maxrss / 1024.0, "wait4 ru_maxrss (includes the parent image)"
    common = dict(sandbox=(outcome or {}).get("sandbox"),
                  returncode=os.waitstatus_to_exitcode(status), process_wall_s=process_wall,
                  user_cpu_s=usage.ru_utime, system_cpu_s=usage.ru_stime, peak_rss_mb=peak_rss,
                  peak_rss_source=peak_source, cpu=cpu, memory_mb=memory_mb,
                  output_tail=printed[-4000:].decode("utf-8", "replace"), timed_out=timed_out,
                  env_keys=sorted((env or {}).keys()))
    return result_of(target, outcome, common, timeout)


def result_of(target: str, outcome: dict | None, common: dict, timeout: float | None) -> IsolatedResult:
    """The ``IsolatedResult`` for what a task process left behind: its outcome file, or how it ended."""
    if outcome and outcome.get("ok"):
        return IsolatedResult(ok=True, result=outcome["result"], error=None, error_type=None, traceback=None, **common)
    if outcome:
        return IsolatedResult(ok=False, result=None, error=outcome["error"], error_type=outcome["error_type"],
                              traceback=outcome.get("traceback"), **common)
    returncode, tail = common["returncode"], common["output_tail"]
    if common["timed_out"]:
        reason = f"timed out after {timeout:g} s"
    elif returncode < 0:
        name = signal.Signals(-returncode).name
        reason = f"killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    else:
        last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
        reason = f"exited with status {returncode}: {last}"
    return IsolatedResult(ok=False, result=None, error=f"{target}: {reason}", error_type="ProcessFailed",
                          traceback=None, **common)


def run_in_this_process(request: dict, call, *, json_default=None,
                        plain_failures: dict[type[BaseException], str] | None = None) -> int:
    """In the task's process: pin it to ``request["cpu"]``, cap its memory at ``request["memory_mb"]``, run
    ``call(request)`` and write its outcome to ``request["result_path"]``; the exit status (0: it worked).

    One implementation for this module's child and the local runtime's bootstrap
    (``local/runtime_bootstrap.py``, which passes its own ``call`` for handlers and tasks).
    ``json_default`` is given to ``json.dumps`` for the result (None: a result that is not JSON
    is an error). ``plain_failures`` maps exception types to the error type they are reported
    as, with their message alone and no traceback (a Fargate task's non-zero exit).
    """
    # Pin and cap first, so even the imports ``call`` makes run under the platform's limits.
    if request.get("cpu") is not None:
        os.sched_setaffinity(0, {int(request["cpu"])})
    if request.get("memory_mb"):
        limit = int(request["memory_mb"]) * 2**20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        threading.stack_size(CAPPED_THREAD_STACK_BYTES)
    try:
        outcome = {"ok": True, "result": call(request)}
    except MemoryError as error:
        said = str(error)  # a child's own report, passed on by its parent, is not wrapped twice
        outcome = {"ok": False, "error_type": "MemoryError",
                   "error": said if said.startswith("memory limit of") else
                   f"memory limit of {request.get('memory_mb')} MB exceeded ({said or 'MemoryError'})",
                   "traceback": traceback.format_exc()}
    except BaseException as error:  # the parent decides what a failure means; report every kind
        plain = next((name for kind, name in (plain_failures or {}).items() if isinstance(error, kind)), None)
        if plain:
            outcome = {"ok": False, "error_type": plain, "error": str(error), "traceback": None}
        else:
            outcome = {"ok": False, "error_type": type(error).__name__, "error": f"{type(error).__name__}: {error}",
                       "traceback": traceback.format_exc()}
    outcome["peak_rss_mb"] = peak_rss_mb()
    if _confined is not None:
        outcome["sandbox"] = _confined.to_dict()
    try:
        text = json.dumps(outcome, default=json_default)
    except (TypeError, ValueError) as error:
        text = json.dumps({"ok": False, "error_type": "TypeError", "peak_rss_mb": outcome["peak_rss_mb"],
                           "error": f"{request['target']} returned a value that is not JSON ({error})"})
    with open(request["result_path"], "w") as fh:
        fh.write(text)
    # a forked task ends with os._exit, which flushes nothing: what it printed must reach its output file
    sys.stdout.flush()
    sys.stderr.flush()
    return 0 if outcome["ok"] else 1


def _call_target(request: dict):
    """``request["target"]`` ("module:function") called with ``request["payload"]``."""
    module_name, _, function_name = request["target"].partition(":")
    return getattr(importlib.import_module(module_name), function_name)(request["payload"])


_confined = None  # this task process's sandbox.Isolation, once it restricted itself (_confined_target)


def _confined_target(request: dict):
    """``_call_target`` after this process restricted itself to its task folder (request, result, output) and
    the runtime (layoutlab/sandbox.py): a benchmark case reads an uploaded file over S3 (TCP, not
    restricted), and whatever the file points at (external storage, a virtual dataset's sources, an external
    link: a path of this machine), the kernel refuses it every other file."""
    global _confined
    from layoutlab import sandbox

    _confined = sandbox.enter(write=[os.path.dirname(request["result_path"])])
    sandbox.make_non_dumpable()  # (a new interpreter's environment holds the task's credentials)
    return _call_target(request)


def _child(request_path: str) -> int:
    with open(request_path) as fh:
        request = json.load(fh)
    return run_in_this_process(request, _confined_target)


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
