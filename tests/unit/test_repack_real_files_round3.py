"""``layoutlab repack`` (and inspect, rechunk) on generated reproducers of the third round of real-file
failures (issue 33): each class written by the test, run as a user runs it (the CLI, verifying, the
default), and judged from outside (h5dump, h5diff, stored bytes), as tests/repack_corpus.py judges the
shared corpus's files themselves (hdf5-tools/test_table_le.h5, pytables/Tables_lzo2_shuffle.h5,
pytables/times-nested-be.h5).
"""

from __future__ import annotations

import ctypes
import json
import shutil
import struct
import subprocess

import h5py
import numpy as np
import pytest

import repack_corpus
from layoutlab import cli
from layoutlab.convert.repack_hdf5 import compare_files
from repack_helpers import run_layoutlab, stand_in_filter

PAGE = "64KiB"
pytestmark = pytest.mark.skipif(any(shutil.which(tool) is None for tool in ("h5dump", "h5diff")),
                                reason="needs hdf5-tools (make sysdeps)")


def repack(src, out, *options) -> str:
    """``layoutlab repack SRC OUT --page-size 64KiB OPTIONS`` (verifying), which must succeed: its stdout."""
    status, stdout, stderr, _ = run_layoutlab("repack", src, out, "--page-size", PAGE, *options)
    assert "Traceback" not in stdout + stderr, stderr
    assert status == 0, stderr
    return stdout


def same_h5dump(a, b) -> str:
    status, before = repack_corpus.h5dump_view(a)
    assert status == 0, before
    assert repack_corpus.h5dump_view(b) == (status, before)
    return before


# --- 1. chunks of the same shape written anew: the values decide ---------------------------------------

TABLE = np.dtype([("Name", "S16"), ("Longitude", "<i4"), ("Pressure", "<f4"), ("Temperature", "<f8")])


def write_table_with_leftovers(path, rows=12, chunk=10):
    """A table as HDF5's table API leaves it (test_table_le.h5's /table2): a compound holding a string,
    unlimited, its last chunk holding leftover bytes beyond the table's end (undefined there: never read)."""
    values = np.zeros(rows, dtype=TABLE)
    values["Name"] = [b"zone%d" % i for i in range(rows)]
    values["Longitude"], values["Pressure"], values["Temperature"] = range(rows), np.arange(rows) / 2, np.arange(rows) * 3
    with h5py.File(path, "w") as f:
        table = f.create_dataset("table2", shape=(rows,), maxshape=(None,), chunks=(chunk,), dtype=TABLE)
        table[:chunk] = values[:chunk]
        last = np.frombuffer(b"\xab" * (chunk * TABLE.itemsize), dtype=TABLE).copy()  # (leftovers)
        last[: rows - chunk] = values[chunk:]
        table.id.write_direct_chunk((chunk,), last.tobytes())
        table.attrs["CLASS"] = np.bytes_("TABLE")
    return values


def test_a_table_whose_chunks_are_written_anew_verifies_by_its_values(tmp_path):
    """test_table_le.h5: the compound's chunks keep their shape but are written anew (converted), so the
    last one's bytes beyond the table's end differ (leftovers in the input, zeros in the copy); --verify
    compared stored bytes only and refused a faithful copy ("/table2: stored chunks differ")."""
    src, out = tmp_path / "in.h5", tmp_path / "out.h5"
    values = write_table_with_leftovers(src)
    stdout = repack(src, out)
    assert "verified" in stdout
    same_h5dump(src, out)
    with h5py.File(out) as f:
        assert f["table2"].chunks == (10,) and f["table2"][:].tobytes() == values.tobytes()


def test_verify_still_finds_a_changed_value_in_a_chunk_written_anew(tmp_path):
    """The values decide only where the stored bytes differ: one flipped byte inside the table's values in
    the copy is still a difference, named as before."""
    src, out = tmp_path / "in.h5", tmp_path / "out.h5"
    write_table_with_leftovers(src)
    repack(src, out)
    assert compare_files(src, out) == []
    with h5py.File(out) as f:
        chunk = f["table2"].id.get_chunk_info_by_coord((10,))
    data = bytearray(out.read_bytes())
    data[chunk.byte_offset + 20] ^= 0x01  # (row 10's Longitude: inside the table)
    out.write_bytes(bytes(data))
    assert compare_files(src, out) == ["/table2: stored chunks differ"]


# --- 2. a default rechunk of a dataset whose filter plugin is absent: the plain copy -------------------

LZO = (305, b"lzo")  # PyTables' LZO filter id; no plugin of it is installed here


@pytest.fixture
def no_plugins(tmp_path, monkeypatch):
    if h5py.h5z.filter_avail(LZO[0]):
        pytest.skip(f"a plugin for filter {LZO[0]} is installed here")
    empty = tmp_path / "no-plugins"
    empty.mkdir()
    monkeypatch.setenv("HDF5_PLUGIN_PATH", str(empty))


def write_lzo_table(path):
    """PyTables' tables (Tables_lzo2_shuffle.h5): unlimited, a chunk longer than the table (fixing the
    unlimited axis shrinks the chunk to it, a rechunk), LZO-compressed (stored bytes stand in for LZO's)."""
    with stand_in_filter(*LZO), h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((100,))
        dcpl.set_filter(LZO[0], h5py.h5z.FLAG_MANDATORY, ())
        space = h5py.h5s.create_simple((5,), (h5py.h5s.UNLIMITED,))
        table = h5py.h5d.create(f.id, b"tuple0", h5py.h5t.STD_I32LE, space, dcpl=dcpl)
        table.write_direct_chunk((0,), b"lzo-compressed bytes of the table")


def test_a_dataset_whose_plugin_is_absent_is_copied_as_stored(tmp_path, no_plugins):
    """Refused before ("...filter 305 (lzo), whose plugin is not installed here: it cannot be
    rechunked"): the dataset cannot be made anew without its filter, so it is copied as stored (chunks
    undecoded, the shape's maximum kept: unlimited), as h5repack does, and the output says so."""
    src, out = tmp_path / "in.h5", tmp_path / "out.h5"
    write_lzo_table(src)
    stdout = repack(src, out)
    assert "/tuple0: kept as it is: its chunks copied as stored (its filter 305 (lzo)" in stdout
    with h5py.File(src) as a, h5py.File(out) as b:
        assert b["tuple0"].chunks == (100,) and b["tuple0"].maxshape == (None,)
        assert b["tuple0"].id.read_direct_chunk((0,)) == a["tuple0"].id.read_direct_chunk((0,))
    assert repack_corpus.h5dump_view(src, "-H") == repack_corpus.h5dump_view(out, "-H")


def test_rechunking_such_a_dataset_on_request_is_still_refused(tmp_path, no_plugins):
    src = tmp_path / "in.h5"
    write_lzo_table(src)
    status, _, stderr, _ = run_layoutlab("repack", src, tmp_path / "out.h5", "--page-size", PAGE,
                                         "--chunks", "/tuple0=2")
    assert status != 0 and "Traceback" not in stderr
    assert "filter 305 (lzo), whose plugin is not installed here: it cannot be rechunked" in stderr


# --- 3. H5T_TIME inside a nested big-endian compound --------------------------------------------------


def write_times(path):
    """PyTables' times-nested-be.h5: a big-endian compound holding a compound of H5T_TIME values, and
    H5T_TIME arrays, unlimited (a rechunk), with a fill value: h5py has no numpy type for H5T_TIME."""
    inner = h5py.h5t.create(h5py.h5t.COMPOUND, 12)
    inner.insert(b"t32", 0, h5py.h5t.UNIX_D32BE)
    inner.insert(b"t64", 4, h5py.h5t.UNIX_D64BE)
    outer = h5py.h5t.create(h5py.h5t.COMPOUND, 16)
    outer.insert(b"i", 0, h5py.h5t.STD_I32BE)
    outer.insert(b"Times", 4, inner)
    rows = 10
    with h5py.File(path, "w") as f:
        for name, tid in ((b"tbl", outer), (b"earr64", h5py.h5t.UNIX_D64BE)):
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk((64,))
            fill = np.frombuffer(b"\x01" * tid.get_size(), dtype=f"V{tid.get_size()}")  # (no numpy type: raw bytes)
            set_fill = ctypes.CDLL(h5py.h5p.__file__).H5Pset_fill_value
            set_fill.restype, set_fill.argtypes = ctypes.c_int, [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
            assert set_fill(dcpl.id, tid.id, fill.ctypes.data) >= 0
            space = h5py.h5s.create_simple((rows,), (h5py.h5s.UNLIMITED,))
            dataset = h5py.h5d.create(f.id, name, tid, space, dcpl=dcpl)
            raw = np.frombuffer(bytes(range(256)) * 2, dtype=f"V{tid.get_size()}", count=rows).copy()
            dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=tid)


def test_time_values_in_a_nested_big_endian_compound_are_copied_through_hdf5(tmp_path):
    """A traceback before ("TypeError: No NumPy equivalent for TypeTimeID exists", from --verify's fill
    value and chunk sizes): the values are copied and compared as HDF5 stores them."""
    src, out = tmp_path / "in.h5", tmp_path / "out.h5"
    write_times(src)
    assert "verified" in repack(src, out)
    with h5py.File(src) as a, h5py.File(out) as b:
        for name in ("tbl", "earr64"):
            tid = a[name].id.get_type()
            assert b[name].id.get_type().equal(tid)
            raw = [np.empty(10, dtype=f"V{tid.get_size()}") for _ in range(2)]
            a[name].id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw[0], mtype=tid)
            b[name].id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw[1], mtype=tid)
            assert raw[0].tobytes() == raw[1].tobytes()
    done = subprocess.run(["h5diff", "-c", str(src), str(out)], capture_output=True, text=True)
    assert "differences found" not in done.stdout


def test_inspect_reports_on_time_values(tmp_path, capsys):
    src = tmp_path / "in.h5"
    write_times(src)
    assert cli.main(["inspect", "--json", str(src)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "hdf5" and report["hdf5"] is not None
    assert cli.main(["inspect", "--check", str(src)]) == 1  # (the check's page model sized its chunks by numpy)
    assert "unlimited" in capsys.readouterr().out


def test_rechunk_names_the_time_type_it_cannot_write(tmp_path):
    src = tmp_path / "in.h5"
    write_times(src)
    status, _, stderr, _ = run_layoutlab("rechunk", "--no-progress", src, tmp_path / "out.zarr")
    assert status != 0 and "Traceback" not in stderr
    assert "the HDF5 time type (H5T_TIME) has no NumPy or Zarr v3 data type" in stderr
    assert "1.12-style" not in stderr


# --- 4. a superblock whose end of allocation lies before the file's objects ----------------------------


def write_with_short_allocation(path, libver) -> int:
    """A file whose superblock records an end of allocation (EOA) before its last group (ICESat-2 subsets
    written by a subsetting service): the file written, then the superblock's end-of-file address
    lowered (and, for superblocks 2 and 3, its checksum made again)."""
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("a", data=np.arange(1000.0))
        f.create_group("g").create_dataset("b", data=np.arange(5000, dtype="i4"), chunks=(1000,), compression="gzip")
        f.create_group("late").create_dataset("c", data=np.arange(10))
        lowered = h5py.h5o.get_info(f["late"].id).addr - 16
    data = bytearray(path.read_bytes())
    if data[8] == 0:
        struct.pack_into("<Q", data, 40, lowered)
    else:
        struct.pack_into("<Q", data, 28, lowered)
        checksum = ctypes.CDLL(h5py.h5p.__file__).H5_checksum_metadata
        checksum.restype, checksum.argtypes = ctypes.c_uint32, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32]
        struct.pack_into("<I", data, 44, checksum(bytes(data[:44]), 44, 0))
    path.write_bytes(bytes(data))
    return lowered


@pytest.mark.parametrize("libver", ["earliest", "v110"], ids=["superblock-0", "superblock-3"])
def test_a_file_whose_allocation_ends_before_its_objects_is_copied_from_a_private_fixed_copy(tmp_path, libver):
    """Refused before ("HDF5 failed to copy it: KeyError: 'Unable to open object by token (address of
    object past end of allocation)'"): read from a private copy whose superblock records the whole file
    as allocated; the input is unchanged and the output dumps as the input fixed by HDF5's own h5clear
    --increment does."""
    src, out = tmp_path / "in.h5", tmp_path / "out.h5"
    lowered = write_with_short_allocation(src, libver)
    before = src.read_bytes()
    with pytest.raises(KeyError, match="past end of allocation"), h5py.File(src) as f:
        f["late/c"]
    stdout = repack(src, out)
    assert f"superblock records {lowered} bytes allocated, less than the file's {len(before)}" in stdout
    assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5", "out.h5"]  # (no private copy left)
    with h5py.File(out) as f:
        assert list(f["late/c"][:]) == list(range(10)) and f["g/b"][-1] == 4999
    if shutil.which("h5clear"):
        fixed = tmp_path / "fixed.h5"
        shutil.copyfile(src, fixed)
        subprocess.run(["h5clear", "--increment", str(fixed)], check=True, capture_output=True)
        same_h5dump(fixed, out)


# --- 5. references inside attributes: compounds and variable-length sequences of them -----------------


def write_attribute_references(path):
    """HDF5's h5repack_attr_refs.h5, written with h5py: object and region references in attributes of
    compound and variable-length types (a vlen of region references crashed repack: SIGSEGV)."""
    with h5py.File(path, "w") as f:
        dset = f.create_dataset("Dset1", data=np.arange(12, dtype="i4").reshape(3, 4))
        group = f.create_group("Group1")
        target = f.create_dataset("target", data=np.arange(4))
        region = dset.regionref[0:2, 1:3]
        objects = np.dtype([("x", "i4"), ("ref", h5py.ref_dtype)])
        target.attrs.create("Attr_Compound_Obj_Ref", np.array([(1, dset.ref), (2, group.ref)], dtype=objects))
        regions = np.dtype([("x", "i4"), ("ref", h5py.regionref_dtype)])
        target.attrs.create("Attr_Compound_Reg_Ref", np.array([(1, region), (2, region)], dtype=regions))
        for name, kind, refs in (("Attr_VLEN_Obj_Ref", h5py.ref_dtype, [[dset.ref, group.ref], [dset.ref]]),
                                 ("Attr_VLEN_Reg_Ref", h5py.regionref_dtype, [[region, region], [region]])):
            values = np.empty(2, dtype=object)
            values[:] = [np.array(r, dtype=kind) for r in refs]
            target.attrs.create(name, values, dtype=h5py.vlen_dtype(kind))
        values = np.empty(1, dtype=object)
        values[0] = np.array([region], dtype=h5py.regionref_dtype)
        f.create_dataset("vlen_regions", data=values, dtype=h5py.vlen_dtype(h5py.regionref_dtype))


def test_references_in_attributes_of_compound_and_vlen_types_are_copied(tmp_path):
    src, out = tmp_path / "in.h5", tmp_path / "out.h5"
    write_attribute_references(src)
    assert "verified" in repack(src, out)
    dump = same_h5dump(src, out)
    assert dump.count('DATASET "/Dset1"') == 9 and dump.count('GROUP "/Group1"') == 2


def test_verify_finds_a_region_reference_to_another_selection(tmp_path):
    """Region references are compared by target and selection (read through HDF5, not h5py): a copy whose
    vlen of region references selects other elements differs."""
    src, out = tmp_path / "in.h5", tmp_path / "out.h5"
    write_attribute_references(src)
    repack(src, out)
    with h5py.File(out, "r+") as f:
        other = f["Dset1"].regionref[1:3, 0:2]
        values = np.empty(2, dtype=object)
        values[:] = [np.array([other, other], dtype=h5py.regionref_dtype),
                     np.array([other], dtype=h5py.regionref_dtype)]
        f["target"].attrs.create("Attr_VLEN_Reg_Ref", values, dtype=h5py.vlen_dtype(h5py.regionref_dtype))
    assert compare_files(src, out) == ["/target: attribute 'Attr_VLEN_Reg_Ref' differs"]


# --- references to objects no link reaches (OMPS NO2 L2's dimension scales) ----------------------------


def write_reference_to_an_unlinked_dataset(path):
    """A dimension-scale-like REFERENCE_LIST whose entry points at a dataset no link reaches (its link removed
    while it stays counted: OMPS-NPP NMNO2 L2's subsetter left 12 such), and a reference to a linked one."""
    with h5py.File(path, "w", libver="earliest") as f:
        kept = f.create_dataset("kept", data=np.arange(3.0))
        dropped = f.create_dataset("dropped", data=np.arange(400.0))
        dropped.attrs["units"] = np.bytes_("m")
        incr = ctypes.CDLL(h5py.h5p.__file__).H5Oincr_refcount
        incr.restype, incr.argtypes = ctypes.c_int, [ctypes.c_int64]
        assert incr(dropped.id.id) >= 0
        refs = np.array([(kept.ref, 0), (dropped.ref, 1)], dtype=[("dataset", h5py.ref_dtype), ("dimension", "<i4")])
        f.create_dataset("scale", data=np.arange(4)).attrs["REFERENCE_LIST"] = refs
        del f["dropped"]


def test_a_reference_to_a_dataset_no_link_reaches_points_at_its_copy(tmp_path):
    """Before: the reference kept the input's address, where the copy holds other bytes (h5dump printed
    numbers for its kind). Now the unlinked dataset is copied, still linked nowhere, and the reference
    points at that copy."""
    src, out = tmp_path / "in.h5", tmp_path / "out.h5"
    write_reference_to_an_unlinked_dataset(src)
    stdout = repack(src, out)
    assert "an object no link reaches" in stdout
    with h5py.File(out) as f:
        assert sorted(f) == ["kept", "scale"]
        target = f[f["scale"].attrs["REFERENCE_LIST"][1][0]]
        assert list(target[:]) == list(np.arange(400.0)) and target.attrs["units"] == b"m"
        assert h5py.h5o.get_info(target.id).rc == 1
        assert f[f["scale"].attrs["REFERENCE_LIST"][0][0]].name == "/kept"
    same_h5dump(src, out)


# --- a file written by HDF5 2.0 with libver "latest" ------------------------------------------------------

def test_a_file_in_hdf5_2_format_is_copied_keeping_its_format(tmp_path):
    """h5py on HDF5 >= 2.0 with libver="latest" writes layout messages of a version HDF5 1.10's format bounds
    refuse: the copy (1.10 bounds, for 1.10 readers) failed with "layout message version out of bounds".
    Now the copy keeps the newer format where the input needs it, says so, and verifies."""
    if h5py.version.hdf5_version_tuple < (2, 0, 0):
        pytest.skip("needs HDF5 >= 2.0 to write the newer format")
    src, out = tmp_path / "latest.h5", tmp_path / "out.h5"
    values = np.arange(360 * 100, dtype=np.uint8).reshape(360, 100)
    with h5py.File(src, "w", libver="latest") as f:
        f.attrs["Conventions"] = np.bytes_("ODIM_H5/V2_2")
        data = f.create_group("dataset1/data1").create_dataset("data", data=values, chunks=(90, 100),
                                                                 compression="gzip")
        data.attrs["quantity"] = np.bytes_("DBZH")
    stdout = repack(src, out)
    assert "newer than HDF5 1.10's" in stdout and "verified" in stdout
    with h5py.File(out) as f:
        np.testing.assert_array_equal(f["dataset1/data1/data"][...], values)
        assert f["dataset1/data1/data"].attrs["quantity"] == b"DBZH"
        assert f.id.get_create_plist().get_file_space_strategy()[0] == h5py.h5f.FSPACE_STRATEGY_PAGE
    assert compare_files(src, out) == []


def test_a_file_in_1_10_format_keeps_the_1_10_format(tmp_path):
    """The newer format only where the input needs it: a file 1.10 tools read is copied readable by them."""
    src, out = tmp_path / "plain.h5", tmp_path / "out.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("v", data=np.arange(1000.0), chunks=(100,), compression="gzip")
    stdout = repack(src, out)
    assert "newer than HDF5 1.10's" not in stdout
    status, view = repack_corpus.h5dump_view(out)  # Debian's h5dump (HDF5 1.10) reads it
    assert status == 0, view
