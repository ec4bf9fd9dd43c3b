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
from layoutlab.errors import BadInputFile, UserError


def repack(in_path, out_path, page_size: int | str = DEFAULT_PAGE_SIZE, target_chunk_bytes=None, chunks=None,
           verify: bool = False, progress=None, copy_written=None, check_here: bool = False) -> RepackSummary:
    """Repack ``in_path`` into ``out_path`` with paged aggregation (see repack_hdf5.repack for the options).

    ``verify``: the copy is compared with the input after it is written, and every stored chunk of the
    input is decoded meanwhile, in a child process on the other core (convert/decode_check.py).
    ``copy_written``: called with the written copy's path before it is verified (repack_hdf5.repack).
    ``check_here``: the chunks decoded in this process, after the copy, not in a child beside it (for a
    caller that is a guarded child without credentials: decode_check.DecodeCheckHere)."""
    in_path, out_path, page_size, target_chunk_bytes = checked_options(in_path, out_path, page_size,
                                                                        target_chunk_bytes)
    from layoutlab.convert.allocation import covering_allocation, short_allocation

    try:
        return _repack(in_path, out_path, page_size, target_chunk_bytes, chunks, verify, progress, copy_written,
                       check_here)
    except UserError:
        # A superblock whose end of allocation lies before the end of the file, where HDF5 then refuses to
        # read objects: once more from a private copy recording the whole file as allocated
        # (convert/allocation.py), named as the input in every message and in the summary. Only after a
        # failure: some files record a few bytes less than they hold (PyTables': 6) and read as they are.
        if short_allocation(in_path) is None:
            raise
    with covering_allocation(in_path, out_path.parent) as (source, note):
        try:
            summary = _repack(source, out_path, page_size, target_chunk_bytes, chunks, verify, progress,
                              copy_written, check_here)
        except UserError as error:
            raise _naming(error, source, in_path) from None
    summary.input = str(in_path)
    summary.notes.insert(0, note)
    return summary


def _repack(in_path, out_path, page_size, target_chunk_bytes, chunks, verify, progress,
            copy_written=None, check_here=False) -> RepackSummary:
    # h5py and numpy imported before the decode check's child is forked: it inherits them (imported after,
    # both processes paid the import, ~0.15 s of CPU each on a quiet machine: -X importtime showed it twice).
    from layoutlab.convert.repack_hdf5 import repack as write_copy

    decoding = None
    if verify:
        from layoutlab.convert import decode_check

        decoding = decode_check.start(in_path, here=check_here)
    try:
        return write_copy(in_path, out_path, page_size, target_chunk_bytes, chunks, verify, progress,
                          decoding=decoding, copy_written=copy_written)
    finally:
        if decoding is not None:
            decoding.cancel()  # (nothing left to stop when the copy was verified: result() was collected)


def _naming(error: UserError, source, in_path) -> UserError:
    """``error`` raised on the private copy ``source``, naming the input ``in_path`` instead."""
    if isinstance(error, BadInputFile):
        return type(error)(str(in_path) if error.path == str(source) else error.path, error.reason)
    return type(error)(str(error).replace(str(source), str(in_path)))
