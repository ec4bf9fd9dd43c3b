"""``repack``: the one entry point of the two repack engines, and the rule that picks one.

- The native engine (repack_native.py, C, no h5py/numpy import) writes the copy when no
  rechunking is asked for and it supports everything in the file: the common case, and the
  one the speed goal is measured on (benchmarks/bench_repack.py).
- Otherwise the Python engine (repack_hdf5.py) writes it, and ``notes`` says why.
Both follow one design (HDF5's H5Ocopy copies what does not change) and write files that
``--verify`` finds identical in content. If the native engine's copy fails ``--verify`` (a
bug of ours, never of the input), it is thrown away and the Python engine writes the copy,
with a note saying so. ``LAYOUTLAB_REPACK_ENGINE=python`` forces the Python engine.

This module imports h5py only when the Python engine or ``--verify`` runs.
"""

from __future__ import annotations

from layoutlab import settings
from layoutlab.convert.repack_common import (
    DEFAULT_PAGE_SIZE,
    CopyDiffers,
    RepackSummary,
    checked_options,
)

ENGINES = settings.REPACK_ENGINES


def chosen_engine() -> str:
    """``LAYOUTLAB_REPACK_ENGINE`` (native | python; default native, which falls back by itself)."""
    return settings.value("LAYOUTLAB_REPACK_ENGINE")


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
        return _repack_with(in_path, out_path, page_size, target_chunk_bytes, chunks, verify, progress, decoding)
    finally:
        if decoding is not None:
            decoding.cancel()  # (nothing left to stop when the copy was verified: result() was collected)


def _repack_with(in_path, out_path, page_size, target_chunk_bytes, chunks, verify, progress, decoding):
    why_python = None  # (rechunking, or LAYOUTLAB_REPACK_ENGINE=python: the Python engine, nothing to note)
    if target_chunk_bytes is None and not chunks and chosen_engine() == "native":
        from layoutlab.convert.repack_native import repack_natively

        try:
            done = repack_natively(in_path, out_path, page_size,
                                   verify=_verifier(in_path, decoding) if verify else None, progress=progress)
        except CopyDiffers as error:  # (the input read fine: the native copy was wrong; the Python engine's turn)
            done = f"wrote a copy that failed --verify ({error})"
        if isinstance(done, RepackSummary):
            return done
        why_python = done
    from layoutlab.convert.repack_hdf5 import repack as repack_in_python

    summary = repack_in_python(in_path, out_path, page_size, target_chunk_bytes, chunks, verify, progress,
                               decoding=decoding)
    if why_python:
        summary.notes.append(f"written by the Python engine: the native engine {why_python}")
    return summary


def _verifier(in_path, decoding):
    def verify(copy_path, summary):
        from layoutlab.convert.repack_hdf5 import verify_copy  # (h5py: only to verify)

        verify_copy(in_path, copy_path, summary, decoding)
    return verify
