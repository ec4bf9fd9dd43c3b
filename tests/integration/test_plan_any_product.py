"""`layoutlab plan FILE --json` over every real product of the shared corpus: at least three pattern families
beyond open-list, each case naming what it reads; every planned family read runs on the file and reads the
values h5py reads at the same index, never more bytes than the plan counted from the declared shapes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from shared_corpus import CORPUS

from layoutlab.bench.families import FAMILIES
from layoutlab.bench.patterns import get_pattern
from layoutlab.bench.readers import H5pyHandle
from layoutlab.cli import main
from layoutlab.pipeline.families import plan_families
from layoutlab.pipeline.outcomes import record_failure
from layoutlab.pipeline.payloads import FailureInput
from layoutlab.structure import read_structure

PRODUCTS = sorted([*(CORPUS / "products").glob("*"), *(CORPUS / "icesat2").glob("ATL06*"), *(CORPUS / "gpm").glob("2A-*")]) \
    if (CORPUS / "products").is_dir() else []
pytestmark = pytest.mark.skipif(not PRODUCTS, reason="shared corpus products not found")


@pytest.mark.parametrize("path", PRODUCTS, ids=lambda p: p.name[:40])
def test_plan_json_gives_three_families_beyond_open_list(path, capsys):
    assert main(["plan", str(path), "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    families = {c["family"] for c in planned["cases"]} - {"open-list"}
    assert len(families) >= 3, planned["skipped"]
    for case in planned["cases"]:
        assert {"pattern", "variant", "reader", "platform", "variable"} <= set(case) and case["variable"]
    assert "open-list" in {c["family"] for c in planned["cases"]}
    ids = {(c["variant"], c["pattern"], c["reader"], c["platform"], c["repetition"]) for c in planned["cases"]}
    assert len(ids) == len(planned["cases"])  # two variables read by one family stay two cases


def _expected(f, read) -> np.ndarray:
    return np.asarray(f[read.path][read.index])


@pytest.mark.parametrize("path", PRODUCTS, ids=lambda p: p.name[:40])
def test_every_planned_family_reads_what_h5py_reads_within_the_declared_bytes(path):
    with h5py.File(path, "r") as f:
        plan = plan_families(f, read_structure(f, str(path)))
        handle = H5pyHandle("hdf5", f)
        for case in plan.cases:
            pattern = get_pattern(case.pattern)
            assert pattern is FAMILIES[case.pattern]
            selection = pattern.select(handle, pattern.params(case.params))
            loaded = pattern.load(handle, selection)
            if case.pattern == "open-list":
                assert loaded.points > 0
                continue
            assert 0 < loaded.bytes_needed <= case.read_bytes, case
            for read, got in zip(selection.reads, loaded.values):
                assert np.array_equal(np.asarray(got), _expected(f, read), equal_nan=True), (case, read)


def test_a_file_without_numeric_arrays_gets_one_line_saying_what_it_holds(tmp_path, capsys):
    path = tmp_path / "names.h5"
    with h5py.File(path, "w") as f:
        f["station_names"] = np.array([b"a", b"b"])
        f.create_group("empty")
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "holds no numeric array" in err[0], err
    assert "1 dataset of strings" in err[0] and "UserError" not in err[0]


def test_a_failure_reason_names_its_error_once():
    class Store:
        def put_failure(self, *args, **kwargs):
            self.failure = args

        def update_run(self, dataset_id, **fields):
            self.run = fields

    store = Store()
    out = record_failure(FailureInput(stage="plan", dataset_id="d1", error={
        "Error": "UserError", "Cause": json.dumps({"errorMessage": "UserError: s3://b/k: holds no numeric array"})}),
        store=store)
    assert out["reason"] == "UserError: s3://b/k: holds no numeric array"
    out = record_failure(FailureInput(stage="plan", dataset_id="d1", error={"Error": "States.Runtime", "Cause": "late"}),
                         store=store)
    assert out["reason"] == "States.Runtime: late"
    out = record_failure(FailureInput(stage="plan", dataset_id="d1", error={"Error": "States.Timeout", "Cause": "late"}),
                         store=store)  # (a timeout also says which step ran past its limit)
    assert out["reason"] == "States.Timeout: late (the plan step ran past its time limit and was stopped)"


def test_the_plan_is_the_same_in_every_process():
    """Equal-sized variables (SMAP's AM / PM geolocation, CfRadial's fields) are chosen by path, not by the
    order of a set: the plan step and `layoutlab plan` agree whatever the hash seed."""
    names = ("products/SC_SPL3SMP_009_prefetch.nc4", "products/GEDI02_B_2019108080338_O01964_T05337_02_001_01_sub.h5",
             "products/cfrad.20211011_223602.712_to_20211011_223612.091_DOW8_RHI.nc")
    code = ("import json, sys, h5py; from layoutlab.structure import read_structure; "
            "from layoutlab.pipeline.families import plan_families\n"
            "out = []\n"
            "for p in sys.argv[1:]:\n"
            "    f = h5py.File(p, 'r'); out.append([c.to_dict() for c in plan_families(f, read_structure(f, p)).cases])\n"
            "print(json.dumps(out))")
    plans = [subprocess.run([sys.executable, "-c", code, *(str(CORPUS / n) for n in names)], check=True,
                            capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout
             for seed in ("1", "2", "3")]
    assert plans[0] == plans[1] == plans[2]


def test_a_family_reading_more_than_the_ceiling_is_not_planned_and_says_why():
    from layoutlab.ceilings import Ceilings
    from layoutlab.pipeline import plan as plans
    from layoutlab.pipeline.facts import dataset_facts

    facts = dataset_facts(str(CORPUS / "products/TEMPO_NO2_L2_V03_20240601T211614Z_S012G02_subsetted.nc4"))
    whole = next(c for c in facts.family_cases if c["pattern"] == "variable-read")
    fitted = plans.fit_family_cases(facts, Ceilings(max_case_read_bytes=whole["read_bytes"] - 1))
    assert "variable-read" not in {c["pattern"] for c in fitted.family_cases}
    assert {"record-slice", "point-series"} <= {c["pattern"] for c in fitted.family_cases}
    assert any(line.startswith("variable-read of product/vertical_column_stratosphere: reads 2,162,688 bytes")
               for line in fitted.family_skipped), fitted.family_skipped


LAYOUTS = {  # each product's role layouts in the default plan (kinds/_grid.py): names say the shape
    "GEDI02_B": ["zarr-rows73"], "OR_GLM-L2": ["zarr-rows1e4", "zarr-rows18361"], "processed_ATL07": ["zarr-rows368"],
    "ATL06_": ["zarr-rows1e4"], "TEMPO_NO2": ["zarr-lines132", "zarr-lines16"], "OMPS-NPP": ["zarr-lines400"],
    "2A-RW-BRS": ["zarr-lines121", "zarr-lines7"], "era5_": ["zarr-105x237"],
    "M2T1NXSLV": ["zarr-2x10x10", "zarr-1x21x17", "zarr-2x21x17", "zarr-sharded-1x21x17"],
}


@pytest.mark.parametrize("prefix", list(LAYOUTS))
def test_tables_get_row_chunks_swaths_scan_line_blocks_grids_their_own_axes(prefix, capsys):
    [path] = [p for p in PRODUCTS if p.name.startswith(prefix)]
    assert main(["plan", str(path), "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    zarr = [v for v in planned["variants"] if v.startswith("zarr-")]
    assert zarr == LAYOUTS[prefix], planned["variants"]
    # paged repack and references for every file, beside them
    assert {"original", "paged-auto", "kerchunk-original", "icechunk-virtual"} <= set(planned["variants"])
    assert {c["variant"] for c in planned["cases"]} >= set(zarr)


def test_a_4d_grid_gets_nguyens_layouts_over_time_level_lat_lon(tmp_path, capsys):
    import xarray as xr

    path = tmp_path / "grid4d.nc"
    shape = (48, 12, 40, 60)
    coords = {"time": ("time", np.arange(48.0), {"units": "hours since 2000-01-01", "axis": "T"}),
              "lev": ("lev", np.arange(12.0), {"axis": "Z", "positive": "down", "units": "hPa"}),
              "lat": ("lat", np.linspace(-60, 60, 40), {"units": "degrees_north"}),
              "lon": ("lon", np.linspace(0, 300, 60), {"units": "degrees_east"})}
    values = np.random.default_rng(1).random(shape, dtype="f4")
    xr.Dataset({"T": (("time", "lev", "lat", "lon"), values)}, coords=coords).to_netcdf(path, engine="h5netcdf")
    assert main(["plan", str(path), "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["role"] == "grid"
    from layoutlab.kinds._grid import chunk_preset_nd

    balanced = "x".join(map(str, chunk_preset_nd("balanced", shape, ("T", "Z", "Y", "X"))))
    # time series: whole time, one level, 10 x 10; map: one step, every level; sharded map: whole time a shard
    assert [v for v in planned["variants"] if v.startswith("zarr-")] == [
        "zarr-48x1x10x10", "zarr-1x12x40x60", f"zarr-{balanced}", "zarr-sharded-1x12x40x60"]


def test_a_4d_grids_layouts_convert_with_their_chunks_and_keep_the_values(tmp_path, capsys):
    """Each planned N-D layout, made as the rechunk-zarr kind makes it (its spec's options), holds the chunks its
    name says and the source's values (the dimensions the plan names are the copy's)."""
    import xarray as xr
    import zarr

    from layoutlab.convert.rechunk_zarr import rechunk
    from layoutlab.kinds.rechunk_zarr import rechunk_options
    from layoutlab.pipeline import plan as plans
    from layoutlab.pipeline.facts import dataset_facts

    path = tmp_path / "grid4d.nc"
    values = np.random.default_rng(2).random((30, 5, 20, 24), dtype="f4")
    coords = {"time": ("time", np.arange(30.0), {"units": "hours since 2000-01-01", "axis": "T"}),
              "lev": ("lev", np.arange(5.0), {"axis": "Z", "positive": "down", "units": "hPa"}),
              "lat": ("lat", np.linspace(-60, 60, 20), {"units": "degrees_north"}),
              "lon": ("lon", np.linspace(0, 300, 24), {"units": "degrees_east"})}
    xr.Dataset({"T": (("time", "lev", "lat", "lon"), values)}, coords=coords).to_netcdf(path, engine="h5netcdf")
    plan = plans.merge_plan(None)
    specs = [s for s in plans.variant_specs(plan, dataset_facts(str(path), plan)) if s["kind"] == "rechunk-zarr"]
    assert [s["name"] for s in specs][:2] == ["zarr-30x1x10x10", "zarr-1x5x20x24"]
    for spec in specs:
        out = tmp_path / f"{spec['name']}.zarr"
        rechunk(str(path), str(out), progress=False, **rechunk_options(spec))
        array = zarr.open_group(str(out), mode="r")["T"]
        chunks = tuple(spec["chunks"].values())
        assert (array.shards or array.chunks) == (tuple(spec["shards"].values()) if spec.get("shards") else chunks)
        assert array.chunks == chunks and spec["name"].endswith("x".join(map(str, chunks)))
        assert np.array_equal(array[...], values)
