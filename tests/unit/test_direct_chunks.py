"""Rechunk's direct read of deflate (+ shuffle) chunks (convert/direct_chunks.py) gives exactly what h5py reads,
and leaves to h5py (None) every case it cannot reproduce: a chunk not stored, a filter it does not undo, a
byte order not native, a damaged chunk."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from layoutlab.convert.direct_chunks import read_region

REGIONS = [((0, 0), (12, 9)), ((3, 2), (11, 7)), ((8, 4), (13, 9)), ((12, 8), (13, 9))]


@pytest.mark.parametrize("dtype", ["i1", "u2", "i4", "f4", "f8"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_region_equals_h5pys_read(tmp_path, dtype, shuffle):
    rng = np.random.default_rng(3)
    values = (rng.random((13, 9)) * 100).astype(dtype)
    path = tmp_path / "grid.h5"
    with h5py.File(path, "w") as f:  # 13 x 9 in 4 x 4 chunks: edge chunks on both axes
        f.create_dataset("v", data=values, chunks=(4, 4), compression="gzip", shuffle=shuffle)
    with h5py.File(path, "r") as f:
        for start, stop in REGIONS:
            got = read_region(f["v"], start, stop)
            assert got is not None
            assert got.dtype == values.dtype
            np.testing.assert_array_equal(got, values[start[0]:stop[0], start[1]:stop[1]])


def test_what_it_cannot_reproduce_is_left_to_h5py(tmp_path):
    path = tmp_path / "others.h5"
    with h5py.File(path, "w") as f:
        partly = f.create_dataset("partly_written", shape=(8, 8), chunks=(4, 4), dtype="f4", compression="gzip",
                                  fillvalue=-1)
        partly[:4, :4] = 1
        f.create_dataset("big_endian", data=np.arange(64, dtype=">f4").reshape(8, 8), chunks=(4, 4),
                         compression="gzip")
        f.create_dataset("fletcher32", data=np.arange(64, dtype="f4").reshape(8, 8), chunks=(4, 4),
                         compression="gzip", fletcher32=True)
        f.create_dataset("no_filter", data=np.arange(64, dtype="f4").reshape(8, 8), chunks=(4, 4))
        f.create_dataset("contiguous", data=np.arange(64, dtype="f4").reshape(8, 8))
    with h5py.File(path, "r") as f:
        for name in ("partly_written", "big_endian", "fletcher32", "no_filter", "contiguous"):
            assert read_region(f[name], (0, 0), (8, 8)) is None, name
        assert read_region(f["partly_written"], (0, 0), (4, 4)) is not None  # (the stored chunk alone)


def test_a_damaged_chunk_is_left_to_h5py(tmp_path):
    path = tmp_path / "damaged.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("v", data=np.arange(64, dtype="f8").reshape(8, 8), chunks=(4, 4), compression="gzip")
    with h5py.File(path, "r") as f:
        info = f["v"].id.get_chunk_info_by_coord((4, 0))
    with open(path, "r+b") as stream:
        stream.seek(info.byte_offset + 2)
        stream.write(b"\x00" * 6)
    with h5py.File(path, "r") as f:
        assert read_region(f["v"], (0, 0), (4, 8)) is not None
        assert read_region(f["v"], (0, 0), (8, 8)) is None
