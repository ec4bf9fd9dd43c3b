"""The C loops of ``layoutlab repack`` (``_fastcopy.c``), bound to the HDF5 library h5py loaded.

``available()`` is False when the extension was not built (it is optional: a
machine without a C compiler installs layoutlab all the same), when h5py's
library lacks one of the functions, or when ``LAYOUTLAB_FASTCOPY=0``; the
repack then runs its Python loops, which write the same file.
"""

from __future__ import annotations

import ctypes
import os

# In the order of the function table in _fastcopy.c.
FUNCTION_NAMES = (
    "H5Dchunk_iter", "H5Dwrite_chunk", "H5Aget_num_attrs", "H5Aopen_by_idx", "H5Aget_name", "H5Aget_type",
    "H5Aget_space", "H5Acreate2", "H5Aread", "H5Awrite", "H5Aclose", "H5Tget_class", "H5Tdetect_class",
    "H5Tis_variable_str", "H5Tcommitted", "H5Tget_size", "H5Tclose", "H5Sget_simple_extent_type",
    "H5Sget_simple_extent_npoints", "H5Sclose",
)

_module = None
_unavailable_reason: str | None = None
_phil = None  # h5py's lock around every call into the library (it is not thread-safe)


def _load():
    # (h5py is imported here, not at the top: FUNCTION_NAMES serves a probe that must not import it)
    global _module, _unavailable_reason, _phil
    if _module is not None or _unavailable_reason is not None:
        return
    if os.environ.get("LAYOUTLAB_FASTCOPY", "1") == "0":
        _unavailable_reason = "turned off (LAYOUTLAB_FASTCOPY=0)"
        return
    try:
        from layoutlab.convert import _fastcopy
    except ImportError as error:
        _unavailable_reason = f"not built ({error})"
        return
    import h5py
    from h5py._objects import phil

    try:
        # dlsym through one of h5py's own extension modules finds the libhdf5 *it*
        # links (other packages may bring their own copy, e.g. netCDF4's wheel).
        library = ctypes.CDLL(h5py.h5d.__file__)
        addresses = tuple(ctypes.cast(getattr(library, name), ctypes.c_void_p).value for name in FUNCTION_NAMES)
        _fastcopy.bind(addresses)
    except (OSError, AttributeError, ValueError) as error:
        _unavailable_reason = f"cannot bind to h5py's HDF5 library ({error})"
        return
    _module, _phil = _fastcopy, phil


def available() -> bool:
    _load()
    return _module is not None


def unavailable_reason() -> str | None:
    _load()
    return _unavailable_reason


def copy_chunks(src_dset_id, dst_dset_id, src_fd: int, rank: int, span_bytes: int, max_gap: int,
                progress=None) -> tuple[int, int]:
    """Every stored chunk of the source dataset written unchanged into the destination (same chunk
    shape); returns (chunks, bytes read). See copy_chunks in _fastcopy.c."""
    with _phil:
        return _module.copy_chunks(src_dset_id.id, dst_dset_id.id, src_fd, rank, span_bytes, max_gap, progress)


def copy_plain_attributes(src_id, dst_id, index_type: int, start: int) -> tuple[int, int]:
    """Attributes from position ``start`` copied in order until one that is not plain; returns
    (its position or the count, attributes copied). See copy_plain_attributes in _fastcopy.c."""
    with _phil:
        return _module.copy_plain_attributes(src_id.id, dst_id.id, index_type, start)
