"""Fuzz ``inspect`` and ``repack`` with damaged HDF5 bytes: clean errors only.

A small but varied HDF5 file (groups, attributes, a gzip+shuffle chunked
dataset, a contiguous one, a string dataset) is mutated by hypothesis: bytes
flipped or overwritten at random offsets, ranges zeroed, the tail cut off.
Every mutated file goes through ``inspect_file`` and ``repack`` in a child
process forked for that example (``multiprocessing`` "fork": no import cost),
joined with a timeout, so a hang or a crash inside libhdf5 (a segfault, an
abort) fails the test with the bytes that caused it instead of taking pytest
down. Allowed outcomes: success, or a ``UserError`` whose message names the
file. Anything else (another exception, a signal, a hang) is a failure.

Bounded: a fixed number of examples per test (``FUZZ_EXAMPLES``, 60 by
default; raise it with the environment variable ``LAYOUTLAB_FUZZ_EXAMPLES``
for a longer hunt) and ``PER_EXAMPLE_TIMEOUT_S`` per example.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ_EXAMPLES = int(os.environ.get("LAYOUTLAB_FUZZ_EXAMPLES", "60"))
PER_EXAMPLE_TIMEOUT_S = 20.0
GUARD_STALL_S = 4.0  # the commands' guard stops a child that spins this long without I/O


def seed_file_bytes(tmp: Path) -> bytes:
    path = tmp / "seed.h5"
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "fuzz seed"
        group = f.create_group("gt1l/heights")
        group.attrs["units"] = "m"
        group.create_dataset("h_ph", data=np.linspace(0, 1, 4000, dtype="f4"), chunks=(500,),
                             compression="gzip", shuffle=True)
        f.create_dataset("grid", data=np.arange(6 * 8 * 10, dtype="i2").reshape(6, 8, 10))
        f.create_dataset("names", data=np.array([b"alpha", b"beta", b"gamma"]))
        f["grid"].attrs["scale"] = 0.5
    return path.read_bytes()


@pytest.fixture(scope="module")
def seed(tmp_path_factory) -> bytes:
    return seed_file_bytes(tmp_path_factory.mktemp("fuzz-seed"))


def mutations(size: int):
    """A list of edits: (offset, new bytes) overwrites, or ("cut", length)."""
    overwrite = st.tuples(st.integers(0, size - 1), st.binary(min_size=1, max_size=16))
    zero_range = st.tuples(st.integers(0, size - 1), st.integers(1, 512)).map(lambda t: (t[0], b"\0" * t[1]))
    edit = st.one_of(overwrite, zero_range)
    cut = st.one_of(st.none(), st.integers(0, size - 1))
    return st.tuples(st.lists(edit, min_size=1, max_size=8), cut)


def apply(seed: bytes, edits, cut) -> bytes:
    data = bytearray(seed)
    for offset, new in edits:
        data[offset:offset + len(new)] = new[: max(0, len(seed) - offset)]
    data = data[: len(seed)]
    return bytes(data if cut is None else data[:cut])


def _exercise(operation: str, path: str, out: str, queue) -> None:
    """Child process: run one operation; report ok / clean error / other error on ``queue``."""
    from layoutlab.errors import UserError

    from layoutlab.guard import run_guarded

    # Through the guard the commands use: a libhdf5 spin or crash must come back as a clean error.
    try:
        if operation == "inspect":
            from layoutlab.formats.inspect import format_report, inspect_file

            format_report(run_guarded(inspect_file, path, path=path, stall_seconds=GUARD_STALL_S))
        else:
            from layoutlab.convert.repack_hdf5 import partial_output_remover, repack

            run_guarded(repack, path, out, page_size="64KiB", verify=True, path=path,
                        stall_seconds=GUARD_STALL_S, cleanup=partial_output_remover(out))
        queue.put(("ok", ""))
    except UserError as error:
        queue.put(("user_error", str(error)))
    except BaseException as error:  # exactly what the test looks for: anything that is not a clean error
        queue.put(("crash", f"{type(error).__name__}: {error}\n{traceback.format_exc()}"))


def run_in_child(operation: str, path: Path, out: Path, timeout: float = PER_EXAMPLE_TIMEOUT_S) -> tuple[str, str]:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=_exercise, args=(operation, str(path), str(out), queue))
    process.start()
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
        return "hang", f"no answer within {timeout:g} s"
    if process.exitcode != 0:
        return "signal" if process.exitcode < 0 else "exit", f"exit code {process.exitcode}"
    return queue.get(timeout=5)


def check_clean(operation: str, data: bytes, workdir: Path) -> None:
    path = workdir / "mutated.h5"
    out = workdir / "mutated-out.h5"
    path.write_bytes(data)
    out.unlink(missing_ok=True)
    for stale in workdir.glob(".mutated-out.h5.partial-*"):  # left by a child killed on an earlier example
        stale.unlink()
    kind, detail = run_in_child(operation, path, out)
    if kind == "user_error":
        assert str(path) in detail, f"error does not name the file: {detail}"
        assert not out.exists(), "a failed repack left its output behind"
        assert not list(workdir.glob(".mutated-out.h5.partial-*")), "a failed repack left a partial file"
    else:
        keep = workdir / f"failing-{operation}.h5"
        keep.write_bytes(data)
        assert kind == "ok", f"{operation} on damaged HDF5 ({keep}): {kind}: {detail}"
    out.unlink(missing_ok=True)


@pytest.mark.parametrize("operation", ["inspect", "repack"])
def test_damaged_hdf5_gives_a_clean_error_or_a_result(operation, seed, tmp_path_factory):
    workdir = tmp_path_factory.mktemp(f"fuzz-{operation}")

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(mutations(len(seed)))
    def fuzz(mutation):
        edits, cut = mutation
        check_clean(operation, apply(seed, edits, cut), workdir)

    fuzz()


@pytest.mark.parametrize("fraction", [0.10, 0.50, 0.99])
@pytest.mark.parametrize("operation", ["inspect", "repack"])
def test_truncated_hdf5_gives_a_clean_error(operation, fraction, seed, tmp_path):
    data = seed[: int(len(seed) * fraction)]
    path = tmp_path / "truncated.h5"
    path.write_bytes(data)
    kind, detail = run_in_child(operation, path, tmp_path / "out.h5")
    assert kind == "user_error", detail
    assert str(path) in detail and "truncated or damaged" in detail


def test_repack_of_a_zeroed_global_heap_gives_a_clean_error(seed, tmp_path):
    path = tmp_path / "zeroed-heap.h5"
    path.write_bytes(apply(seed, [(2094, b"\0" * 11)], None))
    # libhdf5 (2.0.0 in h5py 3.16) spins forever reading a vlen string attribute whose
    # global heap was zeroed (found by the fuzzer with 400 examples): the guard stops it.
    out = tmp_path / "out.h5"
    kind, detail = run_in_child("repack", path, out, timeout=PER_EXAMPLE_TIMEOUT_S)
    assert kind == "user_error", f"{kind}: {detail}"
    assert str(path) in detail and "spun" in detail and "probably damaged" in detail
    assert not out.exists() and not list(tmp_path.glob(".out.h5.partial-*"))


def test_the_repack_command_stops_a_spinning_library_with_one_line(seed, tmp_path):
    import subprocess
    import sys

    path = tmp_path / "zeroed-heap.h5"
    path.write_bytes(apply(seed, [(2094, b"\0" * 11)], None))
    env = {**os.environ, "LAYOUTLAB_STALL_SECONDS": str(GUARD_STALL_S)}
    done = subprocess.run([sys.executable, "-m", "layoutlab.cli", "repack", str(path), str(tmp_path / "out.h5")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"layoutlab repack: error: {path}: the HDF5 library spun for")
    assert list(tmp_path.iterdir()) == [path]
