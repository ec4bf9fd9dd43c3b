"""Issue 36 through the local pipeline: a deflate bomb, a filter whose plugin is absent, a hard-link cycle
and a plan nested 100,000 deep. Each upload ends in an item that names its key and the true reason; no
variant is READY without a variable of the upload unless its record says so.

Before: the bomb's Zarr variant was READY without the variable (MemoryError at the function's limit) or
with a truncated chunk; the absent filter's variants were READY without its data; the cycle ran until the
convert task's timeout ("Sandbox.Timedout: handler:convert: timed out", no key, no reason); the deep plan
was retried twice and dropped, with no item at all.
"""

from __future__ import annotations

import pytest

from layoutlab.local import dispatch
from layoutlab.local.pipeline import LocalPipeline

pytestmark = pytest.mark.slow

PLAN = {"variants": [{"kind": "original"}, {"kind": "rechunk-zarr", "chunks": "map"},
                     {"kind": "icechunk", "chunks": "map"}],
        "patterns": {"grid": ["timeseries-point"], "granule": []},
        "readers": {"hdf5": ["h5py-s3fs-aligned"], "zarr": ["zarr-obstore"]},
        "platforms": ["local-lambda"], "repetitions": 1}


@pytest.fixture(scope="module")
def round2(local_cloud, tmp_path_factory):
    from hostile_files import add_absent_filter, add_deflate_bomb, add_hard_link_cycle, on_a_grid

    work = tmp_path_factory.mktemp("round2")
    pipeline = LocalPipeline(local_cloud)
    pipeline.setup()
    pipeline.put_plan("round2", PLAN)
    outcomes = {}
    for name, add in (("bomb", add_deflate_bomb), ("absent", add_absent_filter), ("cycle", add_hard_link_cycle)):
        source = on_a_grid(work / f"{name}.nc", add)
        [outcomes[name]] = pipeline.deliver(pipeline.upload(source, key=f"incoming/{name}.nc", plan="round2"))
    depth = 100_000
    pipeline.s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key="plans/deep.json",
                           Body=b'{"variants": ' + b"[" * depth + b"]" * depth + b"}")
    plain = on_a_grid(work / "plain.nc", lambda f: None)
    [outcomes["deep"]] = pipeline.deliver(pipeline.upload(plain, key="incoming/deep.nc", plan="deep"))
    final = pipeline.wait([outcomes[k] for k in ("bomb", "absent", "cycle")], timeout=900)
    try:
        yield pipeline, outcomes, final
    finally:
        local_cloud.reset()


def _items(pipeline, outcome, kind):
    return pipeline.store.items(dataset=outcome["dataset_id"], kind=kind)


@pytest.mark.parametrize("name, reason", [
    ("bomb", "a deflate chunk inflates past its declared size of 120 bytes"),
    ("absent", "variable packed cannot be converted: its filter plugin is absent here (32099"),
])
def test_a_variable_that_cannot_be_converted_fails_its_variants_naming_it(round2, name, reason):
    pipeline, outcomes, final = round2
    outcome = outcomes[name]
    assert outcome["status"] == "started", outcome
    variants = {v["variant"]: v for v in _items(pipeline, outcome, "VARIANT")}
    made = {n: v for n, v in variants.items() if v["variant_kind"] in ("rechunk-zarr", "icechunk")}
    assert len(made) == 2, variants
    for variant in made.values():  # neither READY without the variable
        assert variant["status"] == "FAILURE", variant
        assert variant["reason"].startswith(f"s3://{dispatch.INGEST_BUCKET}/incoming/{name}.nc: "), variant
        assert "\n" not in variant["reason"]
    zarr = next(v for v in made.values() if v["variant_kind"] == "rechunk-zarr")
    assert reason in zarr["reason"], zarr["reason"]
    if name == "bomb":  # (the variable is named)
        assert "the stored data of bomb cannot be read" in zarr["reason"], zarr["reason"]
    failures = " ".join(f["reason"] for f in _items(pipeline, outcome, "FAILURE"))
    assert reason in failures


def test_a_hard_link_cycle_is_converted_once_and_said(round2):
    pipeline, outcomes, final = round2
    outcome = outcomes["cycle"]
    assert final[outcome["dataset_id"]] == "SUCCEEDED", final
    variants = {v["variant_kind"]: v for v in _items(pipeline, outcome, "VARIANT")}
    zarr = variants["rechunk-zarr"]
    assert zarr["status"] == "READY", zarr
    skipped = {s.get("group"): s["reason"] for s in zarr["rechunk"]["skipped"]}
    assert "a cycle" in skipped["a/b/loop"], skipped
    assert not [f for f in _items(pipeline, outcome, "FAILURE") if "timed out" in f["reason"]]


def test_a_plan_nested_100000_deep_ends_in_a_failure_item_naming_the_key(round2):
    pipeline, outcomes, _ = round2
    outcome = outcomes["deep"]
    assert outcome["status"] == "rejected", outcome
    [failure] = _items(pipeline, outcome, "FAILURE")
    assert failure["reason"].startswith(f"s3://{dispatch.INGEST_BUCKET}/incoming/deep.nc: plan 'deep'") or \
        failure["reason"].startswith(f"s3://{dispatch.INGEST_BUCKET}/incoming/deep.nc: plan s3://"), failure
    assert "nested too deeply" in failure["reason"], failure
