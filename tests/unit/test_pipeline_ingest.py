"""Ingest: one execution per object version, bad files recorded, nothing written to the ingest bucket."""

from __future__ import annotations

import io
import json
import threading

import boto3
import h5py
import numpy as np
import pytest
from moto import mock_aws

from layoutlab.pipeline import events
from layoutlab.pipeline.ingest import IngestSettings, ingest_event
from layoutlab.results.store import ResultsStore

ROLE = "arn:aws:iam::123456789012:role/sfn"


def hdf5_bytes(tmp_path, name="x.h5") -> bytes:
    path = tmp_path / name
    with h5py.File(path, "w") as f:
        f["v"] = np.arange(100, dtype="f4")
    return path.read_bytes()


@pytest.fixture
def cloud():
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="ingest")
        s3.put_bucket_versioning(Bucket="ingest", VersioningConfiguration={"Status": "Enabled"})
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        arn = sfn.create_state_machine(
            name="pipeline", roleArn=ROLE,
            definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
        )["stateMachineArn"]
        store = ResultsStore("results")
        store.create_table()
        settings = IngestSettings(state_machine_arn=arn, outputs_bucket="outputs")
        yield s3, sfn, store, settings


def put(s3, key, body, **extra):
    response = s3.put_object(Bucket="ingest", Key=key, Body=body, **extra)
    return events.s3_notification("ingest", key, version_id=response["VersionId"],
                                  etag=response["ETag"].strip('"'), size=len(body))


def ingest(cloud, event):
    s3, sfn, store, settings = cloud
    return ingest_event(event, s3=s3, sfn=sfn, store=store, settings=settings)


def executions(cloud):
    s3, sfn, store, settings = cloud
    return sfn.list_executions(stateMachineArn=settings.state_machine_arn)["executions"]


def ingest_objects(cloud):
    return sorted(o["Key"] for o in cloud[0].list_object_versions(Bucket="ingest").get("Versions", []))


def test_a_good_upload_starts_one_execution_named_after_the_object_version(cloud, tmp_path):
    event = put(cloud[0], "incoming/my file (1).h5", hdf5_bytes(tmp_path))
    [outcome] = ingest(cloud, event)
    assert outcome.status == "started"
    [execution] = executions(cloud)
    assert execution["name"] == outcome.execution_name
    description = cloud[1].describe_execution(executionArn=execution["executionArn"])
    payload = json.loads(description["input"])
    assert payload["source"]["key"] == "incoming/my file (1).h5"
    assert payload["source"]["format"] == "hdf5"
    assert payload["plan"]["name"] == "default"
    [run] = cloud[2].items(dataset=outcome.dataset_id, kind="RUN")
    assert run["status"] == "RUNNING"


def test_the_same_event_five_times_and_twice_at_once_starts_one_execution(cloud, tmp_path):
    event = put(cloud[0], "incoming/dup.h5", hdf5_bytes(tmp_path))
    statuses = [ingest(cloud, event)[0].status for _ in range(5)]
    results = []
    threads = [threading.Thread(target=lambda: results.extend(ingest(cloud, event))) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert statuses == ["started"] + ["duplicate"] * 4
    assert [r.status for r in results] == ["duplicate", "duplicate"]
    assert len(executions(cloud)) == 1


def test_a_new_version_of_the_same_key_is_a_new_dataset(cloud, tmp_path):
    first = ingest(cloud, put(cloud[0], "incoming/v.h5", hdf5_bytes(tmp_path, "a.h5")))[0]
    second = ingest(cloud, put(cloud[0], "incoming/v.h5", hdf5_bytes(tmp_path, "b.h5") + b"\0"))[0]
    assert first.status == second.status == "started"
    assert first.dataset_id != second.dataset_id
    assert len(executions(cloud)) == 2


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"", "empty file"),
        (np.random.default_rng(1).bytes(5000), "not"),
        (b"CDF\x01" + bytes(200), "NetCDF-3"),
        (b"hello, world\n" * 30, "text"),
    ],
)
def test_bad_files_are_rejected_with_a_failure_item_naming_the_key(cloud, body, reason):
    event = put(cloud[0], "incoming/bad.h5", body)
    before = ingest_objects(cloud)
    [outcome] = ingest(cloud, event)
    assert outcome.status == "rejected"
    assert "s3://ingest/incoming/bad.h5" in outcome.reason
    assert reason.lower() in outcome.reason.lower()
    [failure] = cloud[2].items(dataset=outcome.dataset_id, kind="FAILURE")
    assert failure["reason"] == outcome.reason
    assert executions(cloud) == []
    assert ingest_objects(cloud) == before  # nothing written, the upload untouched


def test_keys_outside_incoming_are_ignored(cloud, tmp_path):
    [outcome] = ingest(cloud, put(cloud[0], "plans/p.json", b"{}"))
    assert outcome.status == "ignored"
    assert executions(cloud) == []


def test_object_metadata_names_a_plan_stored_under_plans(cloud, tmp_path):
    cloud[0].put_object(Bucket="ingest", Key="plans/quick.json",
                        Body=json.dumps({"repetitions": 1, "platforms": ["local-lambda"]}).encode())
    event = put(cloud[0], "incoming/q.h5", hdf5_bytes(tmp_path), Metadata={"layoutlab-plan": "quick"})
    [outcome] = ingest(cloud, event)
    assert outcome.status == "started"
    payload = json.loads(cloud[1].describe_execution(executionArn=executions(cloud)[0]["executionArn"])["input"])
    assert payload["plan"]["name"] == "quick"
    assert payload["plan"]["repetitions"] == 1
    assert payload["plan"]["variants"]  # the rest comes from the default


@pytest.mark.parametrize("plan_body, reason", [(None, "not found"), (b"{nope", "not valid JSON"),
                                               (json.dumps({"repetitions": 0}).encode(), "repetitions: 0 is less than the minimum of 1")])
def test_a_missing_or_bad_plan_rejects_the_upload(cloud, tmp_path, plan_body, reason):
    if plan_body is not None:
        cloud[0].put_object(Bucket="ingest", Key="plans/broken.json", Body=plan_body)
    event = put(cloud[0], "incoming/p.h5", hdf5_bytes(tmp_path), Metadata={"layoutlab-plan": "broken"})
    [outcome] = ingest(cloud, event)
    assert outcome.status == "rejected" and reason in outcome.reason


def test_every_record_of_one_event_is_ingested(cloud, tmp_path):
    records = [put(cloud[0], f"incoming/m{i}.h5", hdf5_bytes(tmp_path, f"m{i}.h5"))["Records"][0] for i in range(3)]
    outcomes = ingest(cloud, {"Records": records})
    assert [o.status for o in outcomes] == ["started"] * 3
    assert len(executions(cloud)) == 3


# -- ordering: an older version's event arriving late changes nothing ---------------------
def put_in_order(cloud, key, body, sequencer):
    """Upload ``body`` as a new version of ``key``; its event with ``sequencer`` (S3's per-key write order)."""
    s3 = cloud[0]
    response = s3.put_object(Bucket="ingest", Key=key, Body=body)
    return events.s3_notification("ingest", key, version_id=response["VersionId"], etag=response["ETag"].strip('"'),
                                  size=len(body), sequencer=sequencer)


@pytest.mark.parametrize("older, newer", [("0A", "0B"), ("FF", "0100"), ("9", "0A"), ("00000000000000009", "A")])
def test_sequencers_compare_as_hex_numbers_of_equal_length(older, newer):
    from layoutlab.results.store import sequencer_order

    assert sequencer_order(older) < sequencer_order(newer)
    assert sequencer_order(newer.lower()) == sequencer_order(newer)


@pytest.mark.parametrize("bad", ["", "xyz", "0x1F", "1" * 65])
def test_a_value_that_is_not_a_sequencer_is_refused(bad):
    from layoutlab.results.store import sequencer_order

    with pytest.raises(ValueError, match="not an S3 sequencer"):
        sequencer_order(bad)


def test_an_older_version_arriving_after_a_newer_one_starts_nothing(cloud, tmp_path):
    s3, sfn, store, settings = cloud
    # "FF" < "0100" as numbers, though not as strings: the comparison must pad
    old_event = put_in_order(cloud, "incoming/o.h5", hdf5_bytes(tmp_path, "a.h5"), "FF")
    new_event = put_in_order(cloud, "incoming/o.h5", hdf5_bytes(tmp_path, "b.h5") + b"\0", "0100")
    [new] = ingest(cloud, new_event)
    [old] = ingest(cloud, old_event)
    assert new.status == "started"
    assert old.status == "stale" and "older than the current version" in old.reason and "s3://ingest/incoming/o.h5" in old.reason
    assert [e["name"] for e in executions(cloud)] == [new.execution_name]
    assert store.items(dataset=old.dataset_id) == []  # no RUN, no FAILURE: the late event changed nothing
    current = store.current_version("ingest", "incoming/o.h5")
    assert current["dataset"] == new.dataset_id and current["sequencer"] == "0100"
    assert current["version_id"] == new_event["Records"][0]["s3"]["object"]["versionId"]


def test_versions_arriving_in_order_each_start_and_the_last_is_current(cloud, tmp_path):
    s3, sfn, store, settings = cloud
    first = ingest(cloud, put_in_order(cloud, "incoming/n.h5", hdf5_bytes(tmp_path, "a.h5"), "0A"))[0]
    second = ingest(cloud, put_in_order(cloud, "incoming/n.h5", hdf5_bytes(tmp_path, "b.h5") + b"\0", "0B"))[0]
    assert first.status == second.status == "started" and first.dataset_id != second.dataset_id
    assert len(executions(cloud)) == 2
    assert store.current_version("ingest", "incoming/n.h5")["dataset"] == second.dataset_id
    # each version keeps its own RUN item, labelled with its version id
    versions = {store.items(dataset=d, kind="RUN")[0]["source"]["version_id"] for d in (first.dataset_id, second.dataset_id)}
    assert len(versions) == 2


def test_a_retried_event_of_the_current_version_is_a_duplicate_not_stale(cloud, tmp_path):
    event = put_in_order(cloud, "incoming/r.h5", hdf5_bytes(tmp_path), "1F")
    statuses = [ingest(cloud, event)[0].status for _ in range(3)]
    assert statuses == ["started", "duplicate", "duplicate"]
    assert len(executions(cloud)) == 1


def test_an_event_without_a_sequencer_is_processed_unordered(cloud, tmp_path):
    [outcome] = ingest(cloud, put(cloud[0], "incoming/u.h5", hdf5_bytes(tmp_path)))
    assert outcome.status == "started"
    assert cloud[2].current_version("ingest", "incoming/u.h5") is None


# -- issue 36: every upload ends in an item ------------------------------------------------
@pytest.mark.parametrize("depth, reason", [(100_000, "nested too deeply to read"), (200, "nested more than 32 levels deep")])
def test_a_deeply_nested_plan_is_refused_with_a_failure_item(cloud, tmp_path, depth, reason):
    # Before: json.loads raised RecursionError out of ingest; the local cloud retried twice and dropped the
    # event, with no FAILURE item: the upload vanished.
    cloud[0].put_object(Bucket="ingest", Key="plans/deep.json",
                        Body=b'{"variants": ' + b"[" * depth + b"]" * depth + b"}")
    event = put(cloud[0], "incoming/deep.h5", hdf5_bytes(tmp_path), Metadata={"layoutlab-plan": "deep"})
    [outcome] = ingest(cloud, event)
    assert outcome.status == "rejected" and reason in outcome.reason, outcome
    assert "s3://ingest/incoming/deep.h5" in outcome.reason
    [failure] = cloud[2].items(dataset=outcome.dataset_id, kind="FAILURE")
    assert failure["reason"] == outcome.reason
    assert executions(cloud) == []


def test_an_unforeseen_error_in_ingest_ends_in_a_failure_item_naming_the_key(cloud, tmp_path, monkeypatch):
    from layoutlab.pipeline import ingest as ingest_module

    def broken(*args, **kwargs):
        raise RuntimeError("the sniffer broke\nsecond line")

    monkeypatch.setattr(ingest_module, "_check_content", broken)
    event = put(cloud[0], "incoming/u.h5", hdf5_bytes(tmp_path))
    [outcome] = ingest(cloud, event)
    assert outcome.status == "failed"
    assert outcome.reason == "s3://ingest/incoming/u.h5: ingest failed: RuntimeError: the sniffer broke"
    [failure] = cloud[2].items(dataset=outcome.dataset_id, kind="FAILURE")
    assert failure["reason"] == outcome.reason
    assert executions(cloud) == []


def test_a_file_with_a_user_block_larger_than_the_first_read_is_accepted(cloud, tmp_path):
    """Issue 36: HDF5 finds its signature after a user block of any power-of-two size from 512."""
    path = tmp_path / "ub.h5"
    with h5py.File(path, "w", userblock_size=128 * 1024) as f:
        f["v"] = np.arange(10, dtype="f4")
    [outcome] = ingest(cloud, put(cloud[0], "incoming/ub.h5", path.read_bytes()))
    assert outcome.status == "started", outcome
