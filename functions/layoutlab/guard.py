"""Run work on a user's file so that a libhdf5 crash or endless loop becomes a clean error.

Some damaged HDF5 files make the HDF5 library spin forever (the fuzzer in
tests/unit/test_hdf5_fuzz.py found one: a vlen string attribute whose global
heap was zeroed) or could kill the process with a signal. Neither can be caught
in-process: the loop is in C and holds the GIL. So ``run_guarded`` runs the call
in a forked child (imports are already done: a fork costs milliseconds) and
watches it from the parent:

- the child dies by a signal → ``BadInputFile`` naming the file and the signal;
- the child spins: runnable (on a CPU, or waiting in the run queue for one) for
  ``stall_seconds`` with not one byte read or written (``/proc/<pid>/io``) →
  stopped, ``BadInputFile``. Real work on a file reads or writes; a wait on the
  network sleeps (neither on a CPU nor queued for one), so neither looks like a
  spin. Time queued counts as busy: on a loaded machine a spinning child may get
  half a core, and must still be stopped (``/proc/<pid>/schedstat``).

Written by hand because no library watches a child for this signature; the
standard pieces used are ``os.fork``, ``select`` and ``pickle``.
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import time
import traceback

from layoutlab import settings
from layoutlab.errors import BadInputFile, UserError

DEFAULT_STALL_SECONDS = None  # None: LAYOUTLAB_STALL_SECONDS, read when a guarded call starts
# A spinning child is runnable (on a CPU or queued for one) nearly all the time; a child waiting
# on I/O or a lock is not.
BUSY_SHARE = 0.8
POLL_SECONDS = 0.5


class GuardedCallFailed(RuntimeError):
    """An unexpected exception in the child: its type, message and traceback, re-raised in the parent."""


def _can_guard() -> bool:
    return hasattr(os, "fork") and os.path.exists("/proc/self/io") and not settings.value("LAYOUTLAB_NO_GUARD")


def _io_and_cpu(pid: int) -> tuple[int, float] | None:
    """(bytes read + written through syscalls, seconds runnable) of ``pid``; None once it is gone.

    Runnable = on a CPU + waiting in the run queue (``/proc/<pid>/schedstat``); where the kernel
    does not keep it, CPU seconds (``/proc/<pid>/stat``)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            fields = dict(line.split(":") for line in f.read().splitlines())
        try:
            with open(f"/proc/{pid}/schedstat") as f:
                on_cpu_ns, queued_ns = f.read().split()[:2]
            busy = (int(on_cpu_ns) + int(queued_ns)) / 1e9
        except (FileNotFoundError, ValueError):
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()
            busy = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    except (FileNotFoundError, ProcessLookupError, ValueError, PermissionError):
        # (PermissionError: a watcher confined by Landlock, or a non-dumpable child of a user without
        # CAP_SYS_PTRACE: no counters, so no stall watch; crashes and answers are still seen)
        return None
    return int(fields["rchar"]) + int(fields["wchar"]), busy


def run_guarded(fn, *args, path: str, stall_seconds: float | None = None, cleanup=None,
                without_credentials: bool = False, confine: tuple[list, list] | None = None, **kwargs):
    """``fn(*args, **kwargs)`` in a watched child; its result, or its exception, in the caller.

    ``UserError`` keeps its message; other exceptions arrive as ``GuardedCallFailed``
    with the child's traceback. ``without_credentials``: the child's environment holds no cloud
    credentials (work on a local file, whose results the parent publishes). ``confine``: (files or
    folders to read, folders to write) — the child restricts itself to them and the runtime before it
    calls ``fn`` (layoutlab/sandbox.py: Landlock); ``start_guarded(...).isolation`` says what held.
    Falls back to a plain call where there is no fork or
    no /proc (or with LAYOUTLAB_NO_GUARD=1). ``cleanup(pid)`` runs when the child was
    stopped or crashed, to remove what it left half-written.
    """
    return start_guarded(fn, *args, path=path, stall_seconds=stall_seconds, cleanup=cleanup,
                         without_credentials=without_credentials, confine=confine, **kwargs).result()


class GuardedCall:
    """A guarded call running in its child while the caller does other work (``start_guarded``).

    ``result()`` waits for it as ``run_guarded`` does (the stall watch runs while it waits) and
    keeps its answer; ``cancel()`` stops the child. Where there is no fork, the call runs in
    ``result()`` itself."""

    def __init__(self, path: str, stall: float, cleanup, pid: int | None = None, read_end: int | None = None,
                 deferred=None):
        self._path, self._stall, self._cleanup = path, stall, cleanup
        self._pid, self._read_end, self._deferred = pid, read_end, deferred
        self._answer: tuple | None = None
        self.isolation = None  # the child's sandbox.Isolation once it answered (when it was confined)

    def result(self):
        if self._answer is None:
            try:
                if self._pid is None:
                    value = self._deferred()
                else:
                    pid, self._pid = self._pid, None
                    value = _watch(pid, self._read_end, self._path, self._stall, self._cleanup, self._keep_isolation)
                self._answer = ("ok", value)
            except BaseException as error:
                self._answer = ("raised", error)
        if self._answer[0] == "raised":
            raise self._answer[1]
        return self._answer[1]

    def _keep_isolation(self, isolation) -> None:
        self.isolation = isolation

    def cancel(self) -> None:
        """Stop the child if it still runs (its answer is not wanted any more)."""
        if self._pid is not None:
            pid, self._pid = self._pid, None
            os.close(self._read_end)
            _reap(pid, kill=True)
            self._answer = ("raised", GuardedCallFailed(f"{self._path}: cancelled"))


def start_guarded(fn, *args, path: str, stall_seconds: float | None = None, cleanup=None,
                  without_credentials: bool = False, confine: tuple[list, list] | None = None,
                  **kwargs) -> GuardedCall:
    """``run_guarded``'s child started, not waited for: the caller goes on with other work (on the
    other core) and collects the answer with ``result()``."""
    if stall_seconds is None:
        stall_seconds = DEFAULT_STALL_SECONDS if DEFAULT_STALL_SECONDS is not None else \
            settings.value("LAYOUTLAB_STALL_SECONDS")
    stall = float(stall_seconds)
    if not _can_guard():
        call = GuardedCall(path, stall, cleanup, deferred=lambda: fn(*args, **kwargs))
        if confine is not None:
            from layoutlab.sandbox import not_entered

            call.isolation = not_entered()
        return call
    read_end, write_end = os.pipe()
    # Objects that exist before the fork go to the collector's permanent generation:
    # the child's collections then neither scan them nor write to their pages (which
    # would copy them, page by page, from the parent).
    unfreeze = gc.get_freeze_count() == 0  # (leave a caller's own frozen objects frozen)
    gc.freeze()
    parent = os.getpid()
    try:
        pid = os.fork()
    except BaseException:
        if unfreeze:
            gc.unfreeze()
        os.close(read_end)
        os.close(write_end)
        raise
    if pid != 0 and unfreeze:
        gc.unfreeze()  # the parent collects as before
    if pid == 0:  # the child: do the work, send one pickled answer, leave without cleanup handlers
        os.close(read_end)
        die_with_parent(parent)
        if without_credentials:
            from layoutlab.process_environment import drop_credentials

            drop_credentials()
        isolation = None
        try:
            try:
                if confine is not None:  # before anything of the input is opened
                    from layoutlab import sandbox

                    isolation = sandbox.enter(read=list(confine[0]), write=list(confine[1]))
                if without_credentials:
                    # (a fork of a non-dumpable task host is non-dumpable, which closes its /proc/<pid>/io
                    # to the watching parent; this child holds no credentials)
                    from layoutlab.sandbox import make_dumpable

                    make_dumpable()
                answer = ("ok", fn(*args, **kwargs), isolation)
            except UserError as error:
                answer = ("user_error", error, isolation)
            except BaseException as error:  # sent to the parent, which re-raises it
                answer = ("error", f"{type(error).__name__}: {error}", traceback.format_exc(), isolation)
            try:
                payload = pickle.dumps(answer)
            except Exception as error:  # an unpicklable answer: keep its text
                text = str(answer[1]) if answer[0] == "user_error" else f"unpicklable result: {error}"
                payload = pickle.dumps(("user_error", UserError(text), isolation) if answer[0] == "user_error"
                                       else ("error", text, "", isolation))
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
        finally:
            os._exit(0)
    os.close(write_end)
    return GuardedCall(path, stall, cleanup, pid=pid, read_end=read_end)


def die_with_parent(parent: int) -> None:
    """The worker ends when its parent does (a parent killed by SIGKILL cannot stop it; the kernel can:
    ``PR_SET_PDEATHSIG``); SIGTERM gets its default action back (the parent unwinds, the worker just stops)."""
    import ctypes

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1 (linux/prctl.h)
    except (OSError, AttributeError):  # not Linux: the parent's own cleanup path is what stops the worker
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _watch(pid: int, read_end: int, path: str, stall: float, cleanup, keep_isolation=None):
    data = bytearray()
    last = _io_and_cpu(pid)
    quiet_since, cpu_at_quiet = time.monotonic(), last[1] if last else 0.0
    try:
        while True:
            ready, _, _ = select.select([read_end], [], [], POLL_SECONDS)
            if ready:
                chunk = os.read(read_end, 1 << 16)
                if not chunk:
                    break
                data += chunk
                continue
            now_reading = _io_and_cpu(pid)
            if now_reading is None:
                continue
            if last is None or now_reading[0] != last[0]:
                quiet_since, cpu_at_quiet = time.monotonic(), now_reading[1]
            last = now_reading
            quiet = time.monotonic() - quiet_since
            if quiet >= stall and (now_reading[1] - cpu_at_quiet) >= BUSY_SHARE * quiet:
                os.kill(pid, signal.SIGKILL)
                raise BadInputFile(path, f"the HDF5 library spun for {quiet:.0f} s without reading or writing a "
                                         "byte and was stopped; the file's metadata is probably damaged")
    except BaseException:
        _reap(pid, kill=True)
        if cleanup is not None:
            cleanup(pid)
        raise
    finally:
        os.close(read_end)
    status = _reap(pid, kill=False)
    if os.WIFSIGNALED(status):
        if cleanup is not None:
            cleanup(pid)
        name = signal.Signals(os.WTERMSIG(status)).name
        if os.WTERMSIG(status) in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            # not a crash: the kernel's OOM killer, an operator, or a stop that reached the whole process group
            raise GuardedCallFailed(f"{path}: the worker process was stopped ({name}: out of memory, or stopped "
                                    "from outside); the file is not known to be damaged")
        raise _crash_verdict(path, name)
    if not data:
        raise GuardedCallFailed(f"{path}: the worker process ended without an answer (exit status "
                                f"{os.WEXITSTATUS(status)})")
    answer = pickle.loads(bytes(data))
    if keep_isolation is not None:
        keep_isolation(answer[-1])  # (what confined the child, whatever its answer)
    if answer[0] == "ok":
        return answer[1]
    if answer[0] == "user_error":
        raise answer[1]
    if answer[1].startswith("MemoryError"):  # over the memory limit: the caller (and Step Functions' Retry) must see it
        raise MemoryError(f"{path}: {answer[1]} (in the worker process)")
    raise GuardedCallFailed(f"{answer[1]}\n--- in the worker process ---\n{answer[2]}")


def _crash_verdict(path: str, signal_name: str) -> UserError:
    """The error for a worker that died of ``signal_name``: the file is called damaged only when h5dump
    (another reader: HDF5's own tool, another build of the library) cannot read its metadata either;
    otherwise the fault is ours or the library's, and the error says so (one line all the same)."""
    import shutil
    import subprocess

    h5dump = shutil.which("h5dump")
    if h5dump is None:
        return UserError(f"{path}: the HDF5 library crashed ({signal_name}) while working on it; whether the "
                         "file is damaged is not known (h5dump, which would tell, is not installed)")
    try:
        read = subprocess.run([h5dump, "-H", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        read = False
    if read:
        return UserError(f"{path}: the HDF5 library crashed ({signal_name}) while working on it, but h5dump reads "
                         "the file: a fault of layoutlab or of the HDF5 library, not of the file")
    return BadInputFile(path, f"the HDF5 library crashed reading it ({signal_name}) and h5dump cannot read it "
                              "either; the file is probably damaged")


def _reap(pid: int, *, kill: bool) -> int:
    if kill:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return 0
