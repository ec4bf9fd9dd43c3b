"""Turn S3 notifications and EventBridge "Object Created" events into object references.

Both shapes AWS sends are handled, every record of them (never only
``Records[0]``). Keys in S3 notifications are URL-encoded with ``+`` for spaces
(AWS documents "red flower.jpg" -> "red+flower.jpg"), so they are decoded with
``unquote_plus``. EventBridge puts the key in ``detail.object.key``; AWS
documents no encoding for it, so it is kept as sent and flagged, and the
ingest step falls back to the decoded form only if the raw key does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote_plus

INCOMING_PREFIX = "incoming/"
# The ingest queue's event source (the CDK app's, and the local cloud's layoutlab.local.sqs_source): batches of
# up to 10 records gathered for up to 5 s, at most 5 ingest invocations at once — a burst of uploads waits in
# the queue instead of starting as many functions.
INGEST_BATCH_SIZE = 10
INGEST_BATCH_WINDOW_SECONDS = 5
INGEST_MAX_CONCURRENCY = 5


@dataclass(frozen=True)
class ObjectRef:
    """One uploaded object version, as an event names it."""

    bucket: str
    key: str
    version_id: str | None = None
    etag: str | None = None
    size: int | None = None
    sequencer: str | None = None
    event_time: str | None = None
    # Other spellings of the key to try if ``key`` does not exist (see module docstring).
    alternate_keys: tuple[str, ...] = field(default=(), compare=False)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def to_dict(self) -> dict:
        return {
            "bucket": self.bucket,
            "key": self.key,
            "version_id": self.version_id,
            "etag": self.etag,
            "size": self.size,
            "sequencer": self.sequencer,
            "event_time": self.event_time,
        }


class UnrecognisedEvent(ValueError):
    """The event is neither an S3 notification nor an EventBridge S3 event."""


def _clean_etag(etag: str | None) -> str | None:
    return etag.strip('"') if etag else None


def _from_notification_record(record: dict) -> ObjectRef | None:
    if not str(record.get("eventName", "")).startswith("ObjectCreated"):
        return None
    s3 = record["s3"]
    obj = s3["object"]
    return ObjectRef(
        bucket=s3["bucket"]["name"],
        key=unquote_plus(obj["key"]),
        version_id=obj.get("versionId") or None,
        etag=_clean_etag(obj.get("eTag") or obj.get("etag")),
        size=obj.get("size"),
        sequencer=obj.get("sequencer"),
        event_time=record.get("eventTime"),
    )


def _from_eventbridge(event: dict) -> ObjectRef | None:
    if event.get("source") != "aws.s3" or event.get("detail-type") != "Object Created":
        return None
    detail = event["detail"]
    obj = detail["object"]
    raw_key = obj["key"]
    decoded = unquote_plus(raw_key)
    return ObjectRef(
        bucket=detail["bucket"]["name"],
        key=raw_key,
        version_id=obj.get("version-id") or None,
        etag=_clean_etag(obj.get("etag")),
        size=obj.get("size"),
        sequencer=obj.get("sequencer"),
        event_time=event.get("time"),
        alternate_keys=(decoded,) if decoded != raw_key else (),
    )


def objects_in_event(event: dict) -> list[ObjectRef]:
    """Every created object the event names, in order; other S3 events are dropped.

    Also accepts an SQS-style batch whose bodies are these events (``Records``
    with a JSON ``body``), so a queue in front of ingest needs no other code.
    """
    import json

    if not isinstance(event, dict):
        raise UnrecognisedEvent(f"expected a JSON object, got {type(event).__name__}")
    if "Records" in event:
        refs: list[ObjectRef] = []
        for record in event["Records"] or []:
            if "s3" in record:
                ref = _from_notification_record(record)
                if ref:
                    refs.append(ref)
            elif "body" in record:
                body = json.loads(record["body"])
                if body.get("Event") == "s3:TestEvent":
                    continue
                refs.extend(objects_in_event(body))
            else:
                raise UnrecognisedEvent("a record has neither 's3' nor 'body'")
        return refs
    if "detail-type" in event:
        ref = _from_eventbridge(event)
        return [ref] if ref else []
    if event.get("Event") == "s3:TestEvent":
        return []
    raise UnrecognisedEvent("neither an S3 notification ('Records') nor an EventBridge event ('detail-type')")


def object_created_pattern(bucket: str, prefix: str = INCOMING_PREFIX) -> dict:
    """The EventBridge rule's pattern that starts ingest: "Object Created" in ``bucket`` under ``prefix``.

    One pattern for the CDK app's rule (cdk/layoutlab_cdk/pipeline_stack.py) and the local cloud's
    (layoutlab.local.pipeline), so both route the same events to ingest."""
    return {
        "source": ["aws.s3"],
        "detail-type": ["Object Created"],
        "detail": {"bucket": {"name": [bucket]}, "object": {"key": [{"prefix": prefix}]}},
    }


def is_incoming(key: str, prefix: str = INCOMING_PREFIX) -> bool:
    """True when ``key`` is an upload to process: under the prefix and not a folder marker."""
    return key.startswith(prefix) and not key.endswith("/") and len(key) > len(prefix)


def s3_notification(bucket: str, key: str, *, version_id=None, etag=None, size=0, sequencer=None,
                    event_time="1970-01-01T00:00:00.000Z", region="us-east-1") -> dict:
    """The notification AWS would send for one PUT (key URL-encoded as AWS does).

    The local run uses it, because moto does not deliver S3 notifications to code.
    """
    from urllib.parse import quote_plus

    obj = {"key": quote_plus(key, safe="/"), "size": size, "eTag": etag or ""}
    if sequencer:
        obj["sequencer"] = sequencer
    if version_id:
        obj["versionId"] = version_id
    return {
        "Records": [
            {
                "eventVersion": "2.1",
                "eventSource": "aws:s3",
                "awsRegion": region,
                "eventTime": event_time,
                "eventName": "ObjectCreated:Put",
                "s3": {
                    "s3SchemaVersion": "1.0",
                    "configurationId": "layoutlab-ingest",
                    "bucket": {"name": bucket, "arn": f"arn:aws:s3:::{bucket}"},
                    "object": obj,
                },
            }
        ]
    }


def eventbridge_object_created(bucket: str, key: str, *, version_id=None, etag=None, size=0, sequencer=None,
                               time="1970-01-01T00:00:00Z", region="us-east-1", account="123456789012") -> dict:
    """The EventBridge "Object Created" event AWS sends for one PUT (what the deployed rule delivers)."""
    import uuid

    obj = {"key": key, "size": size, "etag": etag or ""}
    if sequencer:
        obj["sequencer"] = sequencer
    if version_id:
        obj["version-id"] = version_id
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": account,
        "time": time,
        "region": region,
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {"version": "0", "bucket": {"name": bucket}, "object": obj,
                   "request-id": uuid.uuid4().hex[:16].upper(), "requester": account, "reason": "PutObject"},
    }
