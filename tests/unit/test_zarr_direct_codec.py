"""The direct chunk writer/reader stores exactly the bytes zarr-python would."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from zarr.storage import MemoryStore

from layoutlab.convert.rechunk_zarr import DirectChunkCodec, _array_metadata, _open_writer, compressor_codecs


def _contents(store: MemoryStore) -> dict[str, bytes]:
    async def read():
        from zarr.core.buffer import default_buffer_prototype

        keys = [k async for k in store.list_prefix("")]
        return {k: (await store.get(k, prototype=default_buffer_prototype())).to_bytes() for k in keys}

    return asyncio.run(read())


CASES = [
    # dtype, shape, chunks, compressor, fill, values (None = ramp)
    ("f4", (7, 5, 9), (3, 2, 4), "blosc-zstd:3", 1.0e15, None),
    ("i2", (10, 6), (4, 6), "zstd:3", -999, "with-fill-chunks"),
    ("f8", (5, 5), (2, 2), "none", float("nan"), "with-nan-chunks"),
    ("u1", (33,), (8,), "blosc-lz4:1", 0, None),
    ("?", (4, 4), (3, 3), "blosc-zstd:3", False, None),
]


@pytest.mark.parametrize("dtype,shape,chunks,compressor,fill,values", CASES)
def test_direct_writes_equal_zarrs_own_writes_and_reads_back(dtype, shape, chunks, compressor, fill, values):
    metadata = _array_metadata("v", shape, np.dtype(dtype), chunks, None, compressor_codecs(compressor), fill, {}, None)
    assert DirectChunkCodec.supports(metadata)
    data = (np.arange(np.prod(shape)) % 97).reshape(shape).astype(dtype)
    if values == "with-fill-chunks":
        data[:4] = fill  # a whole row of chunks equal to the fill value: not stored
    if values == "with-nan-chunks":
        data[:2, :2] = np.nan

    by_zarr, by_direct = MemoryStore(), MemoryStore()
    _open_writer(by_zarr, "v", metadata)[...] = data
    DirectChunkCodec(metadata).write_region(by_direct, "v", [0] * len(shape), data, concurrency=4)
    assert _contents(by_direct) == _contents(by_zarr)

    # Reading any region (not aligned to chunks) gives zarr's answer, fill value where nothing is stored.
    start = [n // 3 for n in shape]
    stop = [n - n // 4 for n in shape]
    region = tuple(slice(a, b) for a, b in zip(start, stop))
    got = DirectChunkCodec(metadata).read_region(by_direct, "v", start, stop, concurrency=2)
    np.testing.assert_array_equal(got, _open_writer(by_zarr, "v", metadata)[region])


def test_sharded_arrays_are_left_to_zarr():
    metadata = _array_metadata("v", (8, 8), np.dtype("f4"), (2, 2), (4, 4), compressor_codecs("blosc-zstd:3"), 0.0, {}, None)
    assert not DirectChunkCodec.supports(metadata)
