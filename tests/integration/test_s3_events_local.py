"""Objects created in the local ingest bucket start the pipeline by themselves, through the route the
CDK app deploys (S3 EventBridge notifications -> the "Object Created under incoming/" rule -> ingest),
whatever the S3 call: PutObject, CopyObject, a multipart upload (boto3's upload_file over its 8 MiB
threshold). Bad input starts nothing or leaves a FAILURE naming the key and the reason.

Nothing here delivers an event by hand: every execution is started by the local cloud itself.
"""

from __future__ import annotations

import json
import time

import boto3
import pytest
from boto3.s3.transfer import TransferConfig

from layoutlab.local import dispatch
from layoutlab.local.load import ONE_CASE_PLAN
from layoutlab.local.pipeline import LocalPipeline
from layoutlab.pipeline import identity
from layoutlab.pipeline.events import ObjectRef
from layoutlab.samples import atl03, geos

pytestmark = pytest.mark.slow

# One case per dataset, grid or granule, so each pipeline takes seconds.
ONE_CASE = {**ONE_CASE_PLAN, "name": dispatch.LOCAL_DEFAULT_PLAN,
            "patterns": {"grid": ["timeseries-point"], "granule": ["granule-open-list"]}}
MULTIPART_THRESHOLD = TransferConfig().multipart_threshold  # boto3's default, 8 MiB


@pytest.fixture
def pipeline(cloud, tmp_path):
    pipe = LocalPipeline(cloud)
    pipe.setup(s3_events=True)
    # what an upload naming no plan runs locally: one case (the documented way to choose it)
    pipe.put_plan(dispatch.LOCAL_DEFAULT_PLAN, ONE_CASE)
    pipe.grid = geos.write_geos(tmp_path / "tiny.nc", shape=(4, 5, 6))
    return pipe


def dataset_of(pipe, key: str, version_id: str) -> str:
    return identity.dataset_id(ObjectRef(bucket=dispatch.INGEST_BUCKET, key=key, version_id=version_id))


def items_when(pipe, dataset_id: str, done, timeout: float = 300) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = pipe.store.items(dataset=dataset_id)
        if done(items):
            return items
        time.sleep(0.3)
    raise AssertionError(f"{dataset_id}: nothing after {timeout:.0f} s: {pipe.store.items(dataset=dataset_id)}")


def started(items) -> bool:
    return any(i["kind"] == "RUN" for i in items)


def executions(pipe) -> list[dict]:
    return pipe.executions()


def test_put_copy_and_multipart_upload_each_start_one_execution_that_succeeds(pipeline, tmp_path):
    s3 = pipeline.s3
    put = s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/put.nc", Body=pipeline.grid.read_bytes())
    copy = s3.copy_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/copy.nc",
                          CopySource={"Bucket": dispatch.INGEST_BUCKET, "Key": "incoming/put.nc"})
    granule = atl03.write_atl03(tmp_path / "big.h5", photons=60_000)
    assert granule.stat().st_size > MULTIPART_THRESHOLD
    s3.upload_file(str(granule), dispatch.INGEST_BUCKET, "incoming/big.h5")  # boto3 goes multipart past 8 MiB
    multipart = s3.head_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/big.h5")
    assert multipart["ETag"].strip('"').endswith("-2")  # two parts: a completed multipart upload

    created = {"incoming/put.nc": put["VersionId"], "incoming/copy.nc": copy["VersionId"],
               "incoming/big.h5": multipart["VersionId"]}
    datasets = {dataset_of(pipeline, key, version): key for key, version in created.items()}
    for dataset_id in datasets:
        items_when(pipeline, dataset_id, started)
    outcomes = [{"dataset_id": d, "execution_name": d} for d in datasets]
    assert pipeline.wait(outcomes, timeout=600) == {d: "SUCCEEDED" for d in datasets}
    assert sorted(e["name"] for e in executions(pipeline)) == sorted(datasets)  # one execution per object
    for dataset_id in datasets:
        kinds = [i["kind"] for i in pipeline.store.items(dataset=dataset_id)]
        assert kinds.count("RESULT") == 1 and kinds.count("SUMMARY") == 1, kinds


def test_the_events_are_those_aws_sends_one_per_object_version(pipeline, tmp_path):
    """A second rule sends every S3 event of the bucket to a queue (a moto target): a multipart upload
    gives one event (CompleteMultipartUpload, not an extra Put), each names its call as AWS does, and
    the sequencers of one key's versions grow (ingest orders versions by them)."""
    sqs = boto3.client("sqs", endpoint_url=pipeline.cloud.moto_endpoint, region_name=dispatch.REGION)
    queue_url = sqs.create_queue(QueueName="all-s3-events")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    pipeline.events.put_rule(Name="all-s3-events", EventPattern=json.dumps({"source": ["aws.s3"]}))
    pipeline.events.put_targets(Rule="all-s3-events", Targets=[{"Id": "queue", "Arn": queue_arn}])

    s3 = pipeline.s3
    body = pipeline.grid.read_bytes()
    s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/a.nc", Body=body)
    s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/a.nc", Body=body)  # same bytes: a new version
    s3.copy_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/b.nc",
                   CopySource={"Bucket": dispatch.INGEST_BUCKET, "Key": "incoming/a.nc"})
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * (MULTIPART_THRESHOLD + 1))
    s3.upload_file(str(big), dispatch.INGEST_BUCKET, "incoming/big.bin")
    s3.delete_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/b.nc")

    s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/last.nc", Body=body)

    received = []
    deadline = time.monotonic() + 30
    while not any(e["detail"]["object"]["key"] == "incoming/last.nc" for e in received) and time.monotonic() < deadline:
        for message in sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", []):
            received.append(json.loads(message["Body"]))
    seen = [(e["detail-type"], e["detail"]["object"]["key"], e["detail"]["reason"]) for e in received
            if e["detail-type"] != "Object Deleted"]  # (moto sends none for a delete marker; AWS does)
    assert seen == [("Object Created", "incoming/a.nc", "PutObject"),
                    ("Object Created", "incoming/a.nc", "PutObject"),
                    ("Object Created", "incoming/b.nc", "CopyObject"),
                    ("Object Created", "incoming/big.bin", "CompleteMultipartUpload"),
                    ("Object Created", "incoming/last.nc", "PutObject")]
    first, second = received[0]["detail"]["object"], received[1]["detail"]["object"]
    assert first["version-id"] != second["version-id"] and second["sequencer"] > first["sequencer"]


def test_bad_input_starts_nothing_or_leaves_a_failure_naming_the_key_and_reason(pipeline):
    s3 = pipeline.s3
    body = pipeline.grid.read_bytes()
    elsewhere = s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key="elsewhere/x.nc", Body=body)
    empty = s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/empty.h5", Body=b"")
    text = s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/notes.h5", Body=b"not an HDF5 file\n" * 100)
    first = s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/same.nc", Body=body)
    s3.delete_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/same.nc")  # a delete marker: starts nothing
    again = s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/same.nc", Body=body)  # same bytes, new version

    for key, response in (("incoming/empty.h5", empty), ("incoming/notes.h5", text)):
        items = items_when(pipeline, dataset_of(pipeline, key, response["VersionId"]),
                           lambda items: any(i["kind"] == "FAILURE" for i in items))
        [failure] = [i for i in items if i["kind"] == "FAILURE"]
        assert failure["stage"] == "ingest" and key in failure["reason"], failure
        assert ("empty" in failure["reason"] or "0 bytes" in failure["reason"]) if key.endswith("empty.h5") \
            else "HDF5" in failure["reason"], failure["reason"]
    same = [dataset_of(pipeline, "incoming/same.nc", r["VersionId"]) for r in (first, again)]
    for dataset_id in same:  # delivered in order: by now every earlier event has been handled
        items_when(pipeline, dataset_id, started)
    assert sorted(e["name"] for e in executions(pipeline)) == sorted(same)  # the other prefix and the delete: none
    assert pipeline.store.items(dataset=dataset_of(pipeline, "elsewhere/x.nc", elsewhere["VersionId"])) == []
    assert set(pipeline.wait([{"dataset_id": d, "execution_name": d} for d in same], timeout=600).values()) == {"SUCCEEDED"}


def test_a_redelivered_event_starts_no_second_execution(pipeline):
    response = pipeline.s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/once.nc",
                                      Body=pipeline.grid.read_bytes())
    dataset_id = dataset_of(pipeline, "incoming/once.nc", response["VersionId"])
    items_when(pipeline, dataset_id, started)
    head = pipeline.s3.head_object(Bucket=dispatch.INGEST_BUCKET, Key="incoming/once.nc")
    from layoutlab.pipeline.events import eventbridge_object_created

    # what an EventBridge retry would bring: the same object version again
    again = eventbridge_object_created(dispatch.INGEST_BUCKET, "incoming/once.nc", version_id=response["VersionId"],
                                       etag=head["ETag"].strip('"'), size=head["ContentLength"],
                                       sequencer="0" * 20, time="2026-01-01T00:00:00Z")
    assert [o["status"] for o in pipeline.deliver(again)] in (["duplicate"], ["stale"])
    assert [e["name"] for e in executions(pipeline)] == [dataset_id]
    pipeline.wait([{"dataset_id": dataset_id, "execution_name": dataset_id}], timeout=600)
