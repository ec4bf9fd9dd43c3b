"""Events from S3 and EventBridge become object references, every record, keys decoded."""

from __future__ import annotations

import json

import pytest

from layoutlab.pipeline import events, identity
from layoutlab.pipeline.events import ObjectRef

ODD_KEYS = [
    "incoming/plain.h5",
    "incoming/with space/a b.nc",
    "incoming/literal+plus.h5",
    "incoming/ünïcødé/数据.h5",
    "incoming/paren (1) copy.h5",
    "incoming/" + "/".join(["deep"] * 30) + "/x.h5",
    "incoming/" + "k" * 990 + ".h5",
]


@pytest.mark.parametrize("key", ODD_KEYS)
def test_notification_keys_round_trip_through_aws_encoding(key):
    event = events.s3_notification("ingest", key, version_id="v1", etag="abc", size=10)
    encoded = event["Records"][0]["s3"]["object"]["key"]
    assert " " not in encoded  # AWS sends '+' for spaces and %2B for a literal '+'
    [ref] = events.objects_in_event(event)
    assert ref == ObjectRef("ingest", key, version_id="v1", etag="abc", size=10, sequencer=None,
                            event_time="1970-01-01T00:00:00.000Z")


def test_every_record_of_a_multi_record_event_is_returned():
    records = [events.s3_notification("b", f"incoming/f{i}.h5")["Records"][0] for i in range(4)]
    refs = events.objects_in_event({"Records": records})
    assert [r.key for r in refs] == [f"incoming/f{i}.h5" for i in range(4)]


def test_non_create_records_are_dropped():
    event = events.s3_notification("b", "incoming/x.h5")
    event["Records"][0]["eventName"] = "ObjectRemoved:Delete"
    assert events.objects_in_event(event) == []


def test_eventbridge_object_created_keeps_the_key_and_offers_the_decoded_one():
    event = {
        "version": "0", "id": "1", "detail-type": "Object Created", "source": "aws.s3",
        "time": "2026-11-22T00:00:00Z", "region": "us-east-1",
        "detail": {"version": "0", "bucket": {"name": "ingest"},
                   "object": {"key": "incoming/a+b.h5", "size": 5, "etag": "e1",
                              "version-id": "v9", "sequencer": "01"}},
    }
    [ref] = events.objects_in_event(event)
    assert (ref.bucket, ref.key, ref.version_id, ref.etag) == ("ingest", "incoming/a+b.h5", "v9", "e1")
    assert ref.alternate_keys == ("incoming/a b.h5",)


def test_sqs_wrapped_notifications_are_unwrapped_and_test_events_ignored():
    inner = events.s3_notification("b", "incoming/q.h5")
    batch = {"Records": [{"body": json.dumps(inner)}, {"body": json.dumps({"Event": "s3:TestEvent"})}]}
    assert [r.key for r in events.objects_in_event(batch)] == ["incoming/q.h5"]


@pytest.mark.parametrize("bad", [[], {"foo": 1}, {"Records": [{"x": 1}]}])
def test_unrecognised_events_raise(bad):
    with pytest.raises(events.UnrecognisedEvent):
        events.objects_in_event(bad)


@pytest.mark.parametrize(
    "key, expected",
    [("incoming/a.h5", True), ("incoming/", False), ("incoming/dir/", False),
     ("outputs/incoming/a.h5", False), ("plans/p.json", False)],
)
def test_only_uploads_under_incoming_are_processed(key, expected):
    assert events.is_incoming(key) is expected


@pytest.mark.parametrize("key", ODD_KEYS)
def test_execution_names_are_valid_step_functions_names(key):
    name = identity.execution_name(ObjectRef("ingest", key, version_id="v1"))
    assert 1 <= len(name) <= 80
    assert all(c.isascii() and (c.isalnum() or c in "-_") for c in name)


def test_dataset_identity_is_the_object_version():
    a = ObjectRef("b", "incoming/x.h5", version_id="v1")
    assert identity.dataset_id(a) == identity.dataset_id(ObjectRef("b", "incoming/x.h5", version_id="v1", size=3))
    assert identity.dataset_id(a) != identity.dataset_id(ObjectRef("b", "incoming/x.h5", version_id="v2"))
    assert identity.dataset_id(a) != identity.dataset_id(ObjectRef("b", "incoming/y.h5", version_id="v1"))
    unversioned = ObjectRef("b", "incoming/x.h5", etag="e1")
    assert identity.dataset_id(unversioned) != identity.dataset_id(ObjectRef("b", "incoming/x.h5", etag="e2"))
    assert identity.dataset_id(a).startswith("x-h5-")
