"""The native repack engine (the native engine of ``_fastcopy.c``), run from Python without importing h5py or numpy.

It follows the Python engine's design (repack_hdf5.py): HDF5's ``H5Ocopy`` copies every object
that does not change, in one call per member (a whole subtree at once); only the datasets that
must change (COMPACT -> CONTIGUOUS, unlimited -> fixed) and the groups on the way to them are
made anew, and the references H5Ocopy leaves pointing at the source are pointed at the copies.
What it does not do it declines before writing anything (soft/external links, objects linked
twice, committed datatypes, reference data, variable-length fill values, a user block,
rechunking): the Python engine then writes the copy (the dispatch, repack.py, says so in
``notes``). So a repack it can do costs no more start-up than h5repack's (measured in
benchmarks/bench_repack.py). ``LAYOUTLAB_NATIVE_REPACK=0`` turns it off
(``LAYOUTLAB_FASTCOPY=0`` turns off all C code).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from layoutlab import settings
from layoutlab.convert import fastcopy
from layoutlab.convert.preallocate import expected_output_bytes, preallocate, release_preallocation
from layoutlab.convert.repack_common import (
    BLOCK_BYTES,
    METADATA_CACHE_BYTES,
    READ_GAP_BYTES,
    READ_SPAN_BYTES,
    SOURCE_CHUNK_CACHE,
    RepackSummary,
    partial_output,
)

SOURCE_CHUNK_CACHE_SLOTS = 4_099  # (as the Python engine: every open dataset allocates the slot table)


def unavailable_reason() -> str | None:
    """Why the native engine cannot run here (None: it can)."""
    if not settings.value("LAYOUTLAB_NATIVE_REPACK"):
        return "is turned off (LAYOUTLAB_NATIVE_REPACK=0)"
    reason = fastcopy.unavailable_reason()
    return f"is unavailable: C code {reason}" if reason else None


def repack_natively(in_path, out_path, page_size: int, verify=None, progress=None) -> RepackSummary | str:
    """Repack with the native engine (options already checked); the summary, or why it did not
    (``"declined: ..."``, ``"failed: ..."``, ``"is unavailable: ..."``), in which case nothing is left
    behind. ``verify(copy_path, summary)``, when given, checks the copy before it is renamed into
    place (it raises to reject it; the copy is then removed)."""
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
        if verify is not None:
            verify(tmp, summary)
        os.replace(tmp, out_path)
    finally:
        if tmp.exists():
            tmp.unlink()
    summary.output_bytes = out_path.stat().st_size
    return summary
