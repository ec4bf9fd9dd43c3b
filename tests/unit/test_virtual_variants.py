"""Plan validation of the virtual/Icechunk kinds and reference building on small generated files."""

from __future__ import annotations

import contextlib
import json

import h5py
import numpy as np
import pytest

from layoutlab.convert import virtual
from layoutlab.errors import BadInputFile
from layoutlab.pipeline import plan as plans
from shared_corpus import CORPUS


def _grid_facts():
    return plans.DatasetFacts(kind="grid", grid_shape=(24, 19, 36), variable="BCEXTTAU")


def test_new_kinds_resolve_to_named_variants():
    plan = plans.merge_plan({"variants": [
        {"kind": "original"}, {"kind": "repack-paged", "page_size": "1MiB"}, {"kind": "virtual-kerchunk"},
        {"kind": "icechunk-virtual"}, {"kind": "icechunk", "chunks": "map"},
        {"kind": "rechunk-zarr", "chunks": {"time": 4, "lat": 5, "lon": 6}, "shards": [2, 4, 6]}]})
    specs = {s["name"]: s for s in plans.variant_specs(plan, _grid_facts())}
    assert specs["kerchunk-original"]["format"] == "kerchunk"
    assert specs["kerchunk-paged-1MiB"]["over"] == "paged-1MiB"
    assert specs["icechunk-virtual"]["format"] == "icechunk"
    assert specs["icechunk-1x19x36"]["format"] == "icechunk"
    # shard = chunk x factor, whole multiples of the chunk that fit in the axis
    assert specs["zarr-sharded-4x5x6"]["shards"] == {"time": 8, "lat": 15, "lon": 36}


@pytest.mark.parametrize("variant, message", [
    ({"kind": "virtual-kerchunk", "over": "paged-8MiB"}, r"variants\[0\].over: 'paged-8MiB' is not one of \['original', 'paged', 'all'\]"),
    ({"kind": "virtual-kerchunk", "references": "parquet"}, "only json"),
    ({"kind": "icechunk"}, r"variants\[0\]: 'chunks' is a required property"),
    ({"kind": "rechunk-zarr", "chunks": "map", "shards": [0, 1]}, r"variants\[0\].shards\[0\]: 0 is less than the minimum of 1"),
])
def test_bad_variants_are_refused_with_the_field(variant, message):
    with pytest.raises(plans.PlanError, match=message):
        plans.merge_plan({"variants": [variant]})


def test_each_format_gets_its_readers():
    plan = plans.merge_plan({"variants": [{"kind": "original"}, {"kind": "virtual-kerchunk", "over": "original"},
                                          {"kind": "icechunk-virtual"}],
                             "readers": {"hdf5": ["h5coro", "xarray-h5netcdf"], "kerchunk": ["kerchunk-fsspec"],
                                         "icechunk": ["icechunk"]},
                             "patterns": {"grid": ["map-timestep"]}, "platforms": ["local-lambda"], "repetitions": 1})
    variants = [{**s, "uri": f"s3://b/{s['name']}"} for s in plans.variant_specs(plan, _grid_facts())]
    cases = plans.expand_cases(plan, _grid_facts(), "d", variants)
    assert {(c["variant"], c["reader"]) for c in cases} == {
        ("original", "h5coro"), ("original", "xarray-h5netcdf"), ("kerchunk-original", "kerchunk-fsspec"),
        ("icechunk-virtual", "icechunk")}


def _odd_file(path):
    """Packed int16, lzf (no codec in the readers), a vlen string, object references, compact storage."""
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        packed = f.create_dataset("packed", data=rng.integers(-3000, 3000, (40, 30), dtype="i2"), chunks=(10, 30),
                                  compression="gzip", shuffle=True)
        packed.attrs["scale_factor"] = np.float32(0.01)
        packed.attrs["add_offset"] = np.float32(273.15)
        f.create_dataset("lzf", data=np.arange(100, dtype="f4"), chunks=(50,), compression="lzf")
        f.create_dataset("label", data=np.array(["a", "bc"], dtype=h5py.string_dtype()))
        f.create_dataset("refs", data=np.array([f["packed"].ref], dtype=h5py.ref_dtype))
        space = h5py.h5s.create_simple((3,))
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_layout(h5py.h5d.COMPACT)
        h5py.h5d.create(f.id, b"small", h5py.h5t.NATIVE_INT32, space, plist).write(
            h5py.h5s.ALL, h5py.h5s.ALL, np.arange(3, dtype="i4"))
        f.create_group("g").create_dataset("x", data=np.linspace(0, 1, 7))


def _open_refs(refs):
    import fsspec
    import zarr
    from zarr.storage import FsspecStore

    fs = fsspec.filesystem("reference", fo=refs, remote_protocol="file", asynchronous=True)
    return zarr.open_group(FsspecStore(fs, read_only=True, path=""), mode="r", zarr_format=3)


def test_references_keep_values_and_say_what_was_inlined_or_skipped(tmp_path):
    path = tmp_path / "odd.h5"
    _odd_file(path)
    layout = virtual.build_layout(str(path), f"file://{path}")
    record = layout.record()
    assert record["status"] == "partial"
    assert {i["variable"] for i in record["inlined"]} == {"lzf", "small"}
    assert [s["variable"] for s in record["skipped"]] == ["refs"]
    assert all(i["reason"] for i in record["inlined"] + record["skipped"])
    assert record["packed"] == [{"variable": "packed", "scale_factor": pytest.approx(0.01),
                                 "add_offset": pytest.approx(273.15), "kept": "virtual"}]
    group = _open_refs(json.loads(json.dumps(virtual.kerchunk_refs(layout))))
    with h5py.File(path) as f:
        # the packed integers as stored, and the attributes a CF decoder needs, unchanged
        np.testing.assert_array_equal(group["packed"][...], f["packed"][...])
        assert group["packed"].attrs["scale_factor"] == pytest.approx(0.01)
        assert group["packed"].attrs["add_offset"] == pytest.approx(273.15)
        np.testing.assert_array_equal(group["lzf"][...], f["lzf"][...])
        np.testing.assert_array_equal(group["small"][...], np.arange(3))
        np.testing.assert_array_equal(group["g/x"][...], f["g/x"][...])
        assert list(group["label"][...]) == ["a", "bc"]
    assert "refs" not in group


def test_a_file_that_cannot_be_referenced_is_bad_input(tmp_path):
    path = tmp_path / "not.h5"
    path.write_bytes(b"not hdf5 at all")
    with pytest.raises(BadInputFile, match="cannot be referenced"):
        virtual.build_layout(str(path), f"file://{path}")


REAL_GRANULES = ["icesat2/ATL06_20181013235645_02340114_209_01.h5", "netcdf4-python", "xarray", "netcdf-c"]


def _files_with_dimension_scales(tmp_path):
    from layoutlab.samples import atl03, geos

    yield atl03.write_atl03(tmp_path / "atl03.h5", photons=20_000)
    yield geos.write_geos(tmp_path / "geos.nc", shape=(6, 19, 36))
    for entry in REAL_GRANULES:  # third-party files, when the shared corpus is beside the checkout
        path = CORPUS / entry
        yield from ([path] if path.is_file() else sorted(p for p in path.glob("*") if p.suffix in (".nc", ".h5")))


def test_dimension_names_from_one_walk_are_the_names_xarray_gives_the_original(tmp_path):
    """scale_names_from_one_walk (a table of paths instead of H5Iget_name per scale) names every axis as
    h5netcdf (xarray) names it in the original: VirtualiZarr's own names but for an axis without a dimension
    scale (``phony_dim_<axis>`` there) and a scale of an enclosing group (its path there, its name here);
    where h5netcdf cannot open the file, VirtualiZarr's names (phony ones by size, in our own count)."""
    import h5netcdf
    from virtualizarr.parsers.hdf import hdf

    stock, compared, renamed = hdf._dataset_dims, 0, 0
    for path in _files_with_dimension_scales(tmp_path):
        try:
            f = h5py.File(path, "r")
        except OSError:
            continue  # (not HDF5: a netCDF-3 file of the corpus)
        try:
            nc = h5netcdf.File(path, "r", phony_dims="sort")
        except (KeyError, ValueError, OSError):  # (h5netcdf cannot open it)
            nc = None
        with f, (nc if nc is not None else contextlib.nullcontext()):
            datasets = []
            f.visititems(lambda name, obj: datasets.append(obj) if isinstance(obj, h5py.Dataset) else None)
            if len(datasets) > 300:
                continue  # (VirtualiZarr's own names cost the square of the objects: the reason for the table)
            expected = {}
            for dataset in datasets:
                try:
                    names = stock(dataset, group=dataset.parent.name)
                except ValueError as error:  # (more than one scale on an axis): the same refusal is expected
                    expected[dataset.name] = str(error)
                    continue
                try:
                    xarrays = list(nc[dataset.name].dimensions) if nc is not None else None
                except (KeyError, ValueError, TypeError):
                    xarrays = None
                if xarrays is not None and len(xarrays) == len(names):
                    renamed += sum(a != b for a, b in zip(names, xarrays))
                    names = xarrays
                else:  # (phony axes h5netcdf cannot name: our own count, by size)
                    names = [None if len(dataset.dims[n]) == 0 and not h5py.h5ds.is_scale(dataset.id) else name
                             for n, name in enumerate(names)]
                expected[dataset.name] = names
            with virtual.scale_names_from_one_walk(f):
                for dataset in datasets:
                    try:
                        got = hdf._dataset_dims(dataset, group=dataset.parent.name)
                    except ValueError as error:
                        got = str(error)
                    want = expected[dataset.name]
                    if isinstance(want, list):
                        got = [None if w is None and g.startswith("phony_dim_") else g for g, w in zip(got, want)]
                    assert got == want, (path, dataset.name)
                    compared += 1
            assert hdf._dataset_dims is stock
    assert compared > 100 and renamed > 0  # (the tree test below has a file of each renamed kind)


# Read in a new interpreter: zarr's event-loop thread (and fsspec's) left in this test process would make a
# later test's forked worker that uses zarr wait forever for a loop that has no thread in the fork.
TREE_SCRIPT = """
import json, sys
import fsspec, numpy as np, xarray as xr
from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
from zarr.storage import FsspecStore
refs = json.load(open(sys.argv[1]))
store = FsspecStore(AsyncFileSystemWrapper(fsspec.filesystem("reference", fo=refs)), read_only=True, path="")
tree = xr.open_datatree(store, engine="zarr", consolidated=False, zarr_format=3, chunks=None)
print(json.dumps({"sizes": {n.path: dict(n.dataset.sizes) for n in tree.subtree},
                  "dims": {n.path: {k: list(v.dims) for k, v in n.dataset.variables.items()} for n in tree.subtree},
                  "values": {p: np.asarray(tree[p].values).tolist() for p in sys.argv[2:]}}))
"""


def _references_open_as_a_tree(path, tmp_path, *read):
    """What xr.open_datatree of the kerchunk references over ``path`` opens (what xarray-kerchunk and xarray-icechunk
    open): each group's sizes, each variable's dimensions, the values of ``read``."""
    import subprocess
    import sys

    refs = tmp_path / "refs.json"
    refs.write_text(json.dumps(virtual.kerchunk_refs(virtual.build_layout(str(path), str(path)))))
    done = subprocess.run([sys.executable, "-c", TREE_SCRIPT, str(refs), *read], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_references_open_as_the_same_tree_xarray_opens_from_the_original(tmp_path):
    """GPM DPR: no dimension scales, a parent group and its child with axes of other lengths (VirtualiZarr's
    phony_dim_0 of length 1 at / and 137 at /NS: "not aligned with its parents"); GOES GLM: a netCDF dimension
    without a variable, an unlimited scale of length 0 beside variables of 50 ("conflicting sizes"); ICESat-2
    ATL06: an inlined (compact) array without dimension names ("missing the dimension_names metadata"); OMPS:
    a string _FillValue ("Failed to decode fill_value")."""
    import xarray as xr

    path = tmp_path / "swath-and-events.nc"
    with h5py.File(path, "w") as f:
        f["root_flag"] = np.arange(1, dtype="i4")
        f["NS/Latitude"] = np.linspace(-10, 10, 137 * 49, dtype="f4").reshape(137, 49)
        f["NS/scan/ScanTime"] = np.arange(137, dtype="f8")
        events = f.create_dataset("events/number_of_events", shape=(0,), maxshape=(None,), dtype="f4")
        events.make_scale("This is a netCDF dimension but not a netCDF variable.         0")
        events.attrs["_Netcdf4Dimid"] = np.int32(0)
        energy = f.create_dataset("events/event_energy", data=np.arange(50, dtype="f4"), maxshape=(None,),
                                  chunks=(10,))
        energy.dims[0].attach_scale(events)
        # ATL06: a scale of an enclosing group, and a compact (inlined) array of a subgroup
        times = f.create_dataset("beam/delta_time", data=np.arange(30, dtype="f8"))
        times.make_scale("delta_time")
        height = f.create_dataset("beam/dem/dem_h", data=np.ones(30, dtype="f4"))
        height.dims[0].attach_scale(times)
        space = h5py.h5s.create_simple((30,))
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_layout(h5py.h5d.COMPACT)
        flag = h5py.Dataset(h5py.h5d.create(f["beam/dem"].id, b"dem_flag", h5py.h5t.STD_I8LE, space, plist))
        flag[...] = np.arange(30, dtype="i1")
        flag.dims[0].attach_scale(times)
        # OMPS: a fixed-length string variable with a string _FillValue
        utc = f.create_dataset("utc", data=np.array([b"2017-01-01T00:05:32.000000Z"] * 3, dtype="S27"))
        utc.attrs["_FillValue"] = np.bytes_(b"0000-00-00T00:00:00.000000Z")
    original = xr.open_datatree(path, engine="h5netcdf", phony_dims="sort")
    layout = virtual.build_layout(str(path), str(path))
    assert [i["variable"] for i in layout.inlined] == ["beam/dem/dem_flag"]
    assert {"variable": "utc", "attribute": "_FillValue"}.items() <= layout.skipped[0].items()
    tree = _references_open_as_a_tree(path, tmp_path, "events/event_energy", "beam/dem/dem_flag")
    assert tree["sizes"] == {n.path: dict(n.dataset.sizes) for n in original.subtree}
    assert "number_of_events" not in tree["dims"]["/events"]
    assert tree["dims"] == {n.path: {k: list(v.dims) for k, v in n.dataset.variables.items()} for n in original.subtree}
    assert tree["values"] == {"events/event_energy": list(range(50)), "beam/dem/dem_flag": list(range(30))}
