"""What the repack tests share: h5dump's view of a file, the C code they need, and writers of the
odd files issue 15 found (NULL strings, undefined fill values, a filter whose plugin is absent...).

Imported as ``repack_helpers`` (pytest puts tests/ on the path: pyproject's ``pythonpath``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

import pytest

from layoutlab.convert import fastcopy


def h5dump_p(path) -> str:
    """Header, creation properties (storage offsets included) and every value as ``h5dump -p``
    prints them, the file-name line dropped. Debian's h5dump cannot decode every filter (e.g.
    LZF) and then exits 1: what it printed up to there is returned, with the status."""
    if not shutil.which("h5dump"):
        pytest.skip("h5dump not installed (make sysdeps installs hdf5-tools)")
    done = subprocess.run(["h5dump", "-p", str(path)], capture_output=True, text=True)
    return done.stdout.split("\n", 1)[1] + f"\nstatus {done.returncode}"


def require_c_code() -> None:
    """Skip without the compiled extension; under CI (which installs with a compiler) fail instead."""
    if not fastcopy.available():
        reason = f"C code unavailable: {fastcopy.unavailable_reason()}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def write_sample(kind: str, path) -> None:
    """A small ATL03-like granule (groups, COMPACT datasets, unlimited axes, ~600 DIMENSION_LIST
    attributes) or GEOS-like NetCDF-4 (unlimited time axis whose chunk is longer than the axis)."""
    from layoutlab.samples import atl03, geos

    if kind == "atl03":
        atl03.write_atl03(path, photons=30_000)
    else:
        geos.write_geos(path, shape=(24, 91, 144))


def write_progress_input(path, contiguous: bool = False) -> int:
    """Two gzip-chunked datasets (and a contiguous one if asked): returns the bytes they store."""
    import h5py
    import numpy as np

    rng = np.random.default_rng(1)
    names = ["a", "b"] + (["contiguous"] if contiguous else [])
    with h5py.File(path, "w") as f:
        for name in ("a", "b"):
            f.create_dataset(name, data=rng.normal(size=(4000, 500)).astype("f4"), chunks=(100, 500),
                             compression="gzip")
        if contiguous:
            f["contiguous"] = np.arange(1000.0)
        return sum(f[name].id.get_storage_size() for name in names)


# --- generated reproducers of the classes issue 15 found on third-party files -----------------
# (tests/unit/test_repack_reproducers.py, tests/unit/test_inspect_rechunk_reproducers.py)


# The command is started by a lean launcher (python -I -S, ~10 MB) and measured from there: a process
# forked from pytest carries pytest's resident pages until it execs, and ru_maxrss counts them (a
# long test session grows past 1 GiB; the measure would be pytest's, not the command's).
_LAUNCHER = """
import json, os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as report:
    json.dump([os.waitstatus_to_exitcode(status), usage.ru_maxrss], report)
"""


def run_layoutlab(*args, env=None, timeout=300):
    """``python -m layoutlab.cli ARGS`` as a user runs it: (returncode, stdout, stderr, peak RSS in bytes
    of the command and the guarded child it forks, from ``wait4``)."""
    import json
    import signal
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryFile("w+") as out, \
            tempfile.TemporaryFile("w+") as err:
        report = os.path.join(scratch, "rusage.json")
        process = subprocess.Popen([sys.executable, "-I", "-S", "-c", _LAUNCHER, report, sys.executable, "-m",
                                    "layoutlab.cli", *map(str, args)], stdout=out, stderr=err,
                                   env={**os.environ, **(env or {})}, start_new_session=True)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            pytest.fail(f"layoutlab {' '.join(map(str, args))}: still running after {timeout} s")
        with open(report) as stream:
            returncode, maxrss_kib = json.load(stream)
        out.seek(0)
        err.seek(0)
        return returncode, out.read(), err.read(), maxrss_kib * 1024


def hdf5_library():
    """The libhdf5 h5py uses (for the few calls h5py does not wrap), found through h5py's own module."""
    import ctypes

    import h5py

    return ctypes.CDLL(h5py.h5d.__file__)


def variable_string_type():
    import h5py

    tid = h5py.h5t.C_S1.copy()
    tid.set_size(h5py.h5t.VARIABLE)
    tid.set_cset(h5py.h5t.CSET_UTF8)
    return tid


def c_string_pointers(values, keep: list):
    """HDF5's memory form of variable-length strings: one ``char *`` per value, 0 (NULL) for None.
    h5py writes None as "" (or refuses it), so NULL strings are written through pointers;
    ``keep`` holds the buffers alive until the write is done."""
    import ctypes

    import numpy as np

    pointers = []
    for value in values:
        if value is None:
            pointers.append(0)
        else:
            buffer = ctypes.create_string_buffer(value.encode())
            keep.append(buffer)
            pointers.append(ctypes.addressof(buffer))
    return np.array(pointers, dtype="u8")


def write_null_strings(path, layout: str, null=None) -> None:
    """Variable-length strings holding NULL (``null``) beside "" and text, as h5dump shows them
    (``"a", NULL, ""``): a plain dataset, a compound {id, name}, a compound with an array of three
    strings, and a root attribute. ``layout``: contiguous (HDF5 copies it as it is), compact or
    unlimited (repack makes those anew). ``null=""`` writes the same file with "" instead of NULL."""
    import h5py
    import numpy as np

    keep: list = []
    text = variable_string_type()
    values = ["a", null, ""]
    with h5py.File(path, "w") as f:
        def create(name, tid, n):
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            maxshape = (n,)
            if layout == "compact":
                dcpl.set_layout(h5py.h5d.COMPACT)
            elif layout == "unlimited":
                dcpl.set_chunk((2,))
                maxshape = (h5py.h5s.UNLIMITED,)
            return h5py.h5d.create(f.id, name, tid, h5py.h5s.create_simple((n,), maxshape), dcpl=dcpl)

        plain = create(b"plain", text, 3)
        plain.write(h5py.h5s.ALL, h5py.h5s.ALL, c_string_pointers(values, keep), mtype=text)

        record = h5py.h5t.create(h5py.h5t.COMPOUND, 16)
        record.insert(b"id", 0, h5py.h5t.NATIVE_INT64)
        record.insert(b"name", 8, text)
        rows = np.zeros(3, dtype=[("id", "i8"), ("name", "u8")])
        rows["id"], rows["name"] = [1, 2, 3], c_string_pointers(values, keep)
        create(b"compound", record, 3).write(h5py.h5s.ALL, h5py.h5s.ALL, rows, mtype=record)

        listing = h5py.h5t.create(h5py.h5t.COMPOUND, 8 + 3 * 8)
        listing.insert(b"id", 0, h5py.h5t.NATIVE_INT64)
        listing.insert(b"names", 8, h5py.h5t.array_create(text, (3,)))
        rows = np.zeros(2, dtype=[("id", "i8"), ("names", "u8", (3,))])
        rows["id"] = [1, 2]
        rows["names"] = c_string_pointers(["x", null, "", null, null, "y"], keep).reshape(2, 3)
        create(b"compound_array", listing, 2).write(h5py.h5s.ALL, h5py.h5s.ALL, rows, mtype=listing)

        attr = h5py.h5a.create(f.id, b"strings", text, h5py.h5s.create_simple((3,)))
        attr.write(c_string_pointers(values, keep), mtype=text)


def set_undefined_fill_value(dcpl) -> None:
    """``H5Pset_fill_value(dcpl, type, NULL)``: no fill value at all (H5D_FILL_VALUE_UNDEFINED, as
    files of HDF5 1.4-era tools have); h5py only sets defined ones."""
    import ctypes

    import h5py

    set_fill = hdf5_library().H5Pset_fill_value
    set_fill.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    assert set_fill(dcpl.id, h5py.h5t.NATIVE_INT32.id, None) >= 0
    assert dcpl.fill_value_defined() == h5py.h5d.FILL_VALUE_UNDEFINED


def set_link_phase_change(gcpl, max_compact: int, min_dense: int) -> None:
    """``H5Pset_link_phase_change`` (not wrapped by h5py): 0, 0 stores the group's links densely
    (fractal heap + B-tree v2) from its first link."""
    import ctypes

    assert hdf5_library().H5Pset_link_phase_change(ctypes.c_int64(gcpl.id), max_compact, min_dense) >= 0


def link_storage(group) -> str:
    """How a group stores its links (``H5Gget_info``): "symbol table", "compact" or "dense"."""
    import ctypes

    class GroupInfo(ctypes.Structure):
        _fields_ = [("storage_type", ctypes.c_int), ("nlinks", ctypes.c_uint64), ("max_corder", ctypes.c_int64),
                    ("mounted", ctypes.c_bool)]

    info = GroupInfo()
    assert hdf5_library().H5Gget_info(ctypes.c_int64(group.id.id), ctypes.byref(info)) >= 0
    return {0: "symbol table", 1: "compact", 2: "dense"}[info.storage_type]


@contextlib.contextmanager
def stand_in_filter(filter_id: int, name: bytes):
    """HDF5 filter ``filter_id`` registered in this process for the duration, as a pass-through: files
    written meanwhile carry it as a mandatory filter of their datasets, like files written with a
    compression plugin (lz4, bitshuffle) that the reader does not have."""
    import ctypes

    import h5py

    library = hdf5_library()
    callback_type = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_uint, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint),
                                     ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
                                     ctypes.POINTER(ctypes.c_void_p))

    class FilterClass(ctypes.Structure):  # H5Z_class2_t
        _fields_ = [("version", ctypes.c_int), ("id", ctypes.c_int), ("encoder_present", ctypes.c_uint),
                    ("decoder_present", ctypes.c_uint), ("name", ctypes.c_char_p), ("can_apply", ctypes.c_void_p),
                    ("set_local", ctypes.c_void_p), ("filter", callback_type)]

    unchanged = callback_type(lambda flags, nelements, values, nbytes, buffer_size, buffer: nbytes)
    filter_class = FilterClass(1, filter_id, 1, 1, name, None, None, unchanged)
    assert library.H5Zregister(ctypes.byref(filter_class)) >= 0
    try:
        yield
    finally:
        assert library.H5Zunregister(filter_id) >= 0
    assert not h5py.h5z.filter_avail(filter_id)


NETCDF_DIMENSION_ONLY = "This is a netCDF dimension but not a netCDF variable."


def write_netcdf40_file(path, variables_fixed: bool = False) -> None:
    """A NetCDF-4 file as netCDF 4.0 wrote it (netcdf-c's ref_nc_test_netcdf4_4_0.nc): no
    ``_NCProperties``, no ``_Netcdf4Dimid``; the UNLIMITED dimension ``time`` is a dimension scale of
    length 0 while its variables hold 2 records (ncdump: ``time = UNLIMITED ; // (2 currently)``).
    ``variables_fixed``: the variables' own maximum shape is fixed (time stays UNLIMITED for ncdump)."""
    import h5py
    import numpy as np

    records = 2 if variables_fixed else None
    with h5py.File(path, "w", libver=("v108", "v108"), track_order=True) as f:
        f.attrs["title"] = np.bytes_("netCDF-4.0 era")
        time = f.create_dataset("time", shape=(0,), maxshape=(None,), chunks=(1,), dtype=">f4")
        time.make_scale(f"{NETCDF_DIMENSION_ONLY}{0:10d}")
        x = f.create_dataset("x", shape=(3,), dtype=">f4")
        x.make_scale(f"{NETCDF_DIMENSION_ONLY}{3:10d}")
        temp = f.create_dataset("temp", data=np.arange(6, dtype="f4").reshape(2, 3), maxshape=(records, 3),
                                chunks=(1, 3), fillvalue=np.float32(9.96921e36))
        temp.attrs["units"] = np.bytes_("K")
        temp.dims[0].attach_scale(time)
        temp.dims[1].attach_scale(x)
        count = f.create_dataset("count", data=np.array([7, 8], dtype="i4"), maxshape=(records,), chunks=(1,),
                                 fillvalue=np.int32(-2147483647))
        count.dims[0].attach_scale(time)
