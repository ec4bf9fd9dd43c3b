"""repack round trips: write a file, repack it, read both back and compare (xarray's roundtrip style).

Every case goes through ``roundtrip``: repack with ``verify=True`` (decoded data
and attributes compared), then the case's own checks of what a user would see.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from layoutlab.convert import repack_hdf5
from layoutlab.convert.repack import repack
from layoutlab.convert.repack_hdf5 import compare_files
from layoutlab.errors import BadInputFile, UserError
from repack_helpers import h5dump_p, require_c_code

PAGE = 1 << 20  # 1 MiB pages keep test files small


@pytest.fixture(autouse=True, params=["c-loops", "python-loops"])
def loops(request, monkeypatch):
    """Every case runs with the stored-chunk and attribute loops in C (_fastcopy.c, the default) and in
    Python (what runs where the C code is not built); each output must pass --verify."""
    if request.param == "c-loops":
        require_c_code()
    else:
        monkeypatch.setattr(repack_hdf5.fastcopy, "available", lambda: False)
    yield request.param


def roundtrip(tmp_path, write, **options):
    src, out = tmp_path / "in.h5", tmp_path / "out.h5"
    with h5py.File(src, "w", **options.pop("file_options", {})) as f:
        write(f)
    before = src.read_bytes()
    page_size = options.pop("page_size", PAGE)
    summary = repack(src, out, page_size=page_size, verify=True, **options)
    assert summary.verified
    assert src.read_bytes() == before, "the original must never be modified"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5", "out.h5"], "no temporary files left behind"
    with h5py.File(out, "r") as f:
        strategy, persist, threshold = f.id.get_create_plist().get_file_space_strategy()
        assert strategy == h5py.h5f.FSPACE_STRATEGY_PAGE and persist
        assert f.id.get_create_plist().get_file_space_page_size() == PAGE
    return summary, out


def _layout(f, name):
    return f[name].id.get_create_plist().get_layout()


NUMERIC = ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", ">i4", ">f8", "c8", "c16", "?"]


@pytest.mark.parametrize("dtype", NUMERIC)
def test_numeric_dtypes_contiguous_and_chunked(tmp_path, dtype):
    rng = np.random.default_rng(0)
    values = (rng.normal(size=(40, 7)) * 100).astype(dtype)

    def write(f):
        f["contiguous"] = values
        f.create_dataset("chunked", data=values, chunks=(8, 7), compression="gzip", shuffle=True)
        f["contiguous"].attrs["same_type"] = values[0]

    summary, out = roundtrip(tmp_path, write)
    with h5py.File(out, "r") as f:
        assert f["chunked"].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(f["chunked"][:], values)
        assert f["chunked"].chunks == (8, 7)
    assert summary.chunks_copied_raw == 5


def test_filters_and_their_options_are_kept(tmp_path):
    data = np.arange(5000, dtype="i4").reshape(50, 100)

    def write(f):
        f.create_dataset("gzip9", data=data, chunks=(10, 100), compression="gzip", compression_opts=9)
        f.create_dataset("lzf", data=data, chunks=(10, 100), compression="lzf")
        f.create_dataset("fletcher", data=data, chunks=(10, 100), fletcher32=True, shuffle=True)
        f.create_dataset("scaleoffset", data=data, chunks=(10, 100), scaleoffset=0)

    _, out = roundtrip(tmp_path, write)
    with h5py.File(out, "r") as f:
        assert f["gzip9"].compression_opts == 9
        assert f["lzf"].compression == "lzf"
        assert f["fletcher"].fletcher32 and f["fletcher"].shuffle
        assert f["scaleoffset"].scaleoffset == 0


def test_chunks_are_copied_as_stored_bytes_when_chunking_is_unchanged(tmp_path):
    data = np.random.default_rng(1).normal(size=(6, 30, 40)).astype("f4")

    def write(f):
        f.create_dataset("v", data=data, chunks=(1, 30, 40), compression="gzip", maxshape=(None, 30, 40))

    summary, out = roundtrip(tmp_path, write)
    with h5py.File(tmp_path / "in.h5", "r") as a, h5py.File(out, "r") as b:
        for t in range(6):
            assert a["v"].id.read_direct_chunk((t, 0, 0)) == b["v"].id.read_direct_chunk((t, 0, 0))
        assert b["v"].maxshape == (6, 30, 40)
    assert summary.chunks_copied_raw == 6 and summary.unlimited_fixed == ["/v"]


def test_strings_fixed_vlen_and_nullterm_attributes(tmp_path):
    def write(f):
        f["vlen"] = np.array(["alpha", "", "γάμμα"], dtype=h5py.string_dtype())
        f["fixed"] = np.array([b"abc", b"de"], dtype="S3")
        f.create_dataset("vlen_chunked", data=np.array(["x" * n for n in range(50)], dtype=h5py.string_dtype()),
                         chunks=(10,), maxshape=(None,))
        f.attrs["vlen_attr"] = "variable"
        f.attrs["list_attr"] = ["a", "bb"]
        # A NULLTERM string exactly filling its size, as netCDF writes them: copied byte for byte.
        tid = h5py.h5t.C_S1.copy()
        tid.set_size(5)
        tid.set_strpad(h5py.h5t.STR_NULLTERM)
        attr = h5py.h5a.create(f.id, b"nullterm", tid, h5py.h5s.create(h5py.h5s.SCALAR))
        attr.write(np.array(b"hello", dtype="S5"), mtype=tid)

    _, out = roundtrip(tmp_path, write)
    with h5py.File(out, "r") as f:
        assert list(f["vlen"].asstr()[:]) == ["alpha", "", "γάμμα"]
        assert f.attrs["nullterm"] == b"hello"
        assert f.attrs.get_id("nullterm").get_type().get_strpad() == h5py.h5t.STR_NULLTERM
        assert f["vlen_chunked"].asstr()[49] == "x" * 49


def test_enum_compound_array_and_vlen_sequences(tmp_path):
    enum = h5py.enum_dtype({"clear": 0, "cloudy": 1, "missing": 255}, basetype="u1")
    compound = np.dtype([("t", "f8"), ("flag", enum), ("xyz", "f4", (3,)), ("name", h5py.string_dtype())])
    ragged = h5py.vlen_dtype(np.dtype("i4"))

    def write(f):
        f.create_dataset("enum", data=np.array([0, 1, 255, 1], dtype="u1"), dtype=enum)
        rec = np.zeros(3, dtype=compound)
        rec["t"], rec["flag"], rec["xyz"], rec["name"] = [1, 2, 3], [0, 1, 1], np.arange(9).reshape(3, 3), ["a", "b", "c"]
        f.create_dataset("compound", data=rec, chunks=(2,), compression="gzip")
        seqs = np.empty(3, dtype=object)
        seqs[:] = [np.arange(n, dtype="i4") for n in (0, 3, 7)]
        f.create_dataset("ragged", data=seqs, dtype=ragged)
        f.attrs["enum_attr"] = np.array(1, dtype=enum)

    _, out = roundtrip(tmp_path, write)
    with h5py.File(out, "r") as f:
        assert h5py.check_enum_dtype(f["enum"].dtype) == {"clear": 0, "cloudy": 1, "missing": 255}
        assert f["compound"][1]["name"] == b"b"
        assert list(f["ragged"][2]) == list(range(7))


def test_committed_datatypes_stay_shared(tmp_path):
    pair = np.dtype([("a", "f4"), ("b", "i2")])

    def write(f):
        f["pair_t"] = pair
        f.create_dataset("pairs", shape=(2,), dtype=f["pair_t"])
        f["pairs"][:] = np.array([(1.5, 2), (3.5, 4)], dtype=pair)
        f["pairs"].attrs.create("one", np.array((9.0, 9), dtype=pair), dtype=f["pair_t"])

    _, out = roundtrip(tmp_path, write)
    with h5py.File(out, "r") as f:
        assert isinstance(f["pair_t"], h5py.Datatype)
        assert f["pairs"].id.get_type().committed()
        assert f["pairs"][1]["a"] == 3.5


def test_references_point_at_the_copied_objects(tmp_path):
    def write(f):
        f["data"] = np.arange(10)
        f.create_group("g")["inner"] = np.ones(3)
        refs = f.create_dataset("refs", shape=(3,), dtype=h5py.ref_dtype)
        refs[0], refs[1] = f["data"].ref, f["g/inner"].ref
        f.attrs["self_ref"] = f["g"].ref
        f["data"].attrs.create("region", f["data"].regionref[2:5], dtype=h5py.regionref_dtype)

    summary, out = roundtrip(tmp_path, write)
    with h5py.File(out, "r") as f:
        assert f[f["refs"][0]].name == "/data"
        assert f[f["refs"][1]].name == "/g/inner"
        assert not f["refs"][2]
        assert f[f.attrs["self_ref"]].name == "/g"
        region = f["data"].attrs["region"]
        np.testing.assert_array_equal(f["data"][region], [2, 3, 4])
    assert summary.references_rewritten >= 4


def test_dimension_scales_survive_and_point_at_the_new_scales(tmp_path):
    def write(f):
        time = f.create_dataset("time", data=np.arange(5.0), maxshape=(None,), chunks=(2,))
        time.make_scale("time")
        for name in ("a", "b"):
            v = f.create_dataset(name, data=np.arange(5.0) * 2, maxshape=(None,), chunks=(2,))
            v.dims[0].attach_scale(time)

    _, out = roundtrip(tmp_path, write)
    with h5py.File(out, "r") as f:
        assert f["a"].dims[0][0].name == "/time"
        assert f["time"].is_scale
        assert {d.name for d in [f["a"], f["b"]]} == {"/a", "/b"}
        attached = [f[ref].name for ref, _ in f["time"].attrs["REFERENCE_LIST"]]
        assert sorted(attached) == ["/a", "/b"]


def test_fill_values_and_unwritten_chunks(tmp_path):
    def write(f):
        d = f.create_dataset("sparse", shape=(100,), chunks=(10,), fillvalue=-9, dtype="i4", compression="gzip")
        d[15] = 1
        f.create_dataset("nan_fill", shape=(4,), dtype="f4", fillvalue=np.nan)

    summary, out = roundtrip(tmp_path, write)
    with h5py.File(out, "r") as f:
        assert f["sparse"].fillvalue == -9
        assert f["sparse"].id.get_num_chunks() == 1
        assert f["sparse"][0] == -9 and f["sparse"][15] == 1
        assert np.isnan(f["nan_fill"].fillvalue)


def test_compact_becomes_contiguous_and_unlimited_becomes_fixed(tmp_path):
    def write(f):
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple((4,))
        compact = h5py.Dataset(h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_I32LE, space, dcpl=dcpl))
        compact[:] = [1, 2, 3, 4]
        f.create_dataset("growing", data=np.arange(25), maxshape=(None,), chunks=(10,))
        f.create_dataset("empty_unlimited", shape=(0,), maxshape=(None,), chunks=(10,), dtype="f4")

    summary, out = roundtrip(tmp_path, write)
    with h5py.File(out, "r") as f:
        assert _layout(f, "compact") == h5py.h5d.CONTIGUOUS
        np.testing.assert_array_equal(f["compact"][:], [1, 2, 3, 4])
        assert f["growing"].maxshape == (25,)
        assert f["empty_unlimited"].maxshape == (None,)
    assert summary.compact_to_contiguous == ["/compact"]
    assert summary.unlimited_kept == ["/empty_unlimited"]


def test_odd_shapes_scalars_empty_attributes_and_links(tmp_path):
    def write(f):
        f["scalar"] = 3.5
        f["scalar_str"] = "text"
        f["zero"] = np.zeros((0, 3))
        f.attrs["empty"] = h5py.Empty("f4")
        f["big_scalar_attr_holder"] = 1
        f["big_scalar_attr_holder"].attrs["many"] = np.arange(2000)
        f["target"] = np.arange(3)
        f["soft"] = h5py.SoftLink("/target")
        f["hard_again"] = f["target"]
        f["external"] = h5py.ExternalLink("other.h5", "/x")

    _, out = roundtrip(tmp_path, write)
    with h5py.File(out, "r") as f:
        assert f["scalar"][()] == 3.5
        assert f["zero"].shape == (0, 3)
        assert isinstance(f.attrs["empty"], h5py.Empty)
        assert f.get("soft", getlink=True).path == "/target"
        assert f.get("external", getlink=True).filename == "other.h5"
        assert h5py.h5o.get_info(f["hard_again"].id).addr == h5py.h5o.get_info(f["target"].id).addr


def test_creation_order_of_links_and_attributes_is_kept(tmp_path):
    names = ["zeta", "alpha", "mid", "Beta"]

    def write(f):
        for name in names:
            f.create_dataset(name, data=[1])
            f.attrs[name] = 1

    _, out = roundtrip(tmp_path, write, file_options={"track_order": True})
    with h5py.File(out, "r") as f:
        assert list(f) == names
        assert list(f.attrs) == names


def test_user_block_is_kept(tmp_path):
    def write(f):
        f["x"] = np.arange(3)

    src = tmp_path / "in.h5"
    with h5py.File(src, "w", userblock_size=512) as f:
        write(f)
    with open(src, "r+b") as stream:
        stream.write(b"USERBLOCK-CONTENT")
    repack(src, tmp_path / "out.h5", page_size=PAGE, verify=True)
    assert (tmp_path / "out.h5").read_bytes()[:17] == b"USERBLOCK-CONTENT"
    with h5py.File(tmp_path / "out.h5", "r") as f:
        assert f.userblock_size == PAGE  # padded to one page, as HDF5 requires for paged files


def test_target_chunk_bytes_grows_chunks_along_the_first_axis(tmp_path):
    photons = np.random.default_rng(2).normal(size=250_000).astype("f4")

    def write(f):
        f.create_dataset("h_ph", data=photons, chunks=(10_000,), compression="gzip", maxshape=(None,))
        f.create_dataset("short", data=photons[:5000], chunks=(5000,))

    summary, out = roundtrip(tmp_path, write, target_chunk_bytes=400_000)
    with h5py.File(out, "r") as f:
        assert f["h_ph"].chunks == (100_000,)  # Lopez et al.: 10,000 -> 100,000 photons
        assert f["h_ph"].compression == "gzip"
        np.testing.assert_array_equal(f["h_ph"][:], photons)
        assert f["short"].chunks == (5000,)
    assert summary.rechunked == {"/h_ph": {"from": [10_000], "to": [100_000]}}


def test_explicit_chunks_and_page_size_limit(tmp_path):
    def write(f):
        f.create_dataset("v", data=np.arange(6000, dtype="f8").reshape(60, 100), chunks=(1, 100))

    summary, out = roundtrip(tmp_path, write, chunks={"v": (30, 50)})
    with h5py.File(out, "r") as f:
        assert f["v"].chunks == (30, 50)
    with pytest.raises(UserError, match="larger than the page size"):
        repack(tmp_path / "in.h5", tmp_path / "big.h5", page_size=4096, chunks={"/v": (60, 100)})
    with pytest.raises(UserError, match="larger than the page size"):
        repack(tmp_path / "in.h5", tmp_path / "big.h5", page_size=4096, target_chunk_bytes=8192)
    assert not (tmp_path / "big.h5").exists()


def _netcdf3(path):
    import netCDF4

    with netCDF4.Dataset(path, "w", format="NETCDF3_CLASSIC") as nc:
        nc.createDimension("x", 2)


def _truncated(path, tmp_path):
    full = tmp_path / "full.h5"
    with h5py.File(full, "w") as f:
        f.create_dataset("v", data=np.random.default_rng(0).normal(size=100_000), chunks=(1000,))
    path.write_bytes(full.read_bytes()[:50_000])
    full.unlink()


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("netcdf3", "NetCDF-3"),
        ("text", "text file"),
        ("random", "no HDF5 signature"),
        ("zero", "empty file"),
        ("truncated", "truncated"),
        ("missing", "no such file"),
    ],
)
def test_bad_input_names_the_file_and_the_reason_and_writes_nothing(tmp_path, kind, reason):
    path = tmp_path / f"bad-{kind}"
    if kind == "netcdf3":
        _netcdf3(path)
    elif kind == "text":
        path.write_text("time,value\n0,1.5\n")
    elif kind == "random":
        path.write_bytes(np.random.default_rng(3).bytes(10_000))
    elif kind == "zero":
        path.write_bytes(b"")
    elif kind == "truncated":
        _truncated(path, tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(BadInputFile) as error:
        repack(path, tmp_path / "out.h5")
    assert str(path) in str(error.value) and reason in str(error.value)
    assert "\n" not in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_failure_midway_leaves_no_output(tmp_path):
    with h5py.File(tmp_path / "in.h5", "w") as f:
        f.create_dataset("v", data=np.arange(100), chunks=(10,))
        f["w"] = np.arange(10)

    def fail(done_bytes):  # called once data has been copied, as a full disk would strike
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        repack(tmp_path / "in.h5", tmp_path / "out.h5", progress=fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5"]


def test_compare_files_reports_real_differences(tmp_path):
    for name, value in (("a.h5", 1.0), ("b.h5", 2.0)):
        with h5py.File(tmp_path / name, "w") as f:
            f["v"] = np.full(10, value)
            f.attrs["units"] = "m"
    problems = compare_files(tmp_path / "a.h5", tmp_path / "b.h5")
    assert problems == ["/v: values differ in (slice(0, 10, None),)"]


@pytest.mark.parametrize("text, expected", [("8MiB", 8 << 20), ("4 MB", 4_000_000), ("65536", 65536), ("1.5KiB", 1536)])
def test_sizes(text, expected):
    assert repack_hdf5.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "8XB", "-1", "MiB"])
def test_bad_sizes(text):
    with pytest.raises(ValueError):
        repack_hdf5.parse_size(text)


def test_chunk_spec():
    assert repack_hdf5.parse_chunk_spec("gt1l/heights/h_ph=100000") == ("/gt1l/heights/h_ph", (100000,))
    with pytest.raises(ValueError):
        repack_hdf5.parse_chunk_spec("v=0,3")
    with pytest.raises(ValueError):
        repack_hdf5.parse_chunk_spec("v")


def test_blocks_tile_the_shape_exactly_once():
    shape, chunks = (7, 13, 9), (2, 5, 4)
    seen = np.zeros(shape, dtype=int)
    for selection in repack_hdf5._blocks(shape, chunks, itemsize=8, limit=8 * 2 * 5 * 4 * 2):
        seen[selection] += 1
        for s, c in zip(selection, chunks):
            assert s.start % c == 0
    assert (seen == 1).all()



