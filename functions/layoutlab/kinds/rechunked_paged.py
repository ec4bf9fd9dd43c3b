"""``rechunked-paged``: a paged HDF5 copy whose chunks are also rechunked towards ``target_chunk_bytes``
(NSIDC's cloud-optimized recipe for ICESat-2 granules); made and read as ``repack-paged`` is."""

from __future__ import annotations

from layoutlab.kinds.repack_paged import PagedKind


class RechunkedPaged(PagedKind):
    name = "rechunked-paged"
    listed = 3
    prefix = "rechunked-paged"


KIND = RechunkedPaged()
