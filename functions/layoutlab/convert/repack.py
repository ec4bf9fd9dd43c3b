"""``repack``: paged aggregation of one HDF5 file, optionally verified, with the input's chunks decoded meanwhile.

The copy is written by repack_hdf5.py (HDF5's H5Ocopy copies every object that does not change;
the datasets that must change are made anew, their stored chunks and plain attributes copied by
the C loops of _fastcopy.c). There is one engine: a second one, a walk of the whole file in C,
was faster only when the copy is not verified, and verified (the CLI's default and the pipeline's
convert task) the two measured even (#26, docs/benchmarks.md), so its rules were one copy too many.

This module imports h5py only when it runs (``layoutlab repack --help`` stays quick).
"""

from __future__ import annotations

from layoutlab.convert.repack_common import DEFAULT_PAGE_SIZE, RepackSummary, checked_options


def repack(in_path, out_path, page_size: int | str = DEFAULT_PAGE_SIZE, target_chunk_bytes=None, chunks=None,
           verify: bool = False, progress=None) -> RepackSummary:
    """Repack ``in_path`` into ``out_path`` with paged aggregation (see repack_hdf5.repack for the options).

    ``verify``: the copy is compared with the input after it is written, and every stored chunk of the
    input is decoded meanwhile, in a child process on the other core (convert/decode_check.py)."""
    in_path, out_path, page_size, target_chunk_bytes = checked_options(in_path, out_path, page_size,
                                                                        target_chunk_bytes)
    decoding = None
    if verify:
        from layoutlab.convert import decode_check

        decoding = decode_check.start(in_path)
    try:
        from layoutlab.convert.repack_hdf5 import repack as write_copy

        return write_copy(in_path, out_path, page_size, target_chunk_bytes, chunks, verify, progress,
                          decoding=decoding)
    finally:
        if decoding is not None:
            decoding.cancel()  # (nothing left to stop when the copy was verified: result() was collected)
