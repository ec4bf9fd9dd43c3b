"""Ingest: from an S3 event to exactly one pipeline execution per object version.

For each object the event names (every record): skip what is not under
``incoming/``; find the object (the version the event names); refuse what
cannot be processed (empty, too big, not HDF5 / NetCDF-4, a plan that does not
validate) with a FAILURE item that names the key and the reason; otherwise
start the pipeline with an execution name derived from the object version, so
a duplicate or retried event starts nothing new. Nothing is ever written to
the ingest bucket.

Events can arrive out of order: S3 and EventBridge promise neither order nor
single delivery. Each event carries the object's ``sequencer``, which grows
with every write to a key, so before anything starts, ingest records the
version as the key's current one with a conditional write (see
``ResultsStore.claim_current_version``). An event for a version older than the
current one is "stale": it starts nothing, writes nothing, and the newer
version stays current. Each version's results stay under its own dataset id,
whose RUN item names the version.
"""

from __future__ import annotations

import json
import logging
import posixpath
from dataclasses import asdict, dataclass, field
from typing import Callable

from layoutlab.ceilings import Ceilings
from layoutlab.errors import UserError
from layoutlab.pipeline import identity
from layoutlab.pipeline.events import ObjectRef, is_incoming, objects_in_event
from layoutlab.pipeline.plan import PLAN_METADATA_KEY, PLANS_PREFIX, PlanError, json_type, merge_plan
from layoutlab.storage import VERSION_QUERY

LOG = logging.getLogger(__name__)

ACCEPTED_FORMATS = ("hdf5", "netcdf4")
DEFAULT_MAX_BYTES = 50 * 2**30


@dataclass
class IngestSettings:
    state_machine_arn: str
    outputs_bucket: str
    max_bytes: int = DEFAULT_MAX_BYTES
    ceilings: Ceilings = field(default_factory=Ceilings)
    default_plan: str = ""  # plans/<name>.json in the ingest bucket for uploads naming no plan; "": the packaged one


@dataclass
class IngestOutcome:
    key: str
    status: str  # started | duplicate | stale | rejected | failed (an error we did not foresee) | ignored
    dataset_id: str | None = None
    execution_name: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


class Rejected(UserError):
    """The object cannot be processed; the message says why (the key is added by the caller)."""


def unreadable_key_reason(key: str) -> str | None:
    """Why the readers cannot address ``key`` as it is, or None.

    A ``.`` or ``..`` segment is resolved away by the readers' HTTP clients (RFC 3986 dot segments:
    ``incoming/../escape.nc`` is requested as ``escape.nc``), so every case would read another
    object. s3fs, through which the HDF5 readers and the inspection open an object, takes the first
    ``?versionId=`` in a path as the start of a version id, so it cannot name a key that holds one.
    """
    if any(segment in (".", "..") for segment in key.split("/")):
        dots = next(segment for segment in key.split("/") if segment in (".", ".."))
        return (f"the key has a {dots!r} segment, which the readers' HTTP clients resolve away (they would read "
                f"s3://.../{posixpath.normpath(key)} or another object, not this one): rename the object")
    if VERSION_QUERY in key:
        return (f"the key holds {VERSION_QUERY!r}, which s3fs (the HDF5 readers' S3 client) reads as the start of a "
                f"version id, so no reader could open this object: rename it")
    return None


def _head(s3, ref: ObjectRef) -> tuple[ObjectRef, dict]:
    from botocore.exceptions import ClientError

    for key in (ref.key, *ref.alternate_keys):
        kwargs = {"Bucket": ref.bucket, "Key": key}
        if ref.version_id:
            kwargs["VersionId"] = ref.version_id
        try:
            head = s3.head_object(**kwargs)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound", "NoSuchVersion", "400"):
                continue
            raise
        found = ObjectRef(
            bucket=ref.bucket, key=key, version_id=ref.version_id or head.get("VersionId"),
            etag=ref.etag or head.get("ETag", "").strip('"') or None,
            size=head.get("ContentLength", ref.size), sequencer=ref.sequencer, event_time=ref.event_time,
        )
        return found, head
    raise Rejected("object not found (deleted, or the event names a version that no longer exists)")


def _check_content(s3, ref: ObjectRef, max_bytes: int) -> str:
    from layoutlab.formats.sniff import HEAD_BYTES, describe_not_hdf5, head_after_user_block, sniff_bytes

    if not ref.size:
        raise Rejected("empty file (0 bytes)")
    if ref.size > max_bytes:
        raise Rejected(f"{ref.size} bytes is over the configured limit of {max_bytes} bytes")
    kwargs = {"Bucket": ref.bucket, "Key": ref.key, "Range": f"bytes=0-{HEAD_BYTES - 1}"}
    if ref.version_id:
        kwargs["VersionId"] = ref.version_id
    head = s3.get_object(**kwargs)["Body"].read()
    kind = sniff_bytes(head)
    if kind == "unknown":  # (a user block larger than HEAD_BYTES: HDF5 finds the signature further on)
        def read_at(offset, count):
            return s3.get_object(**{**kwargs, "Range": f"bytes={offset}-{offset + count - 1}"})["Body"].read()

        beyond = head_after_user_block(read_at, ref.size)
        kind = sniff_bytes(beyond) if beyond is not None else kind
    if kind not in ACCEPTED_FORMATS:
        raise Rejected(describe_not_hdf5(head, ref.size))
    return kind


def _plan_for(s3, ref: ObjectRef, metadata: dict, ceilings: Ceilings, default_name: str = "") -> dict:
    name = (metadata or {}).get(PLAN_METADATA_KEY) or default_name
    if not name:
        try:
            return merge_plan(None, ceilings=ceilings, input_bytes=ref.size)
        except PlanError as error:  # the default plan over this environment's ceilings, or for this input
            raise Rejected(str(error)) from None
    if "/" in name or name.startswith("."):
        raise Rejected(f"plan name {name!r} in metadata '{PLAN_METADATA_KEY}' must be a plain name")
    plan_key = f"{PLANS_PREFIX}{name}.json"
    from botocore.exceptions import ClientError

    try:
        body = s3.get_object(Bucket=ref.bucket, Key=plan_key)["Body"].read()
    except ClientError:
        raise Rejected(f"plan {name!r} not found at s3://{ref.bucket}/{plan_key}") from None
    try:
        override = json.loads(body)
    except ValueError as error:
        raise Rejected(f"plan s3://{ref.bucket}/{plan_key} is not valid JSON: {error}") from None
    except RecursionError:  # (a plan is a few levels deep; 100,000 nested arrays ended the ingest function)
        raise Rejected(f"plan s3://{ref.bucket}/{plan_key} is nested too deeply to read (more than "
                       f"{MAX_PLAN_DEPTH} levels of arrays and objects; a plan has a few)") from None
    depth = _depth(override)
    if depth > MAX_PLAN_DEPTH:
        raise Rejected(f"plan s3://{ref.bucket}/{plan_key} is nested more than {MAX_PLAN_DEPTH} levels deep "
                       "(arrays and objects; a plan has a few)")
    if not isinstance(override, dict):  # null, a list, a number: refused like any bad field, never a crash
        raise Rejected(f"plan {name!r} (s3://{ref.bucket}/{plan_key}): a plan must be a JSON object of the fields "
                       f"in docs/pipeline-and-plans.md, got {json_type(override)}")
    override.setdefault("name", name)
    try:
        return merge_plan(override, ceilings=ceilings, input_bytes=ref.size)
    except PlanError as error:
        raise Rejected(str(error)) from None


MAX_PLAN_DEPTH = 32  # the deepest field of a plan (plan.schema.json) is a few levels down


def _depth(value) -> int:
    """How deep arrays and objects nest in a parsed JSON value, without recursion."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level <= MAX_PLAN_DEPTH:  # (deeper is refused whatever lies below)
                pending.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _claim_current_version(store, ref: ObjectRef, dataset_id: str) -> dict | None:
    """None when ``ref`` is (now) the key's current version; else the newer current version."""
    if not ref.sequencer:
        # AWS always sends one; without it the order is unknown, so the version is processed.
        LOG.warning("%s: event carries no sequencer; processed without the ordering check", ref.url)
        return None
    try:
        return store.claim_current_version(ref.bucket, ref.key, ref.sequencer, dataset_id,
                                           version_id=ref.version_id, etag=ref.etag, event_time=ref.event_time)
    except ValueError as error:
        LOG.warning("%s: %s; processed without the ordering check", ref.url, error)
        return None


def execution_input(ref: ObjectRef, dataset_id: str, source_format: str, plan: dict, settings: IngestSettings) -> dict:
    """The pipeline's execution input (see stepfunctions/README.md)."""
    return {
        "dataset_id": dataset_id,
        "source": {**ref.to_dict(), "url": ref.url, "format": source_format},
        "outputs_bucket": settings.outputs_bucket,
        "outputs_prefix": f"datasets/{dataset_id}/",
        "plan": plan,
    }


# (store, key, object metadata, plan, dataset id) -> the name the execution's slot is held under, or None; raises
# to start nothing (products.concurrency.take_upload_slot: a product's bound of executions at once)
SlotTaker = Callable[[object, str, dict, dict, str], "str | None"]


def ingest_object(ref: ObjectRef, *, s3, sfn, store, settings: IngestSettings,
                  take_slot: SlotTaker | None = None) -> IngestOutcome:
    if not is_incoming(ref.key):
        return IngestOutcome(key=ref.key, status="ignored", reason="not under incoming/")
    dataset_id = identity.dataset_id(ref)
    try:
        unreadable = unreadable_key_reason(ref.key)
        if unreadable:
            raise Rejected(unreadable)
        ref, head = _head(s3, ref)
        dataset_id = identity.dataset_id(ref)
        newer = _claim_current_version(store, ref, dataset_id)
        if newer is not None:
            reason = (f"{ref.url}: version {ref.version_id or ref.etag} (sequencer {ref.sequencer}) is older than the "
                      f"current version {newer.get('version_id') or newer.get('etag')} (sequencer "
                      f"{newer.get('sequencer')}, dataset {newer.get('dataset')}); nothing started")
            LOG.info("stale event: %s", reason)
            return IngestOutcome(key=ref.key, status="stale", dataset_id=dataset_id, reason=reason)
        source_format = _check_content(s3, ref, settings.max_bytes)
        plan = _plan_for(s3, ref, head.get("Metadata", {}), settings.ceilings, settings.default_plan)
    except Rejected as rejection:
        reason = f"{ref.url}: {rejection}"
        store.put_failure(dataset_id, "ingest", "validate", reason, source=ref.to_dict())
        LOG.warning("rejected %s", reason)
        return IngestOutcome(key=ref.key, status="rejected", dataset_id=dataset_id, reason=reason)
    except Exception as error:  # noqa: BLE001 (every upload ends in an item: issue 36)
        # Not a refusal we foresaw: the upload still ends in a FAILURE item naming its key and the true
        # reason, instead of the event being retried twice and dropped with only a log line (a RecursionError
        # did that). An AWS API error (botocore's own retries spent) is raised instead: the platform retries
        # the event, and a later delivery may succeed. The traceback is logged.
        from botocore.exceptions import BotoCoreError, ClientError

        if isinstance(error, (BotoCoreError, ClientError)):
            raise
        text = str(error).strip().splitlines()
        reason = f"{ref.url}: ingest failed: {type(error).__name__}: {text[0] if text else 'no detail'}"
        LOG.exception("ingest failed: %s", reason)
        store.put_failure(dataset_id, "ingest", "error", reason, source=ref.to_dict())
        return IngestOutcome(key=ref.key, status="failed", dataset_id=dataset_id, reason=reason)

    # A product's executions are bounded (plan field products.max_concurrent_executions): over the bound
    # take_slot raises (ProductBusy), nothing starts, and the queue delivers the upload again later.
    product = take_slot(store, ref.key, head.get("Metadata", {}), plan, dataset_id) if take_slot else None
    name = identity.execution_name(ref)
    payload = execution_input(ref, dataset_id, source_format, plan, settings)
    try:
        response = sfn.start_execution(stateMachineArn=settings.state_machine_arn, name=name,
                                       input=json.dumps(payload))
    except sfn.exceptions.ExecutionAlreadyExists:
        return IngestOutcome(key=ref.key, status="duplicate", dataset_id=dataset_id, execution_name=name)
    # StartExecution is idempotent for a running execution with the same name and
    # input (it answers as if it had started it), so the RUN item decides.
    first = store.create_run(dataset_id, status="RUNNING", source=payload["source"], plan_name=plan.get("name"),
                             execution_arn=response["executionArn"], started=response["startDate"].isoformat(),
                             execution_product=product)
    if not first:
        return IngestOutcome(key=ref.key, status="duplicate", dataset_id=dataset_id, execution_name=name)
    return IngestOutcome(key=ref.key, status="started", dataset_id=dataset_id, execution_name=name)


def ingest_event(event: dict, *, s3, sfn, store, settings: IngestSettings,
                 take_slot: SlotTaker | None = None) -> list[IngestOutcome]:
    """Ingest every object of an S3 / EventBridge / SQS event; one outcome per object."""
    return [ingest_object(ref, s3=s3, sfn=sfn, store=store, settings=settings, take_slot=take_slot)
            for ref in objects_in_event(event)]
