"""The guard the inspect and repack commands run under: libhdf5 spins and crashes become clean errors."""

from __future__ import annotations

import faulthandler
import os
import shutil
import signal
import time

import pytest

from layoutlab.errors import BadInputFile, UserError
from layoutlab.guard import GuardedCallFailed, run_guarded


def spin():
    while True:
        pass


def crash():
    faulthandler.disable()  # pytest's handler would print a "Fatal Python error" dump into the test log
    os.kill(os.getpid(), signal.SIGSEGV)


def sleep_then_answer(seconds):
    time.sleep(seconds)  # waiting (on the network, say) uses no CPU: not a spin
    return {"slept": seconds}


def reject(path):
    raise BadInputFile(path, "is not HDF5")


def fail():
    raise ValueError("a bug")


def run_out_of_memory():
    raise MemoryError("Unable to allocate 16.0 GiB")


def killed_from_outside():
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_spinning_call_is_stopped_and_named(tmp_path):
    removed = []
    with pytest.raises(BadInputFile, match=r"^f\.h5: the HDF5 library spun for 1 s") as raised:
        run_guarded(spin, path="f.h5", stall_seconds=1, cleanup=removed.append)
    assert raised.value.path == "f.h5" and len(removed) == 1


@pytest.mark.timeout(60)
def test_a_spin_is_stopped_on_a_core_shared_with_another_busy_process():
    """On a loaded machine a spinning child gets a fraction of a core; it must be stopped all the same
    (it once got half a core here and the call ran forever)."""
    import subprocess
    import sys

    core = max(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {core})
        os.sched_setaffinity(0, {core})  # the guarded child inherits it: two busy processes on one core
        with pytest.raises(BadInputFile, match="spun for"):
            run_guarded(spin, path="f.h5", stall_seconds=1)
    finally:
        os.sched_setaffinity(0, before)
        hog.kill()
        hog.wait()


def test_a_crash_by_signal_is_a_clean_error():
    with pytest.raises(BadInputFile, match="crashed reading it .SIGSEGV. and h5dump cannot read it either"):
        run_guarded(crash, path="f.h5")  # (no such file: h5dump fails too)


@pytest.mark.skipif(shutil.which("h5dump") is None, reason="needs h5dump (make sysdeps)")
def test_a_crash_on_a_file_h5dump_reads_is_not_blamed_on_the_file(tmp_path):
    """Issue 27: repack's C walk of the time crashed (SIGSEGV) on a valid file with attribute references, and the
    error called the file "probably damaged"."""
    import h5py

    path = tmp_path / "fine.h5"
    with h5py.File(path, "w") as f:
        f["x"] = [1, 2, 3]
    with pytest.raises(UserError) as raised:
        run_guarded(crash, path=str(path))
    assert not isinstance(raised.value, BadInputFile)
    message = str(raised.value)
    assert message.startswith(str(path)) and "SIGSEGV" in message and "h5dump reads the file" in message
    assert "damaged" not in message


def test_a_slow_call_that_waits_is_not_stopped_and_its_result_comes_back():
    assert run_guarded(sleep_then_answer, 1.5, path="f.h5", stall_seconds=0.5) == {"slept": 1.5}


def test_errors_keep_their_meaning():
    with pytest.raises(BadInputFile) as raised:
        run_guarded(reject, "x.h5", path="x.h5")
    assert (raised.value.path, raised.value.reason) == ("x.h5", "is not HDF5")
    with pytest.raises(GuardedCallFailed, match=r"ValueError: a bug(.|\n)*in the worker process"):
        run_guarded(fail, path="x.h5")


def test_without_the_guard_the_call_runs_in_process(monkeypatch):
    monkeypatch.setenv("LAYOUTLAB_NO_GUARD", "1")
    assert run_guarded(os.getpid, path="x") == os.getpid()
    assert run_guarded(os.getpid, path="x") == os.getpid()
    monkeypatch.delenv("LAYOUTLAB_NO_GUARD")
    assert run_guarded(os.getpid, path="x") != os.getpid()


def test_running_out_of_memory_is_not_blamed_on_the_file():
    with pytest.raises(MemoryError, match=r"^x\.h5: MemoryError: Unable to allocate 16.0 GiB"):
        run_guarded(run_out_of_memory, path="x.h5")
    with pytest.raises(GuardedCallFailed, match="stopped .SIGKILL: out of memory"):
        run_guarded(killed_from_outside, path="x.h5")
