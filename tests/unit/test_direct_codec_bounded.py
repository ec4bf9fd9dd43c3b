"""Issue 36: rechunk's direct codec decodes a chunk into its declared size, never past it."""

from __future__ import annotations

import numpy as np
import pytest

from layoutlab.convert.rechunk_zarr import DirectChunkCodec, _array_metadata, compressor_codecs


@pytest.mark.parametrize("compressor", ["blosc-lz4:1", "zstd:3"])
def test_a_chunk_that_decodes_past_its_declared_size_is_refused(compressor):
    metadata = _array_metadata("v", (100,), np.dtype("f4"), (10,), None, compressor_codecs(compressor), 0.0, {}, ("x",))
    codec = DirectChunkCodec(metadata)
    chunk = np.arange(10, dtype="f4")
    assert np.array_equal(codec.decode(codec.encode(chunk)), chunk)
    bigger = DirectChunkCodec({**metadata, "chunk_grid": {"name": "regular",
                                                          "configuration": {"chunk_shape": [1 << 20]}}})
    bomb = bigger.encode(np.ones(1 << 20, dtype="f4"))  # 4 MiB where the array declares 40 bytes
    with pytest.raises(ValueError, match="too small"):
        codec.decode(bomb)
