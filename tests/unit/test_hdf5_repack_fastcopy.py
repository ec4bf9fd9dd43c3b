"""The C loops of repack (_fastcopy.c) write the same file as its Python loops, and are used."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from layoutlab.convert import fastcopy, repack_hdf5
from layoutlab.convert.repack_hdf5 import repack
from repack_helpers import h5dump_p, require_c_code, write_progress_input, write_sample

PAGE = 1 << 20


@pytest.fixture
def c_loops():
    require_c_code()


@pytest.mark.parametrize("sample", ["atl03", "geos"])
def test_c_and_python_loops_write_the_same_file(tmp_path, monkeypatch, c_loops, sample):
    src = tmp_path / f"{sample}.h5"
    write_sample(sample, src)
    fast = repack(src, tmp_path / "c.h5", page_size=PAGE)
    monkeypatch.setattr(repack_hdf5.fastcopy, "available", lambda: False)
    slow = repack(src, tmp_path / "python.h5", page_size=PAGE)
    assert h5dump_p(tmp_path / "c.h5") == h5dump_p(tmp_path / "python.h5")
    assert (fast.attributes, fast.datasets, fast.chunks_copied_raw) == (slow.attributes, slow.datasets,
                                                                        slow.chunks_copied_raw)
    assert fast.chunks_copied_raw > 0 and fast.attributes > 0
    assert (tmp_path / "c.h5").stat().st_size == (tmp_path / "python.h5").stat().st_size


def test_progress_counts_every_stored_byte_once(tmp_path, c_loops):
    src = tmp_path / "in.h5"
    stored = write_progress_input(src)
    reported = []
    repack(src, tmp_path / "out.h5", page_size=PAGE, progress=reported.append)
    # stored bytes (gaps between neighbouring chunks included: none here), in 16 MiB-or-less steps
    assert sum(reported) == stored
    assert len(reported) >= 2 and max(reported) < 17 << 20


def test_chunks_that_cannot_be_read_raise_oserror_and_write_nothing(tmp_path, c_loops):
    """The C loop's read error is an OSError (repack turns those into "cannot be read completely")."""
    src, empty = tmp_path / "in.h5", tmp_path / "empty"
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=np.arange(100_000, dtype="f8"), chunks=(10_000,))
    empty.write_bytes(b"")
    fd = os.open(empty, os.O_RDONLY)
    try:
        with h5py.File(src, "r") as f, h5py.File(tmp_path / "out.h5", "w") as out:
            target = out.create_dataset("x", shape=(100_000,), dtype="f8", chunks=(10_000,))
            with pytest.raises(OSError, match="beyond the end of the file"):
                fastcopy.copy_chunks(f["x"].id, target.id, fd, 1, 1 << 20, 64 << 10)
            assert target.id.get_num_chunks() == 0
    finally:
        os.close(fd)


def _chunked(path, mib):
    """A dataset of ``mib`` MiB in 512 KiB chunks: two per 1 MiB read span."""
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.random.default_rng(7).normal(size=mib * (1 << 17)), chunks=(1 << 16,))


@pytest.mark.parametrize("mib", [2, 24])  # under and over READ_AHEAD_MIN_BYTES (8 MiB): in line / read-ahead thread
def test_stored_chunks_are_copied_byte_for_byte_with_and_without_read_ahead(tmp_path, c_loops, mib):
    src = tmp_path / "in.h5"
    _chunked(src, mib)
    fd = os.open(src, os.O_RDONLY)
    try:
        with h5py.File(src, "r") as f, h5py.File(tmp_path / "out.h5", "w") as out:
            target = out.create_dataset("x", shape=f["x"].shape, dtype="f8", chunks=(1 << 16,))
            copied, read = fastcopy.copy_chunks(f["x"].id, target.id, fd, 1, 1 << 20, 64 << 10)
            chunks = f["x"].id.get_num_chunks()
            assert copied == chunks == target.id.get_num_chunks() == 2 * mib and read == mib << 20
            for i in range(chunks):
                offset = f["x"].id.get_chunk_info(i).chunk_offset
                assert target.id.read_direct_chunk(offset) == f["x"].id.read_direct_chunk(offset)
    finally:
        os.close(fd)


def test_a_file_that_ends_midway_stops_the_read_ahead_with_the_reason(tmp_path, c_loops):
    """The reader thread meets the end of the file after a few spans: the copy stops with the
    reason, and no chunk past that point is written."""
    src, cut = tmp_path / "in.h5", tmp_path / "cut.h5"
    _chunked(src, 24)
    cut.write_bytes(src.read_bytes()[: 10 << 20])
    fd = os.open(cut, os.O_RDONLY)
    try:
        with h5py.File(src, "r") as f, h5py.File(tmp_path / "out.h5", "w") as out:
            target = out.create_dataset("x", shape=f["x"].shape, dtype="f8", chunks=(1 << 16,))
            with pytest.raises(OSError, match="beyond the end of the file"):
                fastcopy.copy_chunks(f["x"].id, target.id, fd, 1, 1 << 20, 64 << 10)
            assert 0 < target.id.get_num_chunks() < f["x"].id.get_num_chunks()
    finally:
        os.close(fd)
