"""Benchmark cases end to end on the local cloud: records, request counts, values, bad targets, CLI."""

from __future__ import annotations

import json
import subprocess

import pytest

from layoutlab.bench.runner import run_case, run_case_isolated, upload_target
from layoutlab.cli import main
from layoutlab.results.record import validate_record
from layoutlab.samples.atl03 import write_atl03
from layoutlab.samples.geos import write_geos

SHAPE = (24, 46, 72)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import xarray as xr

    root = tmp_path_factory.mktemp("bench-files")
    geos = write_geos(root / "geos.nc", shape=SHAPE)
    with xr.open_dataset(geos) as ds:
        ds.to_zarr(root / "geos.zarr", zarr_format=3, mode="w", consolidated=False,
                   encoding={"BCEXTTAU": {"chunks": (24, 8, 8)}})
    atl03 = write_atl03(root / "atl03.h5", photons=20000, chunk=2000)
    paged = root / "atl03-paged.h5"
    # stand-in for the hdf5 area's repack until it lands: paged aggregation, 1 MiB pages (small file)
    subprocess.run(["h5repack", "-S", "PAGE", "-G", str(2**20), str(atl03), str(paged)], check=True)
    (root / "junk.h5").write_bytes(b"this is not HDF5" * 100)
    return {"geos": geos, "zarr": root / "geos.zarr", "atl03": atl03, "paged": paged, "junk": root / "junk.h5"}


@pytest.fixture
def targets(cloud, files):
    return {name: upload_target(path, cloud) for name, path in files.items()}


@pytest.mark.parametrize("pattern, reader, target", [
    ("timeseries-point", "h5py-s3fs-default", "geos"),
    ("timeseries-region-mean", "h5py-s3fs-aligned", "geos"),
    ("map-time-mean", "xarray-h5netcdf", "geos"),
    ("map-timestep", "zarr-obstore", "zarr"),
    ("timeseries-point", "zarr-fsspec", "zarr"),
    ("beam-subset", "h5py-s3fs-aligned", "atl03"),
])
def test_cases_measure_and_check_values(cloud, targets, pattern, reader, target):
    record = run_case({"target": targets[target], "pattern": pattern, "reader": reader, "latency_ms": 0,
                       "bandwidth_mbps": 0})
    assert record["status"] == "ok", record["error"]
    assert validate_record(record) == []
    assert record["checksum_ok"] is True
    assert record["requests"] >= 1 and record["bytes_transferred"] > 0 and record["request_counting"] == "client+proxy"
    assert record["requests"] == sum(p["requests"] for p in record["phases"].values())
    assert record["wall_s"] == pytest.approx(record["open_s"] + record["select_s"] + record["load_s"])
    assert record["points"] > 0 and record["bytes_needed"] >= record["points"]
    assert record["reader_settings"]["library"]


def test_zarr_fsspec_sends_more_requests_than_obstore(cloud, targets):
    counts = {}
    for reader in ("zarr-obstore", "zarr-fsspec", "zarr-fsspec"):  # twice: each run starts cold, sessions closed
        record = run_case({"target": targets["zarr"], "pattern": "map-timestep", "reader": reader,
                           "latency_ms": 0, "bandwidth_mbps": 0})
        assert record["status"] == "ok", record["error"]
        assert counts.setdefault(reader, (record["get_requests"], record["head_requests"])) == (
            record["get_requests"], record["head_requests"])
    assert counts["zarr-obstore"][1] == 0 and sum(counts["zarr-fsspec"]) > sum(counts["zarr-obstore"])


def test_aligned_reader_on_paged_file_lists_in_few_requests(cloud, targets):
    # the page size comes with the case (the pipeline's cases carry their paged variant's), never from its name
    paged = run_case({"target": targets["paged"], "pattern": "granule-open-list", "reader": "h5py-s3fs-aligned",
                      "variant": "paged-1MiB", "reader_options": {"page_size": 2**20}, "latency_ms": 0,
                      "bandwidth_mbps": 0})
    assert paged["status"] == "ok" and paged["reader_settings"]["block_size"] == 2**20
    assert paged["reader_settings"]["page_buf_size"] == 4 * 2**20 and paged["reader_settings"]["rdcc_nbytes"] == 2**20
    assert paged["points"] > 500  # objects listed
    assert paged["requests"] <= 6


@pytest.mark.slow
def test_isolated_run_records_the_process(cloud, targets):
    record = run_case_isolated({"target": targets["geos"], "pattern": "map-timestep", "reader": "h5py-s3fs-aligned",
                                "platform": "local-fargate", "latency_ms": 10}, cloud)
    assert record["status"] == "ok", record["error"]
    assert record["latency_ms"] == 10 and record["platform_profile"]["memory_mb"] == 2048
    iso = record["isolation"]
    assert iso["fresh_process"] and iso["memory_limit_mb"] == 2048 and iso["process_wall_s"] > record["wall_s"]
    assert 30 < record["peak_rss_mb"] < 1000
    # every request waited 10 ms before its first byte
    assert record["wall_s"] >= record["requests"] * 0.010


@pytest.mark.parametrize("target, pattern, reader, says", [
    ("missing", "map-timestep", "h5py-s3fs-default", "not found"),
    ("junk", "map-timestep", "h5py-s3fs-default", "not readable as HDF5"),
    ("atl03", "map-timestep", "h5py-s3fs-aligned", "no array 'BCEXTTAU'"),
    ("geos", "beam-read", "h5py-s3fs-default", "no array 'gt1l/heights/h_ph'"),
    ("geos", "map-timestep", "zarr-obstore", "not a Zarr v3 group"),
    ("zarr", "map-timestep", "h5py-s3fs-default", "not readable as HDF5"),
    ("geos", "full-read-throughput", "h5py-ros3", "ros3"),
])
def test_bad_targets_give_error_records(cloud, targets, target, pattern, reader, says):
    url = targets.get(target, "s3://layoutlab-bench/targets/does-not-exist.h5")
    record = run_case({"target": url, "pattern": pattern, "reader": reader})
    assert record["status"] == "error" and says in record["error"] and url in record["error"]
    assert "Traceback" not in record["error"] and validate_record(record) == []


@pytest.mark.slow
def test_cli_json_and_matrix(cloud, files, tmp_path, capsys):
    assert main(["bench", str(files["geos"]), "--pattern", "map-timestep", "--reader", "h5py-s3fs-default",
                 "--repeat", "2", "--latency-ms", "0", "--variant", "original", "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["repetition"] for r in records] == [0, 1] and all(r["checksum_ok"] for r in records)
    assert records[0]["dataset"] == "geos.nc" and records[0]["requests"] == records[1]["requests"]
    assert records[0]["target"].startswith("s3://layoutlab-bench/targets/")  # uploaded to the test's cloud

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"cases": [
        {"target": str(files["zarr"]), "pattern": "timeseries-point", "reader": "zarr-obstore", "repeat": 2,
         "params": {"lat": 40.0, "lon": -83.0}},
        {"target": str(tmp_path / "nope.nc"), "pattern": "map-timestep", "reader": "h5py-s3fs-default"},
    ]}))
    out = tmp_path / "results.jsonl"
    assert main(["bench", "--matrix", str(plan), "--output", str(out)]) == 1  # one case failed
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in lines] == ["ok", "ok", "error"]
    assert lines[0]["pattern_params"]["lat"] == 40.0
    assert lines[2]["error"] == f"{tmp_path / 'nope.nc'}: no such file or directory"


def test_cli_usage_errors(capsys):
    assert main(["bench", "x.nc"]) == 2
    assert "--pattern and --reader are required" in capsys.readouterr().err
