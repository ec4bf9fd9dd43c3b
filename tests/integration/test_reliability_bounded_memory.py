"""Bounded memory: a 4 GiB input converts (repack and rechunk) within a fixed peak RSS.

The input is a real 4 GiB HDF5 file made in milliseconds: one float32 dataset
(1024 x 1024 x 1024) whose chunks are all allocated at creation and never
written (``H5D_ALLOC_TIME_EARLY`` + ``H5D_FILL_TIME_NEVER``), so the file is
4 GiB long but sparse on disk; every byte still has to be read (as zeros),
copied or decoded and encoded by the converters. The repack output goes to
``/dev/shm`` when there is room: writing 4 GiB to disk takes ~30 s here, to
tmpfs ~13 s.

Each conversion runs as the CLI in a fresh process (``isolation.run_isolated``)
with a memory limit (RLIMIT_DATA) and its peak RSS read from the child's own
``VmHWM`` (``ru_maxrss`` would include the pytest image the child was forked
from).

Bounds:
- repack streams one chunk at a time (4 MiB chunks here): peak RSS must stay
  under 256 MiB, 1/16 of the input (import baseline ~50 MiB).
- rechunk ``--max-mem 256MiB``: docs/rechunk.md's guarantee, ``--max-mem`` + import
  baseline (111 MiB measured) + 16 MiB fixed working memory.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from layoutlab.bench.isolation import run_isolated

pytestmark = pytest.mark.slow

MiB = 2**20
SHAPE = (1024, 1024, 1024)  # float32: 4 GiB
CHUNKS = (16, 256, 256)  # 4 MiB
REPACK_BOUND_MIB = 256
RECHUNK_MAX_MEM_MIB = 256
IMPORT_BASELINE_MIB = 111  # docs/rechunk.md, "Memory guarantee" (a whole `layoutlab rechunk` run on a tiny file)
FIXED_WORKING_MIB = 16


def write_sparse_4gib(path: Path) -> Path:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(CHUNKS)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    with h5py.File(path, "w") as f:
        h5py.h5d.create(f.id, b"values", h5py.h5t.IEEE_F32LE, h5py.h5s.create_simple(SHAPE), dcpl=dcpl)
    return path


@pytest.fixture(scope="module")
def big_input(tmp_path_factory):
    path = tmp_path_factory.mktemp("bounded-memory") / "big.h5"
    started = time.perf_counter()
    write_sparse_4gib(path)
    assert path.stat().st_size >= 4 * 2**30
    print(f"\n4 GiB input written in {time.perf_counter() - started:.3f} s "
          f"({path.stat().st_blocks * 512 / MiB:.1f} MiB on disk)")
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture
def roomy_dir(tmp_path):
    """/dev/shm when it has room for a 4 GiB output and a margin, else the test's tmp dir."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > 8 * 2**30:
        folder = shm / f"layoutlab-bounded-{time.time_ns()}"
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    else:
        yield tmp_path


def run_cli(argv: list[str], memory_mb: int):
    started = time.perf_counter()
    # (the conversion reads a local file the test made: the benchmark's sandbox, which confines a case to
    # its own task folder, is not what this test measures)
    outcome = run_isolated("layoutlab.cli:main", argv, memory_mb=memory_mb, cpu=None, timeout=240,
                           env={"LAYOUTLAB_SANDBOX": "0"})
    seconds = time.perf_counter() - started
    assert outcome.ok and outcome.result == 0, outcome.error or outcome.output_tail
    return outcome, seconds


def test_a_4gib_input_repacks_within_256_mib(big_input, roomy_dir):
    out = roomy_dir / "repacked.h5"
    # The RLIMIT_DATA cap (1 GiB) would turn a runaway allocation into a clean MemoryError.
    outcome, seconds = run_cli(["repack", str(big_input), str(out), "--page-size", "8MiB", "--json"], memory_mb=1024)
    print(f"repack 4 GiB: peak RSS {outcome.peak_rss_mb:.0f} MiB ({outcome.peak_rss_source}), {seconds:.1f} s")
    assert outcome.peak_rss_mb < REPACK_BOUND_MIB
    with h5py.File(out, "r") as f:
        values = f["values"]
        assert values.shape == SHAPE and values.dtype == np.float32
        assert f.id.get_create_plist().get_file_space_strategy()[0] == h5py.h5f.FSPACE_STRATEGY_PAGE
        np.testing.assert_array_equal(values[-1, -3:, -3:], np.zeros((3, 3), np.float32))


def test_a_4gib_input_rechunks_within_max_mem(big_input, tmp_path):
    out = tmp_path / "rechunked.zarr"
    bound = RECHUNK_MAX_MEM_MIB + IMPORT_BASELINE_MIB + FIXED_WORKING_MIB
    outcome, seconds = run_cli(
        ["rechunk", str(big_input), str(out), "--chunks", "phony_dim_0=64,phony_dim_1=256,phony_dim_2=256",
         "--compressor", "blosc-lz4:1", "--max-mem", f"{RECHUNK_MAX_MEM_MIB}MiB", "--no-progress"],
        memory_mb=2048)
    print(f"rechunk 4 GiB --max-mem {RECHUNK_MAX_MEM_MIB}MiB: peak RSS {outcome.peak_rss_mb:.0f} MiB "
          f"(bound {bound} MiB), {seconds:.1f} s")
    assert outcome.peak_rss_mb <= bound
    meta = json.loads((out / "values" / "zarr.json").read_text())
    assert meta["shape"] == list(SHAPE)
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [64, 256, 256]
    import zarr

    np.testing.assert_array_equal(zarr.open_array(out / "values", mode="r")[-1, -3:, -3:], np.zeros((3, 3), np.float32))
