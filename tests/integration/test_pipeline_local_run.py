"""The whole pipeline on the local cloud, at a size CI can afford.

One module-scoped run: a GEOS-like file (its event delivered three times), an
ATL03-like granule, an empty upload and an HDF5 file with nothing layoutlab can
benchmark. Then the assertions a user would check: one execution per object
version, every planned case measured with the values checked, a summary, the
bad uploads recorded as failures with their reasons, and nothing written under
``incoming/``.
"""

from __future__ import annotations

import threading

import h5py
import numpy as np
import pytest

from layoutlab.local import dispatch
from layoutlab.local.pipeline import LocalPipeline
from layoutlab.samples import atl03, geos

pytestmark = pytest.mark.slow

CI_PLAN = {
    "name": "ci",
    "variants": [
        {"kind": "original"},
        {"kind": "repack-paged", "page_size": "1MiB"},
        {"kind": "rechunk-zarr", "chunks": "timeseries", "applies_to": "grid"},
        {"kind": "rechunk-zarr", "chunks": "map", "applies_to": "grid"},
    ],
    "patterns": {"grid": ["timeseries-point", "map-timestep"], "granule": ["beam-read"]},
    "readers": {"hdf5": ["h5py-s3fs-aligned"], "zarr": ["zarr-obstore"]},
    "platforms": ["local-lambda", "local-fargate"],
    "repetitions": 1,
    "max_concurrency": 1,
}


FAN_OUT_PLAN = {
    "name": "fanout",
    "variants": [
        {"kind": "rechunk-zarr", "chunks": {"time": 6, "lat": 19, "lon": 36}, "applies_to": "grid"},
        # a bound this small makes the plan two-stage (source -> intermediate -> target)
        {"kind": "rechunk-zarr", "chunks": {"time": 24, "lat": 3, "lon": 3}, "applies_to": "grid", "max_mem": "32KiB"},
    ],
    "patterns": {"grid": ["map-timestep", "timeseries-point"], "granule": []},
    "readers": {"hdf5": [], "zarr": ["zarr-obstore"]},
    "platforms": ["local-lambda"],
    "repetitions": 1,
    "fan_out_above_bytes": 1,
    # a point off the globe: that case fails, is recorded, and the dataset goes on
    "pattern_params": {"timeseries-point": {"lat": 95.0}},
}


@pytest.fixture(scope="module")
def run(local_cloud, tmp_path_factory):
    work = tmp_path_factory.mktemp("local-run")
    grid = geos.write_geos(work / "grid sample.nc", shape=(24, 19, 36))
    granule = atl03.write_atl03(work / "granule.h5", photons=4000, chunk=1000)
    empty = work / "empty.h5"
    empty.write_bytes(b"")
    flat = work / "flat.h5"
    with h5py.File(flat, "w") as f:  # names only: no numeric array for any pattern to read
        f["names"] = np.array([b"a", b"b"])
        f["scalar"] = 1.5

    pipeline = LocalPipeline(local_cloud)
    pipeline.setup()
    pipeline.put_plan("ci", CI_PLAN)
    pipeline.put_plan("fanout", FAN_OUT_PLAN)
    fanned = geos.write_geos(work / "fanned.nc", shape=(24, 19, 36))
    grid_event = pipeline.upload(grid, plan="ci")
    outcomes = pipeline.deliver(grid_event)
    duplicates = pipeline.deliver(grid_event)
    concurrent: list = []
    threads = [threading.Thread(target=lambda: concurrent.extend(pipeline.deliver(grid_event))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for path in (granule, empty, flat):
        outcomes += pipeline.deliver(pipeline.upload(path, plan="ci"))
    outcomes += pipeline.deliver(pipeline.upload(fanned, plan="fanout"))
    final = pipeline.wait([o for o in outcomes if o["status"] == "started"], timeout=900)
    by_key = {o["key"]: o for o in outcomes}
    try:
        yield pipeline, by_key, final, duplicates + concurrent
    finally:
        local_cloud.reset()


def items(pipeline, outcome, kind=None):
    return pipeline.store.items(dataset=outcome["dataset_id"], kind=kind)


def test_duplicate_events_start_nothing_new(run):
    pipeline, by_key, final, duplicates = run
    first = by_key["incoming/grid sample.nc"]
    # Powertools idempotency answers a repeated event with the first answer; the
    # execution name (and the conditional RUN item behind it) guarantee one execution.
    assert len(duplicates) == 3
    assert all(d["execution_name"] == first["execution_name"] for d in duplicates)
    executions = pipeline.sfn.list_executions(stateMachineArn=dispatch.state_machine_arn())["executions"]
    assert len(executions) == 4  # grid, granule, flat, fanned: the empty upload never started one


def test_every_planned_case_of_the_grid_is_measured_and_checked(run):
    pipeline, by_key, final, _ = run
    grid = by_key["incoming/grid sample.nc"]
    assert final[grid["dataset_id"]] == "SUCCEEDED"
    [run_item] = items(pipeline, grid, "RUN")
    results = items(pipeline, grid, "RESULT")
    assert run_item["cases"] == 4 * 2 * 2 == len(results)
    assert all(r["checksum_ok"] is True and r["status"] == "ok" for r in results)
    assert {r["platform"] for r in results} == {"local-lambda", "local-fargate"}
    assert all(r["isolation"]["fresh_process"] for r in results)
    # each case was measured in a child of the bench task, as on Lambda (forked after the init phase)
    assert {r["isolation"]["child"] for r in results} == {"fork"}
    variants = {v["variant"]: v for v in items(pipeline, grid, "VARIANT")}
    assert set(variants) == {"original", "paged-1MiB", "zarr-24x10x10", "zarr-1x19x36"}
    # the record says the paged copy was verified, its input's chunks decoded (in the Lambda runtime)
    assert variants["paged-1MiB"]["repack"]["verified"] is True, variants["paged-1MiB"]["repack"]
    assert variants["paged-1MiB"]["repack"]["decode_check"]["chunks"] > 0
    assert variants["paged-1MiB"]["platform"] == "local-lambda"
    [summary] = items(pipeline, grid, "SUMMARY")
    assert set(summary["platforms"]["local-lambda"]["patterns"]) == {"timeseries-point", "map-timestep"}
    # the recommendation names one of the dataset's variants, and the Pareto front holds variants
    assert summary["recommendation"].startswith("On local-lambda, keep ")
    assert any(name in summary["recommendation"] for name in variants)
    assert set(summary["pareto_front"]["local-lambda"]) <= set(variants)
    key = f"summaries/{grid['dataset_id']}.json"
    assert pipeline.s3.head_object(Bucket=dispatch.OUTPUTS_BUCKET, Key=key)["ContentLength"] > 0


def test_the_granule_is_benchmarked_with_granule_patterns_only(run):
    pipeline, by_key, final, _ = run
    granule = by_key["incoming/granule.h5"]
    assert final[granule["dataset_id"]] == "SUCCEEDED"
    results = items(pipeline, granule, "RESULT")
    assert {(r["variant"], r["pattern"]) for r in results} == {("original", "beam-read"), ("paged-1MiB", "beam-read")}


def test_bad_uploads_become_failure_items_with_reasons(run):
    pipeline, by_key, final, _ = run
    empty = by_key["incoming/empty.h5"]
    assert empty["status"] == "rejected" and "empty file" in empty["reason"]
    [failure] = items(pipeline, empty, "FAILURE")
    assert failure["stage"] == "ingest"

    flat = by_key["incoming/flat.h5"]
    assert final[flat["dataset_id"]] == "FAILED"
    [failure] = items(pipeline, flat, "FAILURE")
    assert failure["stage"] == "plan"
    assert "holds no numeric array to read (1 numeric array of one value or none, 1 dataset of strings" in failure["reason"]
    assert "UserError: UserError" not in failure["reason"]
    [run_item] = items(pipeline, flat, "RUN")
    assert run_item["status"] == "FAILED"


def test_nothing_is_written_under_incoming(run):
    pipeline = run[0]
    versions = pipeline.s3.list_object_versions(Bucket=dispatch.INGEST_BUCKET).get("Versions", [])
    keys = sorted(v["Key"] for v in versions)
    assert keys == ["incoming/empty.h5", "incoming/fanned.nc", "incoming/flat.h5", "incoming/granule.h5",
                    "incoming/grid sample.nc", "plans/ci.json", "plans/fanout.json",
                    "plans/local.json"]  # (setup: the plan of uploads naming none)
    outputs = pipeline.s3.list_objects_v2(Bucket=dispatch.OUTPUTS_BUCKET).get("Contents", [])
    assert outputs and not any(o["Key"].startswith("incoming/") for o in outputs)


def test_case_metrics_reach_the_local_cloudwatch_with_the_dashboard_names(run):
    import boto3

    from layoutlab import observability as obs

    pipeline = run[0]
    cloudwatch = boto3.client("cloudwatch", endpoint_url=pipeline.cloud.moto_endpoint, region_name="us-east-1")
    metrics = cloudwatch.list_metrics(Namespace=obs.NAMESPACE, MetricName=obs.BENCH_WALL_TIME.name)["Metrics"]
    assert metrics
    platforms = {d["Value"] for m in metrics for d in m["Dimensions"] if d["Name"] == obs.Dimension.PLATFORM}
    assert platforms == {"local-lambda", "local-fargate"}
    assert all(sorted(d["Name"] for d in m["Dimensions"]) == sorted(obs.BENCH_WALL_TIME.dimensions) for m in metrics)


def test_big_rechunks_fan_out_over_work_units_of_every_stage_and_are_published_whole(run, tmp_path):
    import json

    import xarray as xr

    pipeline, by_key, final, _ = run
    fanned = by_key["incoming/fanned.nc"]
    assert final[fanned["dataset_id"]] == "SUCCEEDED"
    variants = {v["variant"]: v for v in items(pipeline, fanned, "VARIANT")}
    assert set(variants) == {"zarr-6x19x36", "zarr-24x3x3"}
    assert all(v["status"] == "READY" for v in variants.values())
    units = pipeline.s3.get_object(Bucket=dispatch.OUTPUTS_BUCKET, Key=f"runs/{fanned['dataset_id']}/work-units.json")
    units = json.loads(units["Body"].read())
    by_variant = {name: [u for u in units if u["variant"]["name"] == name] for name in variants}
    assert len(by_variant["zarr-6x19x36"]) == 4  # 24 time steps in chunks of 6
    # The two-stage plan fans out too (no whole run on Fargate): every unit of both stages is an item.
    from layoutlab.convert.rechunk_zarr import plan_rechunk

    same_file = geos.write_geos(tmp_path / "fanned.nc", shape=(24, 19, 36))
    two_stage = plan_rechunk(str(same_file), str(tmp_path / "unused.zarr"), chunks={"time": 24, "lat": 3, "lon": 3},
                             max_mem="32KiB", prepare=False)
    assert two_stage["stages"] == 2
    assert [u["work_unit"]["k"] for u in by_variant["zarr-24x3x3"]] == list(range(len(two_stage["units"])))
    assert variants["zarr-24x3x3"]["units_done"] == len(two_stage["units"])
    results = items(pipeline, fanned, "RESULT")
    assert {r["variant"] for r in results} == set(variants)
    assert all(r["checksum_ok"] is True and r["pattern"] == "map-timestep" for r in results)
    failures = items(pipeline, fanned, "FAILURE")
    assert {f["stage"] for f in failures} == {"bench"} and all("lat=95.0 is outside the grid" in f["reason"] for f in failures)
    assert {f["detail"] for f in failures} == {f"{v}#timeseries-point#zarr-obstore#local-lambda#000" for v in variants}
    [summary] = items(pipeline, fanned, "SUMMARY")
    assert summary["cases_failed"] == 2 and summary["cases_planned"] == 4
    expected = geos.geos_values(geos.GeosGrid((24, 19, 36)), 0, 24)
    for variant in variants.values():
        store = xr.open_zarr(variant["uri"], storage_options={"client_kwargs": {"endpoint_url": pipeline.cloud.moto_endpoint}})
        np.testing.assert_array_equal(store[geos.VARIABLE].values, expected)
