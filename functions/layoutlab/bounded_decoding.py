"""Bounded decoding: a deflate chunk that inflates past its declared size is refused, never held.

HDF5's own deflate filter (H5Z_DEFLATE) inflates a chunk into a buffer it doubles until the zlib stream
ends, whatever the dataset declares: a 120-byte chunk of an 8 MB upload that inflates to 1 GiB took
repack's decode check and rechunk to 8.5 GB of memory (issue 36), and a truncated result is what the
reader then got. A chunk's decoded size is known before decoding (its shape times the stored type's
size): anything past it is corruption, and the only safe answer is to refuse the chunk.

``install()`` registers, under deflate's own filter id, a filter whose decoding direction inflates at most ``bound + 1`` bytes and
fails the read when the stream has more, or ends early; its encoding direction calls HDF5's own deflate
(``H5Z_DEFLATE``, exported by the library), so files written here are byte for byte what HDF5 writes.
The public ``H5Zregister`` refuses ids below 256 ("unable to modify predefined filters"), so the
registration goes through ``H5Z_register``, the library-private function behind it (exported by the
shared library, same argument), under h5py's lock; where a library lacks either symbol, ``install``
says so and HDF5's own deflate stays.
Every h5py read of the process goes through it once ``open_input`` has run (every input is opened
there).

The bound is per thread: ``within(dataset)`` sets the dataset's declared chunk size around its reads
(rechunk, the decode check, the benchmark readers); elsewhere the bound is HDF5's own limit on a
chunk (4 GiB), which still refuses what no valid file holds. The refusal's reason is kept for the thread
(``take_refusal``): HDF5 reports only "filter returned failure during read", and ``errors.damaged_reason``
gives the user this one instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import threading

try:  # the inflater: ISA-L where its wheel exists (as the decode check), zlib otherwise
    from isal.isal_zlib import decompressobj
    from isal.isal_zlib import error as _inflate_error
except ImportError:
    from zlib import decompressobj
    from zlib import error as _inflate_error
import zlib as _zlib

DEFLATE, SHUFFLE, FLETCHER32 = 1, 2, 3  # H5Z_FILTER_DEFLATE, H5Z_FILTER_SHUFFLE, H5Z_FILTER_FLETCHER32
H5Z_FLAG_REVERSE = 0x0100
MAX_CHUNK_BYTES = (1 << 32) - 1  # HDF5 refuses to create a chunk of 4 GiB or more (H5Pset_chunk)

# size_t (*H5Z_func_t)(unsigned int flags, size_t cd_nelmts, const unsigned int cd_values[], size_t nbytes,
#     size_t *buf_size, void **buf)
_FILTER_FUNC = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_uint, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint),
                                ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_void_p))


class _FilterClass(ctypes.Structure):  # H5Z_class2_t (H5Zdevelop.h, HDF5 1.14 and 2.0)
    _fields_ = [("version", ctypes.c_int), ("id", ctypes.c_int), ("encoder_present", ctypes.c_uint),
                ("decoder_present", ctypes.c_uint), ("name", ctypes.c_char_p), ("can_apply", ctypes.c_void_p),
                ("set_local", ctypes.c_void_p), ("filter", _FILTER_FUNC)]


_state = threading.local()  # .bound (bytes) and .refusal (str) of this thread
_installed: dict = {}  # "library", "hdf5_deflate", "class", "filter" once installed; "unavailable": reason
_lock = threading.Lock()


def take_refusal() -> str | None:
    """The reason this thread's last read was refused by the bounded filter (cleared on reading it)."""
    reason = getattr(_state, "refusal", None)
    _state.refusal = None
    return reason


def declared_chunk_bytes(dataset) -> int | None:
    """What one stored chunk of ``dataset`` decodes to (None when it is not chunked): its shape times the
    stored type's size, with room for a Fletcher-32 checksum a writer may have put before deflate."""
    import h5py

    dcpl = dataset.id.get_create_plist()
    if dcpl.get_layout() != h5py.h5d.CHUNKED:  # (not h5py's .chunks: it reads the creation properties again)
        return None
    chunks = dcpl.get_chunk()
    filters = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
    element = stored_element_bytes(dataset.id.get_type())
    if element is None:
        return None
    return math.prod(chunks) * element + (4 if FLETCHER32 in filters else 0)


# A variable-length value (string or sequence) is stored in a chunk as its length (4 bytes) and a global
# heap ID (an address of up to 8 bytes and a 4-byte index): 16 bytes, where the type's size in memory is
# a pointer (8) for a string. Sized from memory, a compound of strings would be refused as a bomb.
VLEN_STORED_BYTES = 16


def stored_element_bytes(tid) -> int | None:
    """The bytes one element of type ``tid`` takes in a stored chunk (before filters); None when HDF5's
    encoding of it has no fixed size (a 1.12 ``H5R_ref_t`` reference: its selection is serialised)."""
    import h5py

    cls = tid.get_class()
    if cls == h5py.h5t.VLEN or (cls == h5py.h5t.STRING and tid.is_variable_str()):
        return VLEN_STORED_BYTES
    if cls == h5py.h5t.REFERENCE:
        return tid.get_size() if tid.get_size() in (8, 12) else None  # object / dataset-region refs
    if cls == h5py.h5t.ARRAY:
        base = stored_element_bytes(tid.get_super())
        return None if base is None else base * math.prod(tid.get_array_dims())
    if cls == h5py.h5t.COMPOUND:
        extra = 0
        for i in range(tid.get_nmembers()):
            member = tid.get_member_type(i)
            stored = stored_element_bytes(member)
            if stored is None:
                return None
            extra += max(0, stored - member.get_size())
        return tid.get_size() + extra
    return tid.get_size()


def within(dataset):
    """Reads of ``dataset`` inside refuse a deflate chunk that inflates past its declared size."""
    return bounded_by(declared_chunk_bytes(dataset))


@contextlib.contextmanager
def bounded_by(bound: int | None):
    """Reads inside refuse a deflate chunk that inflates past ``bound`` bytes (None: HDF5's own limit), for
    readers that know the declared chunk size without the h5py Dataset (xarray's encoding)."""
    previous = getattr(_state, "bound", None)
    _state.bound = bound
    try:
        yield
    finally:
        _state.bound = previous


def _refuse(reason: str) -> int:
    _state.refusal = reason
    return 0  # (HDF5: the filter failed; the read fails, nothing is truncated)


def inflate_bounded(data: bytes, bound: int) -> bytes | str:
    """The inflated bytes, or the reason they are refused; never more than ``bound + 1`` bytes held."""
    inflater = decompressobj()
    try:
        out = inflater.decompress(data, bound + 1)
        if len(out) > bound:
            return (f"a deflate chunk inflates past its declared size of {bound} bytes (corrupt: refused, not "
                    "truncated)")
        if not inflater.eof:
            if inflater.unconsumed_tail and inflater.decompress(inflater.unconsumed_tail, 1):
                return (f"a deflate chunk inflates past its declared size of {bound} bytes (corrupt: refused, "
                        "not truncated)")
            return "a deflate chunk's zlib stream ends early (corrupt)"
    except (_inflate_error, _zlib.error) as error:
        return f"a deflate chunk is not a valid zlib stream ({error})"
    return out


def _filter(flags, cd_nelmts, cd_values, nbytes, buf_size, buf):
    installed = _installed
    if not flags & H5Z_FLAG_REVERSE:  # writing: HDF5's own deflate, unchanged
        return installed["hdf5_deflate"](flags, cd_nelmts, cd_values, nbytes, buf_size, buf)
    try:
        bound = getattr(_state, "bound", None) or MAX_CHUNK_BYTES
        result = inflate_bounded(ctypes.string_at(buf[0], nbytes), bound)
        if isinstance(result, str):
            return _refuse(result)
        library = installed["library"]
        out = library.H5allocate_memory(max(1, len(result)), False)
        if not out:
            return _refuse(f"cannot allocate {len(result)} bytes for a decoded chunk")
        ctypes.memmove(out, result, len(result))
        library.H5free_memory(buf[0])
        buf[0] = out
        buf_size[0] = max(1, len(result))
        return len(result)
    except BaseException as error:  # (an exception must not cross into C: the read fails with its reason)
        return _refuse(f"decoding a deflate chunk failed ({error.__class__.__name__}: {error})")


def install() -> str | None:
    """Register the bounded deflate filter in this process (idempotent); the reason it cannot be, or None."""
    if "filter" in _installed or "unavailable" in _installed:
        return _installed.get("unavailable")
    with _lock:
        if "filter" in _installed or "unavailable" in _installed:
            return _installed.get("unavailable")
        import h5py.h5p

        # the library h5py loaded, reached through one of its extension modules (as hdf5_input does; not
        # imported from there: errors -> bounded_decoding -> hdf5_input -> ... -> errors would be a circle)
        library = ctypes.CDLL(h5py.h5p.__file__)
        try:
            hdf5_class = _FilterClass.in_dll(library, "H5Z_DEFLATE")
        except ValueError:
            _installed["unavailable"] = "this HDF5 library does not export H5Z_DEFLATE"
            return _installed["unavailable"]
        library.H5allocate_memory.restype, library.H5allocate_memory.argtypes = ctypes.c_void_p, [ctypes.c_size_t,
                                                                                                  ctypes.c_bool]
        library.H5free_memory.restype, library.H5free_memory.argtypes = ctypes.c_int, [ctypes.c_void_p]
        try:
            register = library.H5Z_register
        except AttributeError:
            _installed["unavailable"] = "this HDF5 library does not export H5Z_register"
            return _installed["unavailable"]
        register.restype, register.argtypes = ctypes.c_int, [ctypes.c_void_p]
        callback = _FILTER_FUNC(_filter)
        ours = _FilterClass(hdf5_class.version, DEFLATE, hdf5_class.encoder_present, hdf5_class.decoder_present,
                            hdf5_class.name, hdf5_class.can_apply,  # (the name is written into files)
                            hdf5_class.set_local, callback)
        _installed.update(library=library, hdf5_deflate=hdf5_class.filter, callback=callback, ours=ours)
        from h5py._objects import phil

        with phil:  # (a private function takes no HDF5 lock of its own: no other h5py call runs meanwhile)
            failed = register(ctypes.byref(ours)) < 0
        if failed:
            _installed.clear()
            _installed["unavailable"] = "HDF5 refused to register the bounded deflate filter (H5Z_register)"
            return _installed["unavailable"]
        _installed["filter"] = True
    return None
