"""A region of a deflate (+ shuffle) dataset read chunk by chunk as stored, and decoded here.

Rechunk reads whole source chunks into each work unit. Through h5py every chunk goes through HDF5's filter
pipeline, whose deflate is layoutlab's bounded filter (bounded_decoding.py: a ctypes callback that copies the
compressed bytes into Python, inflates them and copies the result back into HDF5's memory), and is then
copied out of HDF5's chunk cache into the array: on a 99 MiB grid, HDF5's read path held 0.29 s of a 0.99 s
rechunk where the codec floor inflates and encodes everything in 0.4 s (docs/benchmarks.md). Here each
chunk's stored bytes come from ``read_direct_chunk`` (HDF5's own chunk index), are inflated once by the
same bounded inflater (ISA-L, at most the chunk's declared size) and unshuffled by numcodecs, and their part
of the region is copied into it once.

Only what this reproduces exactly is read this way: a chunked dataset of native-order integers or floats
whose filters are deflate, or shuffle then deflate; every chunk the region touches stored, with no filter
skipped. Anything else, and any chunk that does not inflate to exactly its declared size, gives None: the
caller reads the region through h5py, where HDF5 decides (and the bounded filter names what is wrong).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from layoutlab.bounded_decoding import DEFLATE, SHUFFLE, inflate_bounded

PIPELINES = ([DEFLATE], [SHUFFLE, DEFLATE])  # in the order HDF5 applies them when writing


def read_region(dataset, start, stop) -> np.ndarray | None:
    """``dataset[start:stop]`` (per axis) decoded from its stored chunks, or None where h5py must read it."""
    chunks, dtype = dataset.chunks, dataset.dtype
    if chunks is None or not start or dtype.kind not in "biuf" or not dtype.isnative:
        return None
    plist = dataset.id.get_create_plist()
    if [plist.get_filter(i)[0] for i in range(plist.get_nfilters())] not in PIPELINES:
        return None
    chunk_bytes = math.prod(chunks) * dtype.itemsize
    unshuffle = None
    if plist.get_nfilters() == 2 and dtype.itemsize > 1:
        import numcodecs

        unshuffle = numcodecs.Shuffle(elementsize=dtype.itemsize).decode
    out = np.empty([b - a for a, b in zip(start, stop)], dtype=dtype)
    for origin in itertools.product(*(range(a - a % c, b, c) for a, b, c in zip(start, stop, chunks))):
        if not dataset.id.get_chunk_info_by_coord(origin).size:
            return None  # (not stored: its fill value is HDF5's to give)
        mask, stored = dataset.id.read_direct_chunk(origin)
        if mask:
            return None  # (a filter skipped for this chunk)
        decoded = inflate_bounded(stored, chunk_bytes)
        if isinstance(decoded, str) or len(decoded) != chunk_bytes:
            return None  # (h5py's read refuses it and says why)
        if unshuffle is not None:
            decoded = unshuffle(decoded)
        block = np.frombuffer(decoded, dtype=dtype).reshape(chunks)
        out[tuple(slice(max(a, o) - a, min(b, o + c) - a) for a, b, o, c in zip(start, stop, origin, chunks))] = \
            block[tuple(slice(max(a, o) - o, min(b, o + c) - o) for a, b, o, c in zip(start, stop, origin, chunks))]
    return out
