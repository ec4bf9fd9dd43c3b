"""Open a user's HDF5 file so that it cannot reach outside itself.

An HDF5 file can point at files of the machine that opens it:

- **external raw storage** (``H5Pset_external``): a dataset's values are read from any path
  the file names, ``/proc/self/environ`` (the task's credentials) or ``/etc/passwd`` included;
- **virtual datasets** (VDS): a dataset's values are read from source datasets in other files;
- **external links**: a link opens an object of another HDF5 file;
- **user-defined links**: a link whose traversal is a callback of the writer's.

layoutlab converts and benchmarks uploads from anyone, in tasks that hold cloud credentials,
so every HDF5 open of an input goes through ``open_input`` and everything that reads a dataset's
values asks ``data_outside_file`` first: a dataset whose values live outside the file is skipped
or refused with that reason, never read. External links are never followed by any h5py access in
the process once this module has been loaded (``deny_external_links``): their traversal is refused
by HDF5 itself through a link-access callback, whatever the calling code does.

Why not HDF5's own prefixes (``H5Pset_efile_prefix``, ``H5Pset_virtual_prefix``,
``H5Pset_elink_prefix``): HDF5 joins a prefix to a relative name only, keeps an absolute name as
it is (``H5_combine_path``) and lets ``..`` climb out of the prefix, so a prefix is no sandbox.
"""

from __future__ import annotations

import ctypes
import os
import stat

from layoutlab.errors import BadInputFile

# H5L_elink_traverse_t: herr_t (*)(const char *parent_file_name, const char *parent_group_name,
#     const char *child_file_name, const char *child_object_name, unsigned *acc_flags, hid_t fapl_id,
#     void *op_data); a negative return makes HDF5 refuse the traversal.
_ELINK_TRAVERSE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                   ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint), ctypes.c_int64, ctypes.c_void_p)


@_ELINK_TRAVERSE
def _refuse_traversal(parent_file, parent_group, child_file, child_object, acc_flags, fapl_id, op_data):
    return -1


_guarded_lapl = None


def _hdf5_library():
    """The HDF5 library h5py loaded (symbols are looked up through one of h5py's extension modules)."""
    import h5py.h5p

    return ctypes.CDLL(h5py.h5p.__file__)


def deny_external_links() -> None:
    """Make every h5py access in this process refuse to follow external links (idempotent).

    h5py opens objects by name with the link-access property list ``h5py._hl.base.dlapl`` (the
    library's default when it is None); this gives it one whose external-link callback refuses
    every traversal. Listing a link (``group.get(name, getlink=True)``) still works, so a walker
    can say which link it did not follow.
    """
    global _guarded_lapl
    if _guarded_lapl is not None:
        return
    import h5py
    import h5py._hl.base as h5py_base

    lapl = h5py.h5p.create(h5py.h5p.LINK_ACCESS)
    library = _hdf5_library()
    library.H5Pset_elink_cb.argtypes = [ctypes.c_int64, _ELINK_TRAVERSE, ctypes.c_void_p]
    library.H5Pset_elink_cb.restype = ctypes.c_int
    if library.H5Pset_elink_cb(lapl.id, _refuse_traversal, None) < 0:
        raise RuntimeError("HDF5 refused to set the external-link callback (H5Pset_elink_cb)")
    h5py_base.dlapl = lapl
    _guarded_lapl = lapl


def require_regular_file(path, name: str | None = None) -> None:
    """Refuse a FIFO, a device, a socket or a directory: HDF5 would block on one or read forever."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise BadInputFile(name or path, "does not exist") from None
    except OSError as error:
        raise BadInputFile(name or path, f"cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(mode):
        what = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise BadInputFile(name or path, f"is {what}, not a regular file: refused")


def open_input(source, name: str | None = None, **kwargs):
    """``h5py.File(source, "r", **kwargs)`` for a user's file (a path or a file object).

    A path must be a regular file; external links are refused by HDF5 (``deny_external_links``).
    Open errors are h5py's own (OSError and co.): callers word them for their command.
    """
    import h5py

    deny_external_links()
    if isinstance(source, (str, os.PathLike)):
        require_regular_file(source, name)
    return h5py.File(source, "r", **kwargs)


def data_outside_file(dataset) -> str | None:
    """Why the values of ``dataset`` (an h5py Dataset) live outside its file, or None when they do not."""
    import h5py

    dcpl = dataset.id.get_create_plist()
    count = dcpl.get_external_count()
    if count:
        names = [os.fsdecode(dcpl.get_external(i)[0]) for i in range(min(count, 3))]
        more = f" and {count - 3} more" if count > 3 else ""
        return (f"its values are stored in external file(s) {', '.join(repr(n) for n in names)}{more}, outside "
                "the HDF5 file: not read (an uploaded file may not read files of the machine that opens it)")
    if dcpl.get_layout() == h5py.h5d.VIRTUAL:
        sources = sorted({os.fsdecode(dcpl.get_virtual_filename(i)) for i in range(dcpl.get_virtual_count())} - {"."})
        if sources:
            shown = ", ".join(repr(s) for s in sources[:3]) + (f" and {len(sources) - 3} more" if len(sources) > 3 else "")
            return (f"a virtual dataset whose values live in other files ({shown}): not read (an uploaded "
                    "file may not read files of the machine that opens it)")
    return None


def link_outside_file(group, key: str) -> str | None:
    """Why the link ``key`` of ``group`` leads outside the file (external or user-defined), or None."""
    import h5py

    try:
        link = group.get(key, getlink=True)
    except (OSError, KeyError, ValueError, TypeError, RuntimeError):  # h5py knows no class for user-defined links
        return "a user-defined link: not followed"
    if isinstance(link, h5py.ExternalLink):
        return f"an external link to {link.filename}:{link.path}: not followed"
    return None


def iter_objects(root):
    """(path, object) of every group and dataset below ``root`` reached by hard links, each object once: a
    group's members (by name), then those of its sub-groups, depth first (h5netcdf's order). What
    ``visititems`` gives, without H5Ovisit, whose cost grows with the square of the nesting depth (26 s for
    groups nested 2,000 deep), and without recursion: the depth is the uploader's.

    Soft, external and user-defined links are not followed, as H5Ovisit does not follow them.
    """
    import h5py

    seen = {h5py.h5o.get_info(root.id).addr}
    pending = [(root, "")]
    while pending:
        group, prefix = pending.pop()
        children = []
        for key in group:
            try:
                link = group.get(key, getlink=True)
            except (OSError, KeyError, ValueError, TypeError, RuntimeError):  # user-defined links
                continue
            if not isinstance(link, h5py.HardLink):
                continue
            try:
                obj = group[key]
            except (OSError, KeyError, ValueError, RuntimeError):
                continue
            address = h5py.h5o.get_info(obj.id).addr
            if address in seen:
                continue
            seen.add(address)
            children.append((f"{prefix}/{key}" if prefix else key, obj))
        for path, obj in reversed(children):
            if isinstance(obj, h5py.Group):
                pending.append((obj, path))
        for path, obj in children:
            yield path, obj
