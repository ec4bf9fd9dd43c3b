"""S3 → EventBridge → Lambda in the local cloud, as the CDK app deploys it in AWS.

The CDK app turns on the ingest bucket's EventBridge notifications and deploys one rule,
"Object Created under incoming/" (``layoutlab.pipeline.events.object_created_pattern``), whose
target is the ingest function. moto 5.2.5 already has the first half: a bucket with an
``EventBridgeConfiguration`` sends an event to every rule of the region's event buses when an
object is created (PutObject, CopyObject, CompleteMultipartUpload, POST) or removed, and each rule
matches it against its own pattern. Two things are missing, and this module adds them in the
local cloud's server process (``cloud.serve``), where moto runs:

- the event moto builds is not the one AWS sends: a constant ``sequencer`` (ingest orders the
  versions of a key by it, so every new version would look like the same one), the event name
  where AWS gives the API call as ``reason`` (``PutObject``, ``CopyObject``,
  ``CompleteMultipartUpload``), epoch seconds where AWS gives an ISO time, and a constant
  ``id``. ``aws_event`` builds AWS's shape (documented in the S3 user guide, "EventBridge
  message structure") from the same bucket and key objects.
- a completed multipart upload sends two events: moto's ``complete_multipart_upload`` stores the
  object with its ``put_object``, which notifies ``ObjectCreated:Put``, then notifies
  ``ObjectCreated:CompleteMultipartUpload``. AWS sends only the second; the first is dropped here.
  Likewise moto's PutObject, CopyObject and CompleteMultipartUpload set the object's tags (none, most
  often) through the call that notifies "Object Tags Added"; AWS sends that event for PutObjectTagging
  only, so it is dropped unless that is the request.
- a rule cannot deliver to a Lambda target (moto's rules deliver to log groups, queues, buses
  and archives only). Here a Lambda target's events go to a queue that one thread drains,
  invoking the function through the local dispatcher, after the S3 request has been answered:
  asynchronously, as EventBridge invokes Lambda. A failed invocation is retried twice, as
  Lambda retries an asynchronous invocation (ingest is idempotent per object version, so a
  retry never starts a second execution); one still failing is logged, where AWS would put it
  in the rule's dead-letter queue.

Pinned to moto 5.2.5 like ``moto_patch``: ``install`` refuses other versions.
"""

from __future__ import annotations

import calendar
import copy
import itertools
import logging
import queue
import threading
import time
import uuid
from typing import Callable

LOG = logging.getLogger(__name__)

MOTO_VERSION = "5.2.5"
# Lambda's asynchronous invocation: the first attempt and two retries.
ATTEMPTS = 3
RETRY_DELAY_S = 1.0
# AWS's reason per S3 event name (s3:ObjectCreated:<name>).
REASONS = {"Put": "PutObject", "Post": "POST Object", "Copy": "CopyObject",
           "CompleteMultipartUpload": "CompleteMultipartUpload", "Delete": "DeleteObject",
           "DeleteMarkerCreated": "DeleteObject"}

# (function ARN, event) -> anything; raises on a failed invocation.
LambdaInvoke = Callable[[str, dict], object]

_sequence = itertools.count()


def sequencer() -> str:
    """A hex string that grows with every event, as S3's ``sequencer`` does for the events of one key."""
    return f"{time.time_ns():016X}{next(_sequence) % 0x10000:04X}"


def aws_event(account_id: str, bucket, key, event_name: str) -> dict:
    """The EventBridge event AWS sends for ``event_name`` (``s3:ObjectCreated:Put``...) on moto's key."""
    from moto.s3.notifications import _detail_type

    kind, _, call = event_name.removeprefix("s3:").partition(":")
    obj = {"key": key.name, "version-id": key.version_id, "sequencer": sequencer()}
    if kind == "ObjectCreated":
        obj = {"key": key.name, "size": key.size, "etag": key.etag.replace('"', ""), **obj}
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": _detail_type(event_name),
        "source": "aws.s3",
        "account": account_id,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "region": bucket.region_name,
        "resources": [bucket.arn],
        "detail": {
            "version": "0",
            "bucket": {"name": bucket.name},
            "object": obj,
            "request-id": uuid.uuid4().hex[:16].upper(),
            "requester": account_id,
            "source-ip-address": "127.0.0.1",
            "reason": REASONS.get(call, call),
        },
    }


class LambdaTargets:
    """Invokes the Lambda targets of matched events, one at a time, off the S3 request's thread."""

    def __init__(self, invoke: LambdaInvoke, retry_delay_s: float = RETRY_DELAY_S):
        self._invoke = invoke
        self._retry_delay_s = retry_delay_s
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._drain, name="eventbridge-lambda-targets", daemon=True)
        self._thread.start()

    def submit(self, function_arn: str, event: dict) -> None:
        self._queue.put((function_arn, event))

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            function_arn, event = item
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    self._invoke(function_arn, event)
                    break
                except Exception as error:  # the function failed: retried, then reported as AWS reports it
                    if attempt == ATTEMPTS:
                        LOG.error("EventBridge target %s failed %d times on event %s (%s): %s; dropped "
                                  "(AWS would send it to the rule's dead-letter queue)", function_arn, ATTEMPTS,
                                  event.get("id"), event["detail"]["object"].get("key"), error)
                    else:
                        LOG.warning("EventBridge target %s failed (attempt %d of %d): %s", function_arn, attempt,
                                    ATTEMPTS, error)
                        time.sleep(self._retry_delay_s * attempt)

    def pending(self) -> int:
        return self._queue.unfinished_tasks

    def stop(self, timeout: float = 5) -> None:
        self._queue.put(None)
        self._thread.join(timeout)


_targets: LambdaTargets | None = None
_installed = False
_completing = threading.local()  # set while moto completes a multipart upload in this thread
_tagging = threading.local()  # set while moto answers a PutObjectTagging request in this thread


def install(invoke: LambdaInvoke) -> LambdaTargets:
    """In this process (the moto server's): S3's EventBridge events in AWS's shape, and rules that deliver
    to Lambda targets through ``invoke``. Returns the delivery queue (``stop()`` it when the server stops)."""
    global _targets, _installed
    import moto

    if moto.__version__ != MOTO_VERSION:
        raise RuntimeError(f"layoutlab's S3 event delivery is written for moto {MOTO_VERSION}, found "
                           f"{moto.__version__}; install the locked version (make venv)")
    _targets = LambdaTargets(invoke)
    if _installed:
        return _targets
    from moto.events import models as events_models
    from moto.s3 import notifications
    from moto.s3.models import S3Backend
    from moto.s3.responses import S3Response
    from moto.utilities.arns import parse_arn

    stock_send_event = notifications.send_event
    stock_complete = S3Backend.complete_multipart_upload

    stock_tagging_request = S3Response.put_object_tagging
    events = notifications.S3NotificationEvent

    def send_event(account_id, event_name, bucket, key) -> None:
        if getattr(_completing, "active", False) and event_name == events.OBJECT_CREATED_PUT_EVENT:
            return  # the object a multipart upload completes: its one event is CompleteMultipartUpload
        if event_name == events.OBJECT_TAGGING_PUT_EVENT and not getattr(_tagging, "active", False):
            return  # tags set along with the object's creation: AWS notifies the creation only
        stock_send_event(account_id, event_name, bucket, key)

    def tagging_request(self, *args, **kwargs):
        _tagging.active = True
        try:
            return stock_tagging_request(self, *args, **kwargs)
        finally:
            _tagging.active = False

    def complete_multipart_upload(self, *args, **kwargs):
        _completing.active = True
        try:
            return stock_complete(self, *args, **kwargs)
        finally:
            _completing.active = False

    def send_to_event_bridge(account_id: str, bucket, event_name: str, key) -> None:
        # moto's own catches everything too: a notification never fails the S3 request that caused it
        try:
            event = aws_event(account_id, bucket, key, event_name)
            backend = events_models.events_backends[account_id][bucket.region_name]
            for bus in list(backend.event_buses.values()):
                for rule in list(bus.rules.values()):
                    rule.send_to_targets(event, transform_input=False)
        except Exception:
            LOG.exception("could not send the EventBridge event of %s on s3://%s/%s", event_name, bucket.name,
                          key.name)

    stock_send_to_targets = events_models.Rule.send_to_targets

    def send_to_targets(self, original_event, transform_input: bool = True) -> None:
        functions = [t for t in self.targets if parse_arn(t["Arn"]).service == "lambda"]
        if len(functions) < len(self.targets):  # moto's own targets (it refuses Lambda ones) ...
            others = copy.copy(self)
            others.targets = [t for t in self.targets if t not in functions]
            # ... which expect moto's epoch-seconds time (they format it themselves)
            epoch = calendar.timegm(time.strptime(original_event["time"], "%Y-%m-%dT%H:%M:%SZ"))
            stock_send_to_targets(others, {**original_event, "time": epoch}, transform_input)
        if not functions or self.state != "ENABLED" or not self.event_pattern.matches_event(original_event):
            return
        for target in functions:
            if _targets is not None:
                _targets.submit(target["Arn"], copy.deepcopy(original_event))

    notifications._send_event_bridge_message = send_to_event_bridge
    notifications.send_event = send_event
    S3Backend.complete_multipart_upload = complete_multipart_upload
    S3Response.put_object_tagging = tagging_request
    events_models.Rule.send_to_targets = send_to_targets
    _installed = True
    return _targets
