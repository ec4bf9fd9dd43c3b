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


_library = None


def _hdf5_library():
    """The HDF5 library h5py loaded (symbols are looked up through one of h5py's extension modules), with
    the signatures of the few calls made through it declared (callers hold ``h5py._objects.phil``)."""
    global _library
    if _library is None:
        import h5py.h5p

        library = ctypes.CDLL(h5py.h5p.__file__)
        i64, c, pointer = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
        for name, restype, argtypes in (
                ("H5Tget_class", c, [i64]),
                ("H5Tget_super", i64, [i64]), ("H5Tclose", c, [i64]), ("H5Tget_size", ctypes.c_size_t, [i64]),
                ("H5Tis_variable_str", c, [i64]), ("H5Tdetect_class", c, [i64, c]), ("H5Tequal", c, [i64, i64]),
                ("H5Aread", c, [i64, i64, pointer]), ("H5Awrite", c, [i64, i64, pointer]),
                ("H5Pget_fill_value", c, [i64, i64, pointer]),
                ("H5Treclaim", c, [i64, i64, i64, pointer]), ("H5garbage_collect", c, []),
                ("H5Tregister", c, [c, ctypes.c_char_p, i64, i64, _CONVERSION]),
                ("H5Tunregister", c, [c, ctypes.c_char_p, i64, i64, _CONVERSION])):
            function = getattr(library, name)
            function.restype, function.argtypes = restype, argtypes
        _library = library
    return _library


def hdf5_library():
    """The HDF5 library h5py uses, for the calls h5py does not offer in the form needed (see ``_hdf5_library``)."""
    return _hdf5_library()


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

    A path must be a regular file; external links are refused by HDF5 (``deny_external_links``); a deflate
    chunk is inflated no further than its declared size (``layoutlab.bounded_decoding``).
    Open errors are h5py's own (OSError and co.): callers word them for their command.
    """
    import h5py

    from layoutlab import bounded_decoding

    deny_external_links()
    bounded_decoding.install()
    if isinstance(source, (str, os.PathLike)):
        require_regular_file(source, name)
    return h5py.File(source, "r", **kwargs)


_NOT_READ = "not read (an uploaded file may not read files of the machine that opens it)"


def data_outside_file(dataset) -> str | None:
    """Why the values of ``dataset`` (an h5py Dataset) would come from anywhere but the file's own stored
    chunks, or None when they would not: external raw storage, a virtual dataset over other files, and a
    virtual dataset over datasets of its own file (source ``"."``) that are themselves any of these, or
    that HDF5 would reach through an external, soft or user-defined link (HDF5 opens a virtual dataset's
    sources with its own link-access properties: ``deny_external_links`` does not apply there). Metadata
    only: no value is read. One line, naming the reason.

    ``LAYOUTLAB_OUTSIDE_FILE_CHECK=0`` switches this pre-pass off (every dataset is called inside): only to
    test that the Landlock restriction (layoutlab/sandbox.py) holds without it.
    """
    from layoutlab import sandbox

    if not sandbox.outside_file_check_on():
        return None
    reason = _outside(dataset, set())
    return f"{reason}: {_NOT_READ}" if reason else None


# A virtual dataset's sources nest (a source in the same file may itself be virtual): how deep the pre-pass
# follows them before it refuses the dataset as too deep to check.
MAX_VIRTUAL_DEPTH = 32


def _outside(dataset, seen: set, depth: int = 0) -> str | None:
    import h5py

    dcpl = dataset.id.get_create_plist()
    count = dcpl.get_external_count()
    if count:
        names = [os.fsdecode(dcpl.get_external(i)[0]) for i in range(min(count, 3))]
        more = f" and {count - 3} more" if count > 3 else ""
        return (f"its values are stored in external file(s) {', '.join(repr(n) for n in names)}{more}, outside "
                "the HDF5 file")
    if dcpl.get_layout() != h5py.h5d.VIRTUAL:
        return None
    mappings = [(os.fsdecode(dcpl.get_virtual_filename(i)), os.fsdecode(dcpl.get_virtual_dsetname(i)))
                for i in range(dcpl.get_virtual_count())]
    sources = sorted({name for name, _ in mappings} - {"."})
    if sources:
        shown = ", ".join(repr(s) for s in sources[:3]) + (f" and {len(sources) - 3} more" if len(sources) > 3 else "")
        return f"a virtual dataset whose values live in other files ({shown})"
    if depth >= MAX_VIRTUAL_DEPTH:
        return f"a virtual dataset whose sources nest more than {MAX_VIRTUAL_DEPTH} deep in its own file"
    seen.add(h5py.h5o.get_info(dataset.id).addr)
    root = dataset.file
    for name in sorted({source for _, source in mappings}):
        where = f"a virtual dataset over {name!r} of its own file"
        if "%" in name:  # (printf-like source names of unlimited mappings: which datasets is not known here)
            return f"{where}, a pattern of names that cannot be checked"
        via = _link_on_path(root, name)
        if via:
            return f"{where}, reached through {via}"
        try:
            source = root[name]
        except (KeyError, OSError, ValueError, RuntimeError):
            continue  # (absent: HDF5 reads the fill value)
        if not isinstance(source, h5py.Dataset):
            continue
        if h5py.h5o.get_info(source.id).addr in seen:
            return f"{where}, whose sources loop back to it"
        inner = _outside(source, seen, depth + 1)
        if inner:
            return f"{where} ({inner})"
    return None


def _link_on_path(root, path: str) -> str | None:
    """The first link on ``path`` (from the file's root) that is not a hard link, described; None when every
    step is a hard link (or the path ends early: HDF5 then reads the fill value)."""
    import h5py

    group = root
    parts = [p for p in path.split("/") if p and p != "."]
    for i, part in enumerate(parts):
        try:
            link = group.get(part, getlink=True)
        except (OSError, KeyError, ValueError, TypeError, RuntimeError):  # h5py knows no class for user-defined links
            return f"a user-defined link {part!r}"
        if link is None:
            return None
        if isinstance(link, h5py.ExternalLink):
            return f"an external link to {link.filename}:{link.path}"
        if isinstance(link, h5py.SoftLink):
            return f"a soft link {part!r} -> {link.path!r}"
        if i < len(parts) - 1:
            try:
                group = group[part]
            except (KeyError, OSError, ValueError, RuntimeError):
                return None
            if not isinstance(group, h5py.Group):
                return None
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


def iter_objects(root, linked_again: list | None = None):
    """(path, object) of every group and dataset below ``root`` reached by hard links, each object once: a
    group's members (by name), then those of its sub-groups, depth first (h5netcdf's order). What
    ``visititems`` gives, without H5Ovisit, whose cost grows with the square of the nesting depth (26 s for
    groups nested 2,000 deep), and without recursion: the depth is the uploader's.

    Soft, external and user-defined links are not followed, as H5Ovisit does not follow them.
    ``linked_again``, when given, receives ``(path, first path)`` of each further hard link to a group
    already walked (a link back to an ancestor is a cycle: walked once, and said).
    """
    import h5py

    seen = {h5py.h5o.get_info(root.id).addr}
    first_paths = {h5py.h5o.get_info(root.id).addr: "/"}
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
            path = f"{prefix}/{key}" if prefix else key
            if address in seen:
                if linked_again is not None and isinstance(obj, h5py.Group):
                    linked_again.append((path, first_paths.get(address, "?")))
                continue
            seen.add(address)
            if isinstance(obj, h5py.Group):
                first_paths[address] = path
            children.append((path, obj))
        for path, obj in reversed(children):
            if isinstance(obj, h5py.Group):
                pending.append((obj, path))
        for path, obj in children:
            yield path, obj


# --- the size of a variable-length value, known without reading it -------------------------------
#
# A variable-length value (string or sequence) is stored as a descriptor (its length and where it lies
# in the file's global heap) and HDF5 reads it whole, with several copies of it in memory (HDF5 2.0
# loads its heap collection, an image of it and a table of 1.5 times its size, then converts it: 5.5
# times a 100 MiB string). ``H5Aget_storage_size`` counts only the descriptors. The lengths are in the
# descriptors: a conversion function registered with HDF5 (``H5Tregister``, public API) from any
# variable-length type to a marker type of ours receives the attribute's values in their file form,
# descriptors only, and writes each value's length in bytes: the heap is never read.
#
# The marker is a 64-bit unsigned integer of precision 61 at offset 3, a type no one converts a
# variable-length value to: HDF5 2.0 refuses to register a soft conversion when an existing path of the same classes
# declines it (h5py's own variable-length -> opaque paths made an opaque marker fail once h5py had read a
# sequence).

_H5T_STRING, _H5T_VLEN = 3, 9
_H5T_PERS_SOFT = 1


class _ConversionData(ctypes.Structure):  # H5T_cdata_t's leading fields (H5T_cmd_t command; H5T_bkg_t need_bkg)
    _fields_ = [("command", ctypes.c_int), ("need_bkg", ctypes.c_int)]


# H5T_conv_t: herr_t (*)(hid_t src_id, hid_t dst_id, H5T_cdata_t *cdata, size_t nelmts, size_t buf_stride,
#     size_t bkg_stride, void *buf, void *bkg, hid_t dxpl_id)
_CONVERSION = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(_ConversionData),
                               ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_int64)
_vlen_bytes = None  # (library, marker type) once registered


def _base_item_bytes(library, type_id) -> int | None:
    """Bytes per item of a variable-length value of ``type_id`` (1 for a string), None when its items are
    themselves variable-length (their data is elsewhere in the heap: not counted here)."""
    if library.H5Tget_class(type_id) == _H5T_STRING:
        return 1
    base = library.H5Tget_super(type_id)
    if base < 0:
        return None
    try:
        if library.H5Tdetect_class(base, _H5T_VLEN) > 0 or (
                library.H5Tget_class(base) == _H5T_STRING and library.H5Tis_variable_str(base) > 0):
            return None
        return int(library.H5Tget_size(base))
    finally:
        library.H5Tclose(base)


@_CONVERSION
def _lengths_in_bytes(src, dst, cdata, count, buf_stride, bkg_stride, buf, bkg, dxpl):
    """File-form descriptors (a 4-byte little-endian length, then the heap address) -> the value's bytes as
    a little-endian uint64 (the marker's bytes), in place; declines (negative) every pair of types but a variable-length one to
    the marker, so HDF5 never picks it for anything else."""
    library = _vlen_bytes[0]
    command = cdata.contents.command
    if command == 0:  # H5T_CONV_INIT: whether this function converts src -> dst
        kind = library.H5Tget_class(src)
        variable = kind == _H5T_VLEN or (kind == _H5T_STRING and library.H5Tis_variable_str(src) > 0)
        if not (variable and library.H5Tequal(dst, _vlen_bytes[1].id) > 0 and _base_item_bytes(library, src) is not None):
            return -1
        cdata.contents.need_bkg = 0
        return 0
    if command != 1:  # H5T_CONV_FREE
        return 0
    import numpy as np

    size = int(library.H5Tget_size(src))
    stride = buf_stride or size
    unit = _base_item_bytes(library, src)
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * (stride * (count - 1) + size)).from_address(buf))
    lengths = np.lib.stride_tricks.as_strided(raw, shape=(count, 4), strides=(stride, 1)).copy().view("<u4").ravel()
    out_stride = buf_stride or 8  # (never wider than the input's: the lengths were copied out above)
    out = (ctypes.c_uint8 * (out_stride * (count - 1) + 8)).from_address(buf)
    np.ndarray((count,), dtype="<u8", buffer=out, strides=(out_stride,))[:] = lengths.astype("<u8") * unit
    return 0


def _vlen_bytes_converter():
    """(library, marker type id), the conversion registered once per process (unregistered at exit, before
    HDF5's own exit handler would call a function Python has already freed)."""
    global _vlen_bytes
    if _vlen_bytes is None:
        import atexit

        import h5py

        library = _hdf5_library()
        marker = h5py.h5t.STD_U64LE.copy()
        marker.set_precision(61)
        marker.set_offset(3)
        _vlen_bytes = (library, marker)
        string = h5py.h5t.C_S1.copy()
        string.set_size(h5py.h5t.VARIABLE)
        sequence = h5py.h5t.vlen_create(h5py.h5t.NATIVE_UINT8)
        # (soft conversions are matched by class: H5T_VLEN for both, a variable-length string included)
        for source in (string, sequence):
            if library.H5Tregister(_H5T_PERS_SOFT, b"layoutlab variable-length bytes", source.id, marker.id,
                                   _lengths_in_bytes) < 0:
                raise RuntimeError("HDF5 refused to register a conversion (H5Tregister)")
        atexit.register(library.H5Tunregister, _H5T_PERS_SOFT, None, -1, -1, _lengths_in_bytes)
    return _vlen_bytes


def attribute_value_bytes(attr) -> int | None:
    """Bytes the value of the attribute ``attr`` (an h5py AttrID) holds once read: its stored size for a
    fixed-size type; for a variable-length string or sequence (at the top level), the lengths of its values
    from their descriptors, the values themselves never read. None when that cannot be known without
    reading (variable-length parts inside compounds, arrays or other sequences)."""
    import h5py
    import numpy as np

    tid = attr.get_type()
    space = attr.get_space()
    if space.get_simple_extent_type() == h5py.h5s.NULL:
        return 0
    if not (tid.detect_class(h5py.h5t.VLEN) or tid.detect_class(h5py.h5t.STRING) and _has_variable_string(tid)):
        return int(attr.get_storage_size())
    variable_top = isinstance(tid, h5py.h5t.TypeVlenID) or (isinstance(tid, h5py.h5t.TypeStringID)
                                                            and tid.is_variable_str())
    if not variable_top:
        return None
    library, marker = _vlen_bytes_converter()
    lengths = np.zeros(max(1, space.get_simple_extent_npoints()), dtype="<u8")
    with h5py._objects.phil:
        if library.H5Aread(attr.id, marker.id, lengths.ctypes.data) < 0:
            return None  # (a type HDF5 found no way to convert: unknown)
    return int(lengths.sum())


def _has_variable_string(tid) -> bool:
    import h5py

    if isinstance(tid, h5py.h5t.TypeStringID):
        return tid.is_variable_str()
    if isinstance(tid, h5py.h5t.TypeCompoundID):
        return any(_has_variable_string(tid.get_member_type(i)) for i in range(tid.get_nmembers()))
    if isinstance(tid, (h5py.h5t.TypeArrayID, h5py.h5t.TypeVlenID)):
        return _has_variable_string(tid.get_super())
    return False
