"""A table's rows and a swath's scan lines, re-laid in Zarr, through the whole local pipeline.

GOES GLM (a table: events, groups and flashes of three lengths) gets ``zarr-rows1e4`` (18,361 events in two
chunks of 10^4 rows, each group's columns chunked alike) and GPM DPR (a swath: 137 scan lines x 49 rays x 176
bins) ``zarr-lines7`` (blocks of 7 scan lines, about 256 KiB of its largest variable). Each product is dropped
into the local cloud with a reduced plan (the original and the new layout, one reader each, one repetition):
the run ends SUCCEEDED; the new variant's stored chunks are the shape its name says; its family cases (the
existing bench runner, one cold process each) read values the summary finds equal to the original's, and equal
to what h5py reads from the original file at the same selection.
"""

from __future__ import annotations

import json

import h5py
import pytest
from shared_corpus import CORPUS

from layoutlab.bench.patterns import get_pattern, values_digest
from layoutlab.bench.readers import H5pyHandle
from layoutlab.local.pipeline import LocalPipeline

pytestmark = pytest.mark.slow

PRODUCTS = {"table": (sorted((CORPUS / "products").glob("OR_GLM-L2-LCFA_*.nc")), "zarr-rows1e4", 10_000),
            "swath": (sorted((CORPUS / "gpm").glob("2A-RW-BRS*.HDF5")), "zarr-lines7", 7)}
PLAN = {
    "name": "role-layouts",
    "variants": [{"kind": "original"},
                 {"kind": "rechunk-zarr", "chunks": "rows", "rows": 10000, "applies_to": "table"},
                 {"kind": "rechunk-zarr", "chunks": "scan-lines", "target_chunk_bytes": "256KiB", "applies_to": "swath"}],
    "families": {"variables": 1, "roles": 1},
    "readers": {"hdf5": ["h5py-s3fs-aligned"], "zarr": ["zarr-obstore"]},
    "platforms": ["local-lambda"],
    "repetitions": 1,
    "max_concurrency": 2,
}


@pytest.fixture(scope="module")
def runs(local_cloud):
    if not all(paths for paths, _, _ in PRODUCTS.values()):
        pytest.skip("shared corpus products not found")
    pipeline = LocalPipeline(local_cloud)
    pipeline.setup()
    pipeline.put_plan(PLAN["name"], PLAN)
    outcomes = {}
    for role, (paths, _, _) in PRODUCTS.items():
        [outcome] = pipeline.deliver(pipeline.upload(paths[0], plan=PLAN["name"]))
        outcomes[role] = outcome
    final = pipeline.wait([o for o in outcomes.values() if o["status"] == "started"], timeout=900)
    try:
        yield pipeline, outcomes, final
    finally:
        local_cloud.reset()


@pytest.mark.parametrize("role", list(PRODUCTS))
def test_the_new_layout_runs_and_reads_the_originals_values(runs, role):
    pipeline, outcomes, final = runs
    paths, variant, record_chunk = PRODUCTS[role]
    outcome = outcomes[role]
    assert outcome["status"] == "started", outcome
    items = pipeline.store.items(dataset=outcome["dataset_id"])
    failures = [i for i in items if i["kind"] == "FAILURE"]
    assert final.get(outcome["dataset_id"]) == "SUCCEEDED" and not failures, failures
    [run] = [i for i in items if i["kind"] == "RUN"]
    assert run["kind_of_data"] == role and run["variants"] == ["original", variant], run["variants"]
    results = [i for i in items if i["kind"] == "RESULT"]
    new = [r for r in results if r["variant"] == variant]
    families = {r["pattern"].split(":")[0] for r in new} - {"open-list"}
    assert len(families) >= 3, families
    # the summary compares each case's values with the original's, case by case
    [summary] = [i for i in items if i["kind"] == "SUMMARY"]
    check = summary["values_check"]
    assert check["equal"] == check["checked"] > 0 and not check["mismatches"], check
    # and so does h5py on the original file, independently of the pipeline
    with h5py.File(paths[0], "r") as f:
        handle = H5pyHandle("hdf5", f)
        for record in (r for r in new if r["pattern"] != "open-list"):
            pattern = get_pattern(record["pattern"])
            params = pattern.params(record["pattern_params"])
            expected = values_digest(pattern.load(handle, pattern.select(handle, params)).values)
            assert record["result_summary"]["values_sha256"] == expected, (variant, record["pattern"])
    # the stored chunks are what the name says: every array's first axis in blocks of record_chunk, the rest whole
    [item] = [i for i in items if i["kind"] == "VARIANT" and i.get("variant") == variant]
    bucket, _, prefix = item["uri"].removeprefix("s3://").partition("/")
    s3 = pipeline.s3
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
            for o in page.get("Contents", []) if o["Key"].endswith("/zarr.json")]
    chunked = 0
    for key in keys:
        meta = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        if meta.get("node_type") != "array" or not meta["shape"]:
            continue
        chunks = meta["chunk_grid"]["configuration"]["chunk_shape"]
        assert chunks == [min(meta["shape"][0], record_chunk), *meta["shape"][1:]], (key, chunks, meta["shape"])
        chunked += meta["shape"][0] > record_chunk
    assert chunked >= 1, keys
