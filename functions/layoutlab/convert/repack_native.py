"""The native repack engine (``_native_repack.c``), run from Python without importing h5py or numpy.

``repack`` here is what ``layoutlab repack`` calls: the native engine writes the
copy when it can; when it cannot (rechunking asked for, a feature it declines,
the extension not built, or a failure such as a damaged input) the Python engine
of repack_hdf5.py runs instead, which is the only place h5py and numpy are
imported. So a repack the native engine does costs no more start-up than
h5repack's: measured in benchmarks/bench_repack.py.

Since issue 15 the default engine is repack_hdf5's (HDF5's H5Ocopy of the whole tree, then only
what must change made anew): on the shared corpus of third-party files it preserves every file
the native engine got wrong. The native engine runs only when asked
(``LAYOUTLAB_REPACK_ENGINE=native``, for benchmarks/bench_repack.py); ``LAYOUTLAB_NATIVE_REPACK=0``
turns it off (``LAYOUTLAB_FASTCOPY=0`` turns off all C code).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from layoutlab.convert import fastcopy
from layoutlab.convert.preallocate import expected_output_bytes, preallocate, release_preallocation
from layoutlab.convert.repack_common import (
    BLOCK_BYTES,
    DEFAULT_PAGE_SIZE,
    METADATA_CACHE_BYTES,
    READ_GAP_BYTES,
    READ_SPAN_BYTES,
    SOURCE_CHUNK_CACHE,
    RepackSummary,
    checked_options,
    partial_output,
)

SOURCE_CHUNK_CACHE_SLOTS = 4_099  # (as the Python engine: every open dataset allocates the slot table)


def unavailable_reason() -> str | None:
    """Why the native engine cannot run here (None: it can)."""
    if os.environ.get("LAYOUTLAB_NATIVE_REPACK", "1") == "0":
        return "is turned off (LAYOUTLAB_NATIVE_REPACK=0)"
    reason = fastcopy.unavailable_reason()
    return f"is unavailable: C code {reason}" if reason else None


def repack_natively(in_path, out_path, page_size: int, verify: bool = False, progress=None) -> RepackSummary | str:
    """Repack with the native engine (options already checked); the summary, or why it did not
    (``"declined: ..."``, ``"failed: ..."``, ``"is unavailable: ..."``), in which case nothing is left behind."""
    reason = unavailable_reason()
    if reason:
        return reason
    in_path, out_path = Path(in_path), Path(out_path)
    summary = RepackSummary(input=str(in_path), output=str(out_path), page_size=page_size, engine="native",
                            input_bytes=in_path.stat().st_size)
    tmp = partial_output(out_path, os.getpid())
    reserved: list[int | None] = []

    def created():  # the output exists, nothing is written yet: reserve its disk space
        reserved.append(preallocate(tmp, expected_output_bytes(in_path, page_size)))

    started = time.perf_counter()
    try:
        options = (READ_SPAN_BYTES, READ_GAP_BYTES, BLOCK_BYTES, METADATA_CACHE_BYTES, SOURCE_CHUNK_CACHE,
                   SOURCE_CHUNK_CACHE_SLOTS, created)
        try:
            with fastcopy.library_lock():
                status, result = fastcopy.module().repack_file(os.fsencode(in_path), os.fsencode(tmp), page_size,
                                                               options, progress)
        finally:
            if reserved and reserved[0] is not None:
                release_preallocation(reserved[0])
                os.close(reserved[0])
        if status != "done":
            return f"{status}: {result}"
        for name, value in result.items():
            setattr(summary, name, value)
        summary.seconds = time.perf_counter() - started
        if verify:
            from layoutlab.convert.repack_hdf5 import verify_copy  # (h5py: only to verify)

            verify_copy(in_path, tmp, summary)
        os.replace(tmp, out_path)
    finally:
        if tmp.exists():
            tmp.unlink()
    summary.output_bytes = out_path.stat().st_size
    return summary


def repack(in_path, out_path, page_size: int | str = DEFAULT_PAGE_SIZE, target_chunk_bytes=None, chunks=None,
           verify: bool = False, progress=None) -> RepackSummary:
    """``repack_hdf5.repack``, importing h5py and numpy only when the Python engine has to run."""
    in_path, out_path, page_size, target_chunk_bytes = checked_options(in_path, out_path, page_size,
                                                                        target_chunk_bytes)
    declined = None
    if target_chunk_bytes is None and not chunks and os.environ.get("LAYOUTLAB_REPACK_ENGINE") == "native":
        done = repack_natively(in_path, out_path, page_size, verify=verify, progress=progress)
        if isinstance(done, RepackSummary):
            return done
        declined = done
    from layoutlab.convert.repack_hdf5 import repack as repack_in_python

    summary = repack_in_python(in_path, out_path, page_size, target_chunk_bytes, chunks, verify, progress,
                               native=False)
    if declined:
        summary.notes.append(f"written by the Python engine: the native engine {declined}")
    return summary
