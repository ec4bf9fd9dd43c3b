"""A plan's array documents are zarr's own, whether zarr made that array's document or it was
written into a copy of the document zarr made for another array of the same kind."""

from __future__ import annotations

import numpy as np
import pytest

from layoutlab.convert import rechunk_zarr as rz

CASES = [
    # name, shape, dtype, chunks, fill, attrs, dims
    ("a", (10,), np.dtype("f4"), (10,), float("nan"), {"units": "K", "valid_max": float("nan")}, ("x",)),
    ("g/b", (7, 3), np.dtype("f4"), (2, 3), float("nan"), {"scale": [1.5, 2.0]}, ("t", "y")),
    ("c", (0, 4), np.dtype("<i2"), (1, 4), -9, {}, ("n", "m")),
    ("d", (), np.dtype("f8"), (), 0.0, {"note": "scalar"}, ()),
    ("e", (5,), np.dtype(">u8"), (5,), 0, {"_FillValue": 0}, ("x",)),
    ("s", (4,), str, (4,), "", {"long_name": "names"}, ("x",)),
    ("n", (6, 2), np.dtype("f8"), (3, 1), float("inf"), {"flag": True}, None),
]


@pytest.mark.parametrize("compressor", ["blosc-zstd:3", "zstd:1", "none"])
def test_every_document_equals_the_one_zarr_makes_for_that_array(compressor):
    codecs = rz.compressor_codecs(compressor)
    rz._ARRAY_TEMPLATES.clear()
    for name, shape, dtype, chunks, fill, attrs, dims in CASES * 2:  # the second pass reuses the templates
        made = rz._array_metadata(name, shape, dtype, chunks, None, codecs, fill, attrs, dims)
        assert made == rz._zarr_array_metadata(name, shape, dtype, chunks, None, codecs, fill, attrs, dims), name


def test_a_sharded_array_gets_its_inner_chunks_from_zarr():
    codecs = rz.compressor_codecs("blosc-zstd:3")
    made = rz._array_metadata("v", (8, 8), np.dtype("f4"), (2, 2), (4, 4), codecs, 0.0, {}, ("y", "x"))
    assert made["chunk_grid"]["configuration"]["chunk_shape"] == [4, 4]
    assert made["codecs"][0]["configuration"]["chunk_shape"] == [2, 2]
