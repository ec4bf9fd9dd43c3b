"""Hostile inputs against the CLI (issue 23, rows 7-10, 13): one line naming the file and the true
reason, nothing half-written left behind, no worker outliving its command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import psutil
import pytest

from repack_helpers import run_layoutlab

pytestmark = pytest.mark.slow


def _corrupt_compressed_chunk(path: Path) -> Path:
    """A valid file whose one gzip chunk has 20 flipped bytes (its index and everything else intact)."""
    with h5py.File(path, "w") as f:
        f.create_dataset("z", data=np.random.default_rng(0).random((64, 64)), chunks=(16, 16), compression="gzip")
        info = f["z"].id.get_chunk_info(3)
    data = bytearray(path.read_bytes())
    for i in range(20):
        data[info.byte_offset + 10 + i] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def _scrambled_metadata(path: Path) -> Path:
    """Random bytes over the file's group B-tree and heaps, after the superblock."""
    with h5py.File(path, "w", libver="earliest") as f:
        for i in range(30):
            f[f"v{i}"] = np.arange(100)
    data = bytearray(path.read_bytes())
    rng = np.random.default_rng(1)
    data[800:2400] = rng.integers(0, 256, 1600, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    return path


def _deep_groups(path: Path, depth: int) -> Path:
    with h5py.File(path, "w") as f:
        group = f
        for _ in range(depth):
            group = group.create_group("g")
        group["x"] = np.arange(3, dtype="f4")
    return path


@pytest.mark.parametrize("make", [_corrupt_compressed_chunk, _scrambled_metadata])
def test_rechunk_of_a_damaged_file_is_one_line_naming_it_and_leaves_no_output(make, tmp_path):
    source = make(tmp_path / "damaged.h5")
    out = tmp_path / "out.zarr"
    code, stdout, stderr, _ = run_layoutlab("rechunk", source, out, "--no-progress")
    assert code == 2, stderr
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(source) in lines[0] and "damaged" in lines[0], stderr
    assert not out.exists()


def test_a_fifo_is_refused_by_every_command_instead_of_blocking(tmp_path):
    fifo = tmp_path / "upload.h5"
    os.mkfifo(fifo)
    for args in (("inspect", fifo), ("rechunk", fifo, tmp_path / "o.zarr"), ("repack", fifo, tmp_path / "o.h5")):
        code, _, stderr, _ = run_layoutlab(*args, timeout=60)
        assert code == 2 and "FIFO" in stderr and "Traceback" not in stderr, (args, stderr)


def test_groups_nested_2000_deep_are_rechunked_and_inspected(tmp_path):
    source = _deep_groups(tmp_path / "deep.h5", 2000)
    with h5py.File(source, "a") as f:
        f["g/g/shallow"] = np.arange(4, dtype="i2")
    code, stdout, stderr, _ = run_layoutlab("rechunk", source, tmp_path / "deep.zarr", "--no-progress", timeout=600)
    assert code == 0 and "Traceback" not in stderr, stderr[-2000:]
    import json

    import zarr

    root = zarr.open_group(zarr.storage.LocalStore(tmp_path / "deep.zarr", read_only=True), mode="r")
    assert np.array_equal(root["g/g/shallow"][...], np.arange(4, dtype="i2"))
    reasons = [s["reason"] for s in json.loads(stdout)["skipped"]]
    assert any("S3's 1024-byte limit" in r for r in reasons), reasons
    code, stdout, stderr, _ = run_layoutlab("inspect", source, timeout=600)
    assert code == 0 and "Traceback" not in stderr, stderr[-2000:]


# -- stopped while writing ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def big_grid(tmp_path_factory):
    from layoutlab.samples import geos

    return geos.write_geos(tmp_path_factory.mktemp("big") / "grid.nc", shape=(400, 181, 288))


def _start(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "layoutlab.cli", *map(str, args)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(predicate, process, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def _leftovers(directory: Path, before: set) -> set:
    return {p.name for p in directory.iterdir()} - before


@pytest.mark.parametrize("command", ["rechunk", "repack"])
def test_sigterm_while_writing_removes_the_partial_output_and_stops_the_worker(command, big_grid, tmp_path):
    out = tmp_path / ("out.zarr" if command == "rechunk" else "out.h5")
    extra = ["--no-progress", "--chunks", "time=400,lat=10,lon=10"] if command == "rechunk" else ["--page-size", "64KiB"]
    before = {p.name for p in tmp_path.iterdir()}
    process = _start(command, big_grid, out, *extra)
    workers = []

    def writing():
        workers[:] = psutil.Process(process.pid).children(recursive=True) if process.poll() is None else workers
        if command == "rechunk":
            return out.exists() and any((out / "BCEXTTAU").glob("c/*")) if (out / "BCEXTTAU").exists() else False
        return any(name.startswith(f".{out.name}.partial") or name.startswith(f"{out.name}.partial")
                   for name in _leftovers(tmp_path, before))

    assert _wait_for(writing, process), f"{command} ended before it wrote anything: {process.stderr.read()}"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert "SIGTERM" in stderr and "Traceback" not in stderr
    assert _leftovers(tmp_path, before) == set()
    time.sleep(0.5)
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]


def test_a_worker_dies_with_its_parent_even_when_the_parent_is_killed(big_grid, tmp_path):
    out = tmp_path / "out.h5"
    process = _start("repack", big_grid, out, "--page-size", "64KiB")
    workers = []

    def forked():
        if process.poll() is None:
            workers[:] = psutil.Process(process.pid).children(recursive=True)
        return bool(workers)

    assert _wait_for(forked, process), "repack ended before it forked its worker"
    process.kill()
    process.communicate(timeout=60)
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert alive == []


def test_repack_of_a_file_with_a_corrupt_compressed_chunk_is_refused_naming_it(tmp_path):
    """The chunk's bytes copy faithfully (its index is intact); --verify (the default) decodes them."""
    source = _corrupt_compressed_chunk(tmp_path / "corrupt.h5")
    out = tmp_path / "paged.h5"
    code, _, stderr, _ = run_layoutlab("repack", source, out)
    assert code == 2 and "Traceback" not in stderr, stderr
    assert str(source) in stderr and "cannot be decoded (damaged data)" in stderr and "/z" in stderr, stderr
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["corrupt.h5"]


def test_an_attribute_larger_than_zarr_metadata_should_hold_is_left_out_with_the_reason(tmp_path):
    from layoutlab.convert.rechunk_zarr import MAX_ATTRIBUTE_BYTES

    source = tmp_path / "big-attribute.h5"
    with h5py.File(source, "w", libver="latest") as f:  # (dense attribute storage holds any size)
        f["x"] = np.arange(3, dtype="f4")
        f.attrs["history"] = "a" * (MAX_ATTRIBUTE_BYTES + 1)  # variable-length: its size known once read
        f["x"].attrs["notes"] = np.frombuffer(b"b" * (MAX_ATTRIBUTE_BYTES + 1), dtype="S1")  # fixed-size
        f["x"].attrs["units"] = "K"
    out = tmp_path / "out.zarr"
    code, stdout, stderr, _ = run_layoutlab("rechunk", source, out, "--no-progress")
    assert code == 0, stderr
    import json

    skipped = {(s["variable"], s.get("attribute")): s["reason"] for s in json.loads(stdout)["skipped"]}
    assert {("/", "history"), ("x", "notes")} <= set(skipped), skipped
    assert all("MiB" in skipped[k] for k in (("/", "history"), ("x", "notes")))
    assert sum(p.stat().st_size for p in out.rglob("zarr.json")) < 64 * 1024
    import zarr

    assert zarr.open_group(zarr.storage.LocalStore(out, read_only=True), mode="r")["x"].attrs["units"] == "K"


# --- issue 36: a filter whose plugin is absent. Before: rechunk exited 0 without the variable (a store
# that looks complete) and repack said "verified ... (0 chunks)" of chunks it had not decoded.

def test_rechunk_fails_naming_a_variable_whose_filter_plugin_is_absent(tmp_path):
    from hostile_files import ABSENT_FILTER_ID, absent_filter

    source = absent_filter(tmp_path / "absent.h5")
    out = tmp_path / "out.zarr"
    code, stdout, stderr, _ = run_layoutlab("rechunk", source, out, "--no-progress", timeout=120)
    assert code == 2, (stdout[-1000:], stderr[-2000:])
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(source) in lines[0], stderr
    assert "variable packed" in lines[0] and str(ABSENT_FILTER_ID) in lines[0] and "absent" in lines[0], stderr
    assert not out.exists()


def test_repack_says_which_chunks_it_could_not_decode_instead_of_verifying_them(tmp_path):
    from hostile_files import ABSENT_FILTER_ID, absent_filter

    source = absent_filter(tmp_path / "absent.h5")
    code, stdout, stderr, _ = run_layoutlab("repack", source, tmp_path / "out.h5", timeout=120)
    assert code == 0, stderr[-2000:]
    assert "every stored chunk of the input decoded" not in stdout, stdout
    not_decoded = [line for line in stdout.splitlines() if "NOT decoded" in line]
    assert len(not_decoded) == 1 and "/packed (4 chunks)" in not_decoded[0], stdout
    assert str(ABSENT_FILTER_ID) in not_decoded[0], stdout
    with h5py.File(tmp_path / "out.h5") as f:  # (the copy keeps its chunks as stored)
        assert f["packed"].id.get_num_chunks() == 4


def test_a_hard_link_cycle_is_walked_once_and_reported(tmp_path):
    """Issue 36: a group linking back to its ancestor. Before: rechunk followed paths (a/b/loop/b/loop/...)
    until the task's timeout; inspect and repack walk by object already. After: each group once, the
    cycle named in rechunk's ``skipped`` and in inspect's report; the data is all there."""
    import json

    from hostile_files import hard_link_cycle

    source = hard_link_cycle(tmp_path / "cycle.h5")
    out = tmp_path / "out.zarr"
    code, stdout, stderr, _ = run_layoutlab("rechunk", source, out, "--no-progress", timeout=60)
    assert code == 0, stderr[-2000:]
    skipped = {s["group"]: s["reason"] for s in json.loads(stdout)["skipped"] if "group" in s}
    assert "a cycle" in skipped["a/b/loop"] and "ancestor group a " in skipped["a/b/loop"], skipped
    assert "a cycle" in skipped["a/b/root"], skipped
    import zarr

    root = zarr.open_group(str(out), mode="r")
    assert np.array_equal(root["a/b/x"][:], np.arange(6)) and root["temperature"].shape == (2, 3, 4)
    code, stdout, stderr, _ = run_layoutlab("inspect", source, "--json", timeout=60)
    assert code == 0, stderr[-2000:]
    assert '"link": "/a/b/loop"' in stdout and '"group": "/a"' in stdout, stdout[-3000:]
    for command in ("repack",):  # (walks by object: finishes, every dataset copied once)
        code, _, stderr, _ = run_layoutlab(command, source, tmp_path / "out.h5", timeout=60)
        assert code == 0, stderr[-2000:]


@pytest.mark.parametrize("userblock", [512, 128 * 1024])
def test_a_valid_file_with_a_user_block_is_read_by_every_command(userblock, tmp_path):
    """Issue 36: HDF5 finds its signature at 0, 512, 1024, 2048, ... Before: rechunk read 8 bytes at 0 and
    said "no HDF5 signature" for a 512-byte user block; beyond 64 KiB inspect said "unknown" and repack
    "not an HDF5 file"."""
    source = tmp_path / "userblock.h5"
    with h5py.File(source, "w", userblock_size=userblock) as f:
        f["t"] = np.arange(24, dtype="f4").reshape(2, 3, 4)
    code, _, stderr, _ = run_layoutlab("rechunk", source, tmp_path / "out.zarr", "--no-progress", timeout=60)
    assert code == 0, stderr[-2000:]
    code, stdout, stderr, _ = run_layoutlab("inspect", source, timeout=60)
    assert code == 0 and "format          hdf5" in stdout, (stdout, stderr[-2000:])
    code, _, stderr, _ = run_layoutlab("repack", source, tmp_path / "out.h5", timeout=60)
    assert code == 0, stderr[-2000:]


def test_a_grid_without_dimension_scales_gets_the_true_reason_in_one_line(tmp_path):
    """Issue 36: the pipeline's plan names the axes of a grid without dimension scales dim0, dim1, dim2; the
    FAILURE said only "--chunks names dimension(s) dim0... not in the file"."""
    source = tmp_path / "nodims.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("temperature", data=np.zeros((4, 5, 6), "f4"), chunks=(1, 5, 6))
    code, _, stderr, _ = run_layoutlab("rechunk", source, tmp_path / "out.zarr", "--chunks", "dim0=2,dim1=5,dim2=6",
                                       "--no-progress", timeout=60)
    assert code == 2, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(source) in lines[0], stderr
    assert "variable temperature has no dimension scales" in lines[0], stderr
    assert "phony_dim_0, phony_dim_1, phony_dim_2" in lines[0], stderr
