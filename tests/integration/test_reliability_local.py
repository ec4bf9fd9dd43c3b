"""Reliability of the whole local pipeline (issue #8, items 1-4): duplicate and concurrent
deliveries, new versions and late events, awkward keys, multi-record events.

Every test runs real uploads through ingest -> state machine -> convert -> bench ->
summarize on the local cloud, with a plan small enough to keep each pipeline to a
few seconds: the original and (where a conversion matters) one paged variant, one
pattern, one reader, one platform, one repetition.
"""

from __future__ import annotations

import threading

import pytest

from layoutlab import observability as obs
from layoutlab.local import dispatch, load
from layoutlab.local.load import ONE_CASE_PLAN
from layoutlab.local.pipeline import LocalPipeline
from layoutlab.pipeline import events
from layoutlab.samples import geos

pytestmark = pytest.mark.slow

TINY_SHAPE = (4, 5, 6)
TWO_VARIANT_PLAN = {**ONE_CASE_PLAN, "name": "two-variants",
                    "variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "64KiB"}]}
ODD_KEYS = [
    "incoming/with space/a b.nc",
    "incoming/literal+plus.nc",
    "incoming/ünïcødé/数据.nc",
    "incoming/paren (1) copy.nc",
    "incoming/" + "/".join(["deep"] * 30) + "/x.nc",
]
# S3's limit is 1,024 bytes of UTF-8; a 1,000-byte key with its prefix
ODD_KEYS.append("incoming/" + "k" * (1000 - len("incoming/") - len(".nc")) + ".nc")
assert len(ODD_KEYS[-1].encode()) == 1000


@pytest.fixture
def pipeline(cloud, tmp_path):
    pipe = LocalPipeline(cloud)
    pipe.setup()
    # Versioned outputs: a variant or report written twice would show as two versions.
    pipe.s3.put_bucket_versioning(Bucket=dispatch.OUTPUTS_BUCKET, VersioningConfiguration={"Status": "Enabled"})
    pipe.put_plan(ONE_CASE_PLAN["name"], ONE_CASE_PLAN)
    pipe.put_plan(TWO_VARIANT_PLAN["name"], TWO_VARIANT_PLAN)
    pipe.sample = geos.write_geos(tmp_path / "tiny.nc", shape=TINY_SHAPE)
    return pipe


def executions(pipe) -> list[dict]:
    return pipe.sfn.list_executions(stateMachineArn=dispatch.state_machine_arn())["executions"]


def metric_samples(pipe, spec) -> int:
    return load.metric_samples(pipe.cloud.moto_endpoint, spec)


def output_versions(pipe, dataset_id: str) -> dict[str, int]:
    """Key -> number of stored versions, for every output object of ``dataset_id``."""
    counts: dict[str, int] = {}
    pages = pipe.s3.get_paginator("list_object_versions").paginate(Bucket=dispatch.OUTPUTS_BUCKET)
    for page in pages:
        for version in page.get("Versions", []):
            if dataset_id in version["Key"]:
                counts[version["Key"]] = counts.get(version["Key"], 0) + 1
    return counts


def succeeded(pipe, outcomes) -> dict[str, str]:
    return pipe.wait([o for o in outcomes if o["status"] == "started"], timeout=600)


def test_one_event_twice_at_once_then_five_times_in_a_row_runs_one_pipeline(pipeline):
    event = pipeline.upload(pipeline.sample, key="incoming/dup.nc", plan="two-variants")
    # The first two deliveries race: two ingest processes side by side (each dispatcher
    # runs its own tasks one at a time, so one dispatcher each).
    side_by_side = [dispatch.Dispatcher(pipeline.cloud.moto_endpoint, pipeline.cloud.control_url, None)
                    for _ in range(2)]
    at_once: list = []
    errors: list = []
    barrier = threading.Barrier(2)

    def deliver(dispatcher):
        barrier.wait()
        try:
            at_once.extend(dispatcher.invoke_lambda(dispatch.function_name("ingest"), event)["outcomes"])
        except Exception as error:  # Powertools refuses a delivery while the same one is in progress
            errors.append(error)

    threads = [threading.Thread(target=deliver, args=(d,)) for d in side_by_side]
    [t.start() for t in threads]
    [t.join() for t in threads]
    # An invocation refused while the other is in progress fails, and Lambda retries it:
    for error in errors:
        assert "IdempotencyAlreadyInProgress" in str(error), error
        at_once += pipeline.deliver(event)
    in_a_row = [pipeline.deliver(event)[0] for _ in range(5)]

    assert sorted(o["status"] for o in at_once) == ["duplicate", "started"], (at_once, errors)
    assert [o["status"] for o in in_a_row] == ["duplicate"] * 5
    [first] = [o for o in at_once if o["status"] == "started"]
    assert {o["execution_name"] for o in in_a_row + at_once} == {first["execution_name"]}
    final = succeeded(pipeline, [first])
    assert final == {first["dataset_id"]: "SUCCEEDED"}

    assert len(executions(pipeline)) == 1
    assert metric_samples(pipeline, obs.DATASETS_STARTED) == 1
    assert metric_samples(pipeline, obs.DATASETS_DUPLICATE) == 6
    items = pipeline.store.items(dataset=first["dataset_id"])
    [run] = [i for i in items if i["kind"] == "RUN"]
    variants = [i for i in items if i["kind"] == "VARIANT"]
    results = [i for i in items if i["kind"] == "RESULT"]
    assert sorted(v["variant"] for v in variants) == ["original", "paged-64KiB"]
    assert run["cases"] == 2 == len(results)
    # one bench run per case (each run sends one wall-time data point), not one per delivery
    assert metric_samples(pipeline, obs.BENCH_WALL_TIME) == 2
    written = output_versions(pipeline, first["dataset_id"])
    assert written and all(n == 1 for n in written.values()), written  # every output written once


def test_a_new_version_runs_again_and_an_older_event_arriving_late_changes_nothing(pipeline, tmp_path):
    key = "incoming/versions.nc"
    v1 = pipeline.upload(pipeline.sample, key=key, plan="one-case")
    [first] = pipeline.deliver(v1)
    assert succeeded(pipeline, [first]) == {first["dataset_id"]: "SUCCEEDED"}
    # the key overwritten twice (new content: more time steps; the bench check regenerates
    # the values from the shape); the events of v2 and v3 arrive in the wrong order
    v2 = pipeline.upload(geos.write_geos(tmp_path / "v2.nc", shape=(5, 5, 6)), key=key, plan="one-case")
    v3 = pipeline.upload(geos.write_geos(tmp_path / "v3.nc", shape=(6, 5, 6)), key=key, plan="one-case")
    [third] = pipeline.deliver(v3)
    [second] = pipeline.deliver(v2)
    assert third["status"] == "started"
    assert second["status"] == "stale" and "older than the current version" in second["reason"]
    assert succeeded(pipeline, [third]) == {third["dataset_id"]: "SUCCEEDED"}

    assert sorted(e["name"] for e in executions(pipeline)) == sorted([first["execution_name"], third["execution_name"]])
    store = pipeline.store
    assert store.items(dataset=second["dataset_id"]) == []
    current = store.current_version(dispatch.INGEST_BUCKET, key)
    assert current["dataset"] == third["dataset_id"]
    assert current["version_id"] == v3["detail"]["object"]["version-id"]
    # the first version's results are kept, each dataset labelled with its own version
    for outcome, event in ((first, v1), (third, v3)):
        [run] = store.items(dataset=outcome["dataset_id"], kind="RUN")
        assert run["source"]["version_id"] == event["detail"]["object"]["version-id"]
        assert run["source"]["key"] == key and run["source"]["size"] == event["detail"]["object"]["size"]
        [result] = store.items(dataset=outcome["dataset_id"], kind="RESULT")
        assert result["checksum_ok"] is True
    # and the late event of v2 delivered again still changes nothing
    assert pipeline.deliver(v2)[0]["status"] in ("stale", "duplicate")
    assert len(executions(pipeline)) == 2


def test_awkward_keys_in_one_multi_record_event_are_all_processed_end_to_end(pipeline):
    records, bridge_events = [], []
    for key in ODD_KEYS:
        bridge = pipeline.upload(pipeline.sample, key=key, plan="one-case")
        obj = bridge["detail"]["object"]
        bridge_events.append(bridge)
        # the S3 notification of the same upload: key URL-encoded ('+' for a space, %2B for '+')
        records += events.s3_notification(dispatch.INGEST_BUCKET, key, version_id=obj["version-id"],
                                          etag=obj["etag"], size=obj["size"], sequencer=obj["sequencer"])["Records"]
    encoded = [r["s3"]["object"]["key"] for r in records]
    assert "incoming/with+space/a+b.nc" in encoded and "incoming/literal%2Bplus.nc" in encoded

    outcomes = pipeline.deliver({"Records": records})  # one event, six records
    assert [o["key"] for o in outcomes] == ODD_KEYS
    assert [o["status"] for o in outcomes] == ["started"] * len(ODD_KEYS), outcomes
    final = succeeded(pipeline, outcomes)
    assert set(final.values()) == {"SUCCEEDED"} and len(final) == len(ODD_KEYS)
    for outcome in outcomes:
        [result] = pipeline.store.items(dataset=outcome["dataset_id"], kind="RESULT")
        assert result["checksum_ok"] is True and result["status"] == "ok"
        [run] = pipeline.store.items(dataset=outcome["dataset_id"], kind="RUN")
        assert run["source"]["key"] == outcome["key"]
    # The EventBridge form of the same uploads names the same object versions: nothing new.
    again = [pipeline.deliver(b)[0] for b in bridge_events]
    assert [o["status"] for o in again] == ["duplicate"] * len(ODD_KEYS)
    assert [o["dataset_id"] for o in again] == [o["dataset_id"] for o in outcomes]
    assert len(executions(pipeline)) == len(ODD_KEYS)


def test_a_version_overwritten_before_its_pipeline_runs_is_still_measured_as_itself(pipeline, tmp_path):
    from layoutlab.samples import atl03

    key = "incoming/overwritten.h5"
    grid = pipeline.upload(pipeline.sample, key=key, plan="one-case")
    # overwritten by a granule before the grid's event is processed (events may lag)
    granule = atl03.write_atl03(tmp_path / "granule.h5", photons=500, chunk=250)
    pipeline.upload(granule, key=key, plan="one-case")
    [outcome] = pipeline.deliver(grid)
    assert outcome["status"] == "started"
    pipeline.wait([outcome], timeout=300)
    [run] = pipeline.store.items(dataset=outcome["dataset_id"], kind="RUN")
    assert run["source"]["version_id"] == grid["detail"]["object"]["version-id"]
    assert run["kind_of_data"] == "grid"  # what the event's version is
    # the original variant was benchmarked on the event's version, and its values checked
    [result] = pipeline.store.items(dataset=outcome["dataset_id"], kind="RESULT")
    assert result["status"] == "ok" and result["checksum_ok"] is True
    assert result["target"].endswith("?versionId=" + grid["detail"]["object"]["version-id"])
