"""glibc malloc settings for loops that read or decode chunks into fresh buffers, one after another.

Python has no binding for ``mallopt``, hence ctypes; elsewhere than glibc nothing changes (False).

Why each caller sets them, measured on this project's inputs:
- glibc maps a block above its mmap threshold (128 KiB at start) fresh and unmaps it when freed, and
  gives an arena's free top back to the kernel above the trim threshold; a loop that allocates a
  chunk-sized buffer per chunk then pays a page fault and a page of zeros for every byte it touches.
  The decode check inflates each chunk into a new object (no inflater writes into a given buffer):
  the GEOS-like input's 3.3 MB chunks took 1.43 s on two threads, 0.73 s with freed memory kept.
  (Where a loop can read into its own buffers it does, and needs none of this: --verify's
  comparison of stored chunks, repack_hdf5._same_bytes.)
- The same threshold also moves by itself: each freed mapped block raises it (up to 32 MiB), after
  which buffers come from heap arenas and stay there, fragmented (the rechunker's peak RSS crept past
  its bound). Setting it fixes it: glibc's adjustment is off for the rest of the process.
"""

from __future__ import annotations

import functools

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


@functools.cache
def _mallopt():
    import ctypes

    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # (not glibc: no mallopt)
        return None


def set_malloc_thresholds(mmap_threshold: int | None = None, keep_freed: int | None = None) -> bool:
    """Blocks smaller than ``mmap_threshold`` come from the heap arenas; up to ``keep_freed`` bytes freed
    at an arena's top stay mapped for the next allocation. True when set (glibc), False otherwise."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    done = True
    if mmap_threshold is not None:
        done &= bool(mallopt(M_MMAP_THRESHOLD, int(mmap_threshold)))
    if keep_freed is not None:
        done &= bool(mallopt(M_TRIM_THRESHOLD, int(keep_freed)))
    return done
