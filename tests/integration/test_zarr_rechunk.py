"""Rechunk real files into Zarr v3 and read them back: values, metadata, fan-out, errors, memory."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr

from layoutlab.cli import main as cli_main
from layoutlab.convert import rechunk_zarr as rz
from layoutlab.samples.geos import GeosGrid, geos_values, write_geos

SHAPE = (48, 37, 72)


@pytest.fixture(scope="module")
def geos(tmp_path_factory):
    return write_geos(tmp_path_factory.mktemp("src") / "geos.nc", shape=SHAPE)


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """Several variables, ints with fill values, strings, attributes, 1-D coords, a scalar."""
    path = tmp_path_factory.mktemp("src") / "odd.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.title = "odd cases"
        nc.history = "made by a test"
        nc.createDimension("time", 5)
        nc.createDimension("x", 7)
        nc.createDimension("name_len", 4)
        time = nc.createVariable("time", "f8", ("time",))
        time.units = "days since 2000-01-01"
        time.calendar = "standard"
        time[:] = np.arange(5)
        x = nc.createVariable("x", "i4", ("x",))
        x[:] = np.arange(7) * 10
        counts = nc.createVariable("counts", "i2", ("time", "x"), fill_value=np.int16(-999), chunksizes=(1, 7), zlib=True)
        counts.long_name = "counts with gaps"
        data = np.arange(35, dtype="i2").reshape(5, 7)
        counts[:] = np.ma.masked_where(data % 6 == 0, data)
        packed = nc.createVariable("packed", "i2", ("time", "x"), fill_value=np.int16(32767))
        packed.scale_factor = 0.01
        packed.add_offset = 5.0
        packed[:] = np.linspace(0, 10, 35).reshape(5, 7)
        flags = nc.createVariable("flags", "u1", ("x",))
        flags.flag_values = np.array([0, 1], "u1")
        flags[:] = np.arange(7) % 2
        station = nc.createVariable("station", str, ("x",))
        for i in range(7):
            station[i] = f"st{i}"
        scalar = nc.createVariable("crs", "i4", ())
        scalar.grid_mapping_name = "latitude_longitude"
        scalar.assignValue(0)
    return path


def rechunk(src, dst, **options):
    options.setdefault("progress", False)
    return rz.rechunk(str(src), str(dst), **options)


def assert_same_dataset(src, dst, drop=()):
    expected = xr.open_dataset(src).drop_vars(list(drop)).load()
    actual = xr.open_zarr(dst, consolidated=True).load()
    xr.testing.assert_identical(expected, actual)
    for name in expected.variables:
        if expected[name].dtype.kind in "UO":  # strings: zarr 3.4 hands xarray numpy's StringDType (kind T)
            assert actual[name].dtype.kind in "UOT", name
        else:
            assert actual[name].dtype == expected[name].dtype


@pytest.mark.parametrize(
    "options",
    [
        {"chunks": {"time": 48, "lat": 3, "lon": 3}},  # time-series optimal
        {"chunks": {"time": 1}},  # map optimal, lat/lon whole
        {"chunks": {"time": 12, "lat": 10, "lon": 20}, "compressor": "zstd:3"},
        {"chunks": {"time": 6, "lat": 10, "lon": 10}, "shards": {"time": 24, "lat": 20, "lon": 40}},
        {"chunks": {"time": 48, "lat": 3, "lon": 3}, "max_mem": "120KiB"},  # forces two stages
        {"chunks": "auto", "target_chunk_mb": 0.02, "compressor": "none"},
    ],
    ids=["timeseries", "map", "zstd", "sharded", "two-stage", "auto"],
)
def test_rechunked_store_reads_back_as_the_source(geos, tmp_path, options):
    dst = tmp_path / "out.zarr"
    result = rechunk(geos, dst, **options)
    assert_same_dataset(geos, dst)
    if options.get("max_mem") == "120KiB":
        assert result["stages"] == 2
    # The values are GEOS's, not just equal between two readers.
    np.testing.assert_array_equal(zarr.open_array(dst / "BCEXTTAU")[:], geos_values(GeosGrid(SHAPE), 0, SHAPE[0]))
    array = zarr.open_array(dst / "BCEXTTAU", mode="r")
    assert array.metadata.zarr_format == 3
    assert array.metadata.dimension_names == ("time", "lat", "lon")
    if isinstance(options.get("chunks"), dict) and "shards" not in options:
        expected = tuple(options["chunks"].get(d, n) for d, n in zip(("time", "lat", "lon"), SHAPE))
        assert array.chunks == expected
    if "shards" in options:
        assert array.shards == (24, 20, 40) and array.chunks == (6, 10, 10)
    root = json.loads((dst / "zarr.json").read_text())
    assert set(root["consolidated_metadata"]["metadata"]) == {"BCEXTTAU", "time", "lat", "lon"}
    assert not (dst / rz.STAGING).exists()


def test_default_compressor_is_blosc_zstd_level_3(geos, tmp_path):
    rechunk(geos, tmp_path / "out.zarr", chunks={"time": 12})
    codecs = zarr.open_array(tmp_path / "out.zarr" / "BCEXTTAU").metadata.codecs
    blosc = [c for c in codecs if c.__class__.__name__ == "BloscCodec"]
    # zarr < 3.2 holds the name as an enum, 3.2+ as the plain string
    assert blosc and getattr(blosc[0].cname, "value", blosc[0].cname) == "zstd" and blosc[0].clevel == 3


def test_odd_variables_round_trip_strings_included(odd, tmp_path):
    dst = tmp_path / "odd.zarr"
    result = rechunk(odd, dst, chunks={"time": 2, "x": 3})
    assert result["skipped"] == []
    assert_same_dataset(odd, dst)  # the vlen string variable too (Zarr v3 "string")
    assert zarr.open_array(dst / "station").metadata.to_dict()["data_type"] == "string"
    # Integer fill values stay the arrays' own fill values (for non-xarray readers too).
    assert zarr.open_array(dst / "counts").fill_value == -999
    raw = xr.open_zarr(dst, mask_and_scale=False)
    assert raw["packed"].dtype == np.int16 and raw["packed"].attrs["scale_factor"] == 0.01


def test_plain_hdf5_without_dimension_names_is_rechunked(tmp_path):
    src = tmp_path / "plain.h5"
    data = np.arange(60 * 50, dtype="f8").reshape(60, 50)
    with h5py.File(src, "w") as f:
        f.create_dataset("grid", data=data, chunks=(60, 5), compression="gzip")
        f.attrs["origin"] = "h5py"
    rechunk(src, tmp_path / "plain.zarr", chunks="auto", target_chunk_mb=0.004)
    out = xr.open_zarr(tmp_path / "plain.zarr")
    np.testing.assert_array_equal(out["grid"].values, data)
    assert out.attrs["origin"] == "h5py"


def test_zarr_source_is_rechunked(geos, tmp_path):
    first = tmp_path / "first.zarr"
    rechunk(geos, first, chunks={"time": 1})
    second = tmp_path / "second.zarr"
    rechunk(first, second, chunks={"time": 48, "lat": 5, "lon": 5}, max_mem="200KiB")
    assert zarr.open_array(second / "BCEXTTAU").chunks == (48, 5, 5)
    assert_same_dataset(geos, second)


def test_variables_option_copies_the_named_variable_and_its_coordinates(odd, tmp_path):
    rechunk(odd, tmp_path / "sub.zarr", variables=["counts"])
    assert set(xr.open_zarr(tmp_path / "sub.zarr").variables) == {"counts", "time", "x"}


def _store_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("max_mem", ["2MiB", "120KiB"], ids=["one-stage", "two-stage"])
def test_units_in_any_order_and_in_parallel_give_the_same_store_as_one_run(geos, tmp_path, max_mem):
    options = dict(chunks={"time": 48, "lat": 3, "lon": 3}, shards={"time": 48, "lat": 9, "lon": 9}, max_mem=max_mem)
    whole = tmp_path / "whole.zarr"
    rechunk(geos, whole, **options)

    fanned = tmp_path / "fanned.zarr"
    plan = rz.plan_rechunk(str(geos), str(fanned), **options)
    plan = json.loads(json.dumps(plan))  # what a Step Functions state would carry
    assert len(plan["units"]) > 1
    for stage in range(plan["stages"]):
        ids = [u["id"] for u in plan["units"] if u["stage"] == stage]
        random.Random(stage).shuffle(ids)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda k: rz.run_unit(plan, k), ids))
    # Before finalize nothing is readable as Zarr.
    with pytest.raises(Exception):
        zarr.open_group(fanned, mode="r")
    rz.finalize(plan)
    assert _store_files(fanned) == _store_files(whole)


# shards of 2x2 chunks, so stage 1 writes whole shards while other workers rewrite the intermediate
TWO_STAGE = dict(chunks={"time": 48, "lat": 3, "lon": 3}, shards={"time": 48, "lat": 6, "lon": 6}, max_mem="120KiB")


@pytest.fixture(scope="module")
def two_stage_whole(geos, tmp_path_factory):
    """The store one ordinary run makes: what every order and parallelism must reproduce."""
    whole = tmp_path_factory.mktemp("whole") / "whole.zarr"
    assert rechunk(geos, whole, **TWO_STAGE)["stages"] == 2
    return _store_files(whole)


@pytest.mark.parametrize("order", ["reversed", "random", "parallel"])  # parallel: 4 processes, reversed
def test_units_of_a_two_stage_plan_run_in_any_order_across_stages(geos, tmp_path, two_stage_whole, order):
    dst = tmp_path / "fanned.zarr"
    plan = json.loads(json.dumps(rz.plan_rechunk(str(geos), str(dst), **TWO_STAGE)))
    assert plan["stages"] == 2
    stage0 = [u["id"] for u in plan["units"] if u["stage"] == 0]
    ids = [u["id"] for u in plan["units"]]
    if order in ("reversed", "parallel"):
        ids.reverse()  # every stage-1 unit before any stage-0 unit: the most workers on one stage-0 unit
    else:
        random.Random(3).shuffle(ids)
    if order == "parallel":
        # Separate processes, more of them than cores, sharing one store: concurrent writers
        # of the same intermediate chunks and readers of chunks being rewritten. Plain interpreters
        # (a multiprocessing Pool started from this long-lived test process sometimes never handed
        # its workers their tasks), each taking every 4th unit of the reversed order.
        import subprocess
        import sys

        plan_path = tmp_path / "plan.json"
        plan_path.write_text(json.dumps(plan))
        script = ("import json, sys\nfrom layoutlab.convert import rechunk_zarr as rz\n"
                  "plan = json.load(open(sys.argv[1]))\n"
                  "print(json.dumps([rz.run_unit(plan, int(k)) for k in sys.argv[2:]], default=str))\n")
        workers = [subprocess.Popen([sys.executable, "-c", script, str(plan_path), *map(str, ids[i::4])],
                                    stdout=subprocess.PIPE, text=True) for i in range(4)]
        results = []
        for worker in workers:
            out, _ = worker.communicate(timeout=600)
            assert worker.returncode == 0
            results += json.loads(out)
    else:
        results = [rz.run_unit(plan, k) for k in ids]
    ran_early = [j for r in results for j in r["ran_earlier"]]
    assert set(ran_early) <= set(stage0) and ran_early  # stage-1 units did run stage-0 units
    runs = ran_early + [r["unit"] for r in results if not r["skipped"]]
    assert sorted(set(runs)) == list(range(len(plan["units"])))
    if order != "parallel":
        # One worker never repeats a unit: a stage-0 unit run early is skipped when its turn comes.
        assert sorted(runs) == list(range(len(plan["units"])))
        planned = sum(math.prod(np.subtract(u["stop"], u["start"])) * np.dtype(plan["variables"][u["variable"]]["dtype"]).itemsize
                      for u in plan["units"])
        assert planned > 2 * 4 * math.prod(SHAPE)  # both stages copy the data variable
        assert sum(r["bytes"] for r in results) == planned  # ... and no byte twice
    rz.finalize(plan)
    assert _store_files(dst) == two_stage_whole
    np.testing.assert_array_equal(zarr.open_array(dst / "BCEXTTAU")[:], geos_values(GeosGrid(SHAPE), 0, SHAPE[0]))


def test_a_stage_one_unit_runs_only_the_stage_zero_units_it_reads(tmp_path):
    # Column chunks to row-ish chunks through a tiny bound: stage-0 units are column slabs,
    # stage-1 units row slabs that read only some of them (on GEOS every one reads all).
    src = tmp_path / "cols.h5"
    data = np.arange(36 * 36, dtype="f4").reshape(36, 36)
    with h5py.File(src, "w") as f:
        f.create_dataset("grid", data=data, chunks=(26, 1))
    dst = tmp_path / "rows.zarr"
    plan = rz.plan_rechunk(str(src), str(dst), chunks={"phony_dim_0": 4, "phony_dim_1": 20}, max_mem=3009)
    assert plan["stages"] == 2
    stage0 = [u for u in plan["units"] if u["stage"] == 0]
    late = [u for u in plan["units"] if u["stage"] == 1]
    first = late[0]
    feeding = rz.units_feeding(plan, first)
    assert 0 < len(feeding) < len(stage0)
    # exactly the stage-0 slabs that hold a column of the intermediate chunks the unit decodes
    inter = plan["variables"]["grid"]["intermediate_chunks"]
    cols = range(first["start"][1] // inter[1] * inter[1], -(-first["stop"][1] // inter[1]) * inter[1])
    assert sorted(feeding) == [u["id"] for u in stage0 if any(u["start"][1] <= c < u["stop"][1] for c in cols)]
    assert sorted(rz.run_unit(plan, first["id"])["ran_earlier"]) == sorted(feeding)
    assert rz.run_unit(plan, first["id"])["ran_earlier"] == []  # their markers are there now
    for unit in reversed(plan["units"]):
        rz.run_unit(plan, unit["id"])
    rz.finalize(plan)
    np.testing.assert_array_equal(zarr.open_array(dst / "grid")[:], data)


def test_finalize_refuses_while_a_unit_of_a_two_stage_plan_is_missing(geos, tmp_path):
    dst = tmp_path / "o.zarr"
    plan = rz.plan_rechunk(str(geos), str(dst), **TWO_STAGE)
    last = [u["id"] for u in plan["units"] if u["stage"] == 1][-1]
    for k in reversed(range(len(plan["units"]))):
        if k != last:
            rz.run_unit(plan, k)
    with pytest.raises(rz.UserError, match=f"1 of {len(plan['units'])} units are not done"):
        rz.finalize(plan)
    assert not (dst / "zarr.json").exists()
    rz.run_unit(plan, last)
    rz.finalize(plan)
    assert_same_dataset(geos, dst)


def test_finalize_refuses_while_units_are_missing(geos, tmp_path):
    dst = tmp_path / "o.zarr"
    plan = rz.plan_rechunk(str(geos), str(dst), chunks={"time": 12})
    rz.run_unit(plan, 0)
    with pytest.raises(rz.UserError, match="not done"):
        rz.finalize(plan)
    assert not (dst / "zarr.json").exists()


# --- the command line -----------------------------------------------------------------


def run_cli(*argv, capsys=None):
    code = cli_main(["rechunk", *map(str, argv)])
    return code


def test_cli_fan_out_sequence_builds_the_store(geos, tmp_path, capsys):
    dst = tmp_path / "cli.zarr"
    assert run_cli(geos, dst, "--chunks", "time=24,lat=10,lon=10", "--max-mem", "300KiB", "--plan-only") == 0
    plan = json.loads(capsys.readouterr().out)
    for stage in range(plan["stages"]):
        for unit in reversed([u for u in plan["units"] if u["stage"] == stage]):
            assert run_cli(geos, dst, "--unit", unit["id"]) == 0
    assert run_cli(geos, dst, "--finalize") == 0
    assert_same_dataset(geos, dst)


def test_cli_prints_auto_chunks_and_the_seed_grid_without_writing(geos, tmp_path, capsys):
    assert run_cli(geos, tmp_path / "never.zarr", "--chunks", "auto", "--target-chunk-mb", "0.02", "--print-chunks") == 0
    chunks = json.loads(capsys.readouterr().out)["BCEXTTAU"]
    assert 0.7 * 20_000 <= chunks["time"] * chunks["lat"] * chunks["lon"] * 4 <= 1.3 * 20_000
    assert run_cli(geos, "--grid", "seed") == 0
    grid = json.loads(capsys.readouterr().out)["BCEXTTAU"]["chunks"]
    assert "time=48,lat=10,lon=10" in grid and "time=1,lat=37,lon=72" in grid
    assert not (tmp_path / "never.zarr").exists()


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--chunks", "time=12,level=3"], "level not in the file"),
        (["--chunks", "time=twelve"], "not a positive size"),
        (["--shards", "time=13", "--chunks", "time=12"], "whole multiple"),
        (["--max-mem", "lots"], "--max-mem: not a size: 'lots'"),
        (["--max-mem", "1KiB", "--chunks", "time=12"], "max-mem"),
        (["--compressor", "gzip:9"], "unknown compressor"),
    ],
)
def test_cli_bad_options_are_one_line_errors_and_write_nothing(geos, tmp_path, capsys, argv, message):
    dst = tmp_path / "o.zarr"
    assert run_cli(geos, dst, *argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and err.startswith("layoutlab rechunk: error:")
    assert not dst.exists()


def test_cli_non_array_file_is_refused(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("not an array\n")
    assert run_cli(text, tmp_path / "o.zarr") == 2
    assert f"{text}: is not an HDF5/NetCDF-4 file or a Zarr store" in capsys.readouterr().err
    assert not (tmp_path / "o.zarr").exists()


def test_cli_existing_destination_needs_overwrite_and_is_left_untouched(geos, tmp_path, capsys):
    dst = tmp_path / "o.zarr"
    rechunk(geos, dst, chunks={"time": 12})
    before = _store_files(dst)
    assert run_cli(geos, dst, "--chunks", "time=1") == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert _store_files(dst) == before
    assert run_cli(geos, dst, "--chunks", "time=1", "--overwrite", "--no-progress") == 0
    assert zarr.open_array(dst / "BCEXTTAU").chunks == (1, 37, 72)


def test_cli_overwrite_never_deletes_a_directory_that_is_not_a_zarr_store(geos, tmp_path, capsys):
    dst = tmp_path / "mine"
    dst.mkdir()
    (dst / "thesis.tex").write_text("precious")
    assert run_cli(geos, dst, "--overwrite") == 2
    assert "not a Zarr store" in capsys.readouterr().err
    assert (dst / "thesis.tex").read_text() == "precious"


# --- memory ---------------------------------------------------------------------------

PEAK_RSS = textwrap.dedent(
    """
    import json, sys
    from layoutlab.cli import main
    code = main(sys.argv[1:])
    # VmHWM (this process's own high-water mark); ru_maxrss would carry the parent's over fork+exec.
    hwm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print(json.dumps({"code": code, "peak_rss": hwm}), file=sys.stderr)
    """
)


def peak_rss(*argv) -> int:
    """Peak RSS (bytes) of one ``layoutlab`` run in a fresh process."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *map(str, argv)], capture_output=True, text=True, timeout=300)
    last = json.loads(done.stderr.strip().splitlines()[-1])
    assert last["code"] == 0, done.stderr
    return last["peak_rss"]


@pytest.mark.slow
def test_peak_rss_of_a_unit_and_of_a_whole_run_stays_under_the_bound_plus_the_baseline(tmp_path):
    # 24 MiB (and 96 MiB) of data through a 6 MiB bound; the baseline is the same command
    # on a tiny file (imports), plus the fixed working memory docs/rechunk.md states.
    big = write_geos(tmp_path / "big.nc", shape=(96, 181, 360), complevel=1)
    bigger = write_geos(tmp_path / "bigger.nc", shape=(384, 181, 360), complevel=1)
    tiny = write_geos(tmp_path / "tiny.nc", shape=(2, 3, 4))
    bound = 6 * 2**20
    baseline = peak_rss("rechunk", tiny, tmp_path / "tiny.zarr", "--chunks", "time=2,lat=1,lon=1", "--no-progress")
    target = ["--chunks", "time=96,lat=10,lon=10", "--max-mem", str(bound)]  # the worst case: 1 x lat x lon -> full time
    whole = peak_rss("rechunk", big, tmp_path / "whole.zarr", *target, "--no-progress")
    target4 = ["--chunks", "time=384,lat=10,lon=10", "--max-mem", str(bound)]
    whole4 = peak_rss("rechunk", bigger, tmp_path / "whole4.zarr", *target4, "--no-progress")
    assert run_cli(big, tmp_path / "units.zarr", *target, "--plan-only") == 0
    plan = rz.load_plan(str(tmp_path / "units.zarr"))
    assert plan["stages"] == 2
    units = []
    for stage in range(plan["stages"]):
        ids = [u["id"] for u in plan["units"] if u["stage"] == stage]
        biggest = max(ids, key=lambda k: np.prod(np.subtract(plan["units"][k]["stop"], plan["units"][k]["start"])))
        units.append(peak_rss("rechunk", big, tmp_path / "units.zarr", "--unit", biggest))
        for k in ids:
            if k != biggest:
                rz.run_unit(plan, k)
    # Out of order: the last stage-1 unit first, in a fresh process: it runs every stage-0 unit
    # it reads one after the other, then itself.
    assert run_cli(big, tmp_path / "reversed.zarr", *target, "--plan-only") == 0
    reversed_plan = rz.load_plan(str(tmp_path / "reversed.zarr"))
    last = reversed_plan["units"][-1]
    catch_up = peak_rss("rechunk", big, tmp_path / "reversed.zarr", "--unit", last["id"])
    feeding = rz.units_feeding(reversed_plan, last)
    assert len(feeding) > 1 and all(rz.run_unit(reversed_plan, j)["skipped"] for j in feeding)
    data = 96 * 181 * 360 * 4
    assert data > 3 * bound
    print(f"baseline {baseline / 2**20:.1f} MiB, whole run {whole / 2**20:.1f} MiB (4x data: {whole4 / 2**20:.1f}), "
          f"units {[round(u / 2**20, 1) for u in units]} MiB, a stage-1 unit first (catch-up) {catch_up / 2**20:.1f} MiB")
    allowed = baseline + rz.FIXED_WORKING_MEMORY + bound
    assert whole <= allowed and whole4 <= allowed
    assert max(units) <= allowed and catch_up <= allowed  # a unit alone imports less than a whole run (no xarray)
    assert whole4 < whole + bound / 2  # four times the data, not more memory
