"""layoutlab repack's C code (``_fastcopy.c``, one module), bound to the HDF5 library h5py links.

The C loops of the repack engine (``copy_chunks``, ``copy_plain_attributes``) and of
--verify (``same_plain_attributes``), called with h5py's identifiers. The library is
found through one of h5py's extension modules on disk (binding imports nothing).

``unavailable_reason()`` says why the C code cannot be used (None when it can):
the extension was not built (it is optional: a machine without a C compiler
installs layoutlab all the same), h5py's library is too old or lacks a function,
or ``LAYOUTLAB_FASTCOPY=0``. Python loops then do the same work and write the
same file.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

from layoutlab import settings

_module = None
_unavailable_reason: str | None = None


def h5py_extension_path() -> str | None:
    """One of h5py's compiled modules (``h5d``): dlsym through it finds the libhdf5 *h5py* links
    (other packages may load their own copy, e.g. netCDF4's wheel). Found without importing h5py."""
    if "h5py" in sys.modules:
        return sys.modules["h5py"].h5d.__file__
    spec = importlib.util.find_spec("h5py")  # (a top-level name: finds the package, runs nothing)
    for directory in (spec.submodule_search_locations or []) if spec else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidate = Path(directory) / f"h5d{suffix}"
            if candidate.exists():
                return str(candidate)
    return None


def _load():
    global _module, _unavailable_reason
    if _module is not None or _unavailable_reason is not None:
        return
    if not settings.value("LAYOUTLAB_FASTCOPY"):
        _unavailable_reason = "turned off (LAYOUTLAB_FASTCOPY=0)"
        return
    try:
        from layoutlab.convert import _fastcopy
    except ImportError as error:
        _unavailable_reason = f"not built ({error})"
        return
    path = h5py_extension_path()
    if path is None:
        _unavailable_reason = "h5py's compiled modules not found"
        return
    try:
        _fastcopy.load(path)
    except OSError as error:
        _unavailable_reason = f"cannot bind to h5py's HDF5 library ({error})"
        return
    _module = _fastcopy


def available() -> bool:
    _load()
    return _module is not None


def unavailable_reason() -> str | None:
    _load()
    return _unavailable_reason


def module():
    """The bound extension module (call ``available()`` first)."""
    _load()
    return _module


def library_lock():
    """h5py's lock around calls into the library when h5py is loaded (the library is not
    thread-safe and h5py holds it around its own calls); nothing to lock otherwise."""
    if "h5py" in sys.modules:
        from h5py._objects import phil

        return phil
    return contextlib.nullcontext()


def copy_chunks(src_dset_id, dst_dset_id, src_fd: int, rank: int, span_bytes: int, max_gap: int,
                progress=None) -> tuple[int, int]:
    """Every stored chunk of the source dataset written unchanged into the destination (same chunk
    shape); returns (chunks, bytes read). See fastcopy_stored_chunks in _fastcopy.c."""
    with library_lock():
        return _module.copy_chunks(src_dset_id.id, dst_dset_id.id, src_fd, rank, span_bytes, max_gap, progress)


def copy_plain_attributes(src_id, dst_id, index_type: int, start: int, order: int = 0) -> tuple[int, int]:
    """Attributes from position ``start`` copied in ``order`` (0 increasing, 2 as stored) until one that
    is not plain; returns (its position or the count, attributes copied). See fastcopy_plain_attributes
    in _fastcopy.c."""
    with library_lock():
        return _module.copy_plain_attributes(src_id.id, dst_id.id, index_type, start, order)


def same_plain_attributes(a_id, b_id, max_bytes: int) -> list[bytes] | None:
    """--verify's attribute check of two objects in C: the names of the attributes left for Python to
    compare (not plain, or over ``max_bytes``), or None when something differs or could not be read
    (Python then compares them all and words it). See same_plain_attributes in _fastcopy.c."""
    with library_lock():
        return _module.same_plain_attributes(a_id.id, b_id.id, max_bytes)
