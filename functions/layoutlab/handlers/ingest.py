"""Lambda: S3 notification / EventBridge "Object Created" -> one pipeline execution per object version.

Deployed behind a queue (S3 -> EventBridge rule -> SQS -> this function, batches): an SQS batch is answered with
``batchItemFailures`` naming the records that started nothing yet — a product over its bound of executions at
once, or its study full and undecided (``ProductBusy``: the record comes back after the delay it names,
not after the queue's visibility timeout) or an AWS error — so the queue delivers those again later and
deletes the rest. A direct
EventBridge or S3 event (the rule's Lambda target in older deployments, tests) is still accepted.
"""

from __future__ import annotations

import json

import boto3
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

from layoutlab import observability as obs
from layoutlab.handlers._runtime import add_count, logger, metrics, results_store, s3_client, settings, tracer
from layoutlab.pipeline.events import ObjectRef, objects_in_event
from layoutlab.pipeline.ingest import IngestSettings, ingest_object
from layoutlab.products import concurrency
from layoutlab.storage import aws_region

_config = IdempotencyConfig(event_key_jmespath="[bucket, key, version_id, etag]", expires_after_seconds=24 * 3600)
_persistence = (
    DynamoDBPersistenceLayer(table_name=settings().idempotency_table) if settings().idempotency_table else None
)
_COUNTERS = {"started": obs.DATASETS_STARTED, "duplicate": obs.DATASETS_DUPLICATE, "rejected": obs.DATASETS_REJECTED}


def _ingest(ref: dict, ran: list | None = None) -> dict:
    if ran is not None:
        ran.append(True)  # the body ran: this is not an idempotency replay
    config = settings()
    sfn = boto3.client("stepfunctions", region_name=aws_region())
    outcome = ingest_object(
        ObjectRef(**{k: v for k, v in ref.items() if k != "alternate_keys"}, alternate_keys=tuple(ref.get("alternate_keys", ()))),
        s3=s3_client(), sfn=sfn, store=results_store(),
        settings=IngestSettings(state_machine_arn=config.state_machine_arn, outputs_bucket=config.outputs_bucket,
                                max_bytes=config.max_input_bytes, ceilings=config.ceilings,
                                default_plan=config.default_plan),
        take_slot=concurrency.take_upload_slot,  # a product's bound of executions at once
    )
    return outcome.to_dict()


# Idempotency on the domain call, keyed by the object version (STYLE.md #3).
_ingest_once = idempotent_function(data_keyword_argument="ref", config=_config,
                                   persistence_store=_persistence)(_ingest) if _persistence else _ingest


_batch = BatchProcessor(event_type=EventType.SQS)


def _ingest_ref(ref) -> dict:
    record = {**ref.to_dict(), "alternate_keys": list(ref.alternate_keys)}
    ran: list = []
    outcome = _ingest_once(ref=record, ran=ran)
    if not ran and outcome["status"] == "started":
        # Powertools answered a repeated event with the first answer ("started"); for
        # this delivery nothing started, and the counters must not say it did.
        outcome = {**outcome, "status": "duplicate"}
    logger.info("ingest", extra=outcome)
    if outcome["status"] in _COUNTERS:
        add_count(_COUNTERS[outcome["status"]])
    return outcome


def _ingest_queue_record(record) -> list[dict]:
    """One SQS record (an EventBridge event in its body); raising marks it a batch item failure."""
    try:
        return [_ingest_ref(ref) for ref in objects_in_event(json.loads(record.body))]
    except concurrency.ProductBusy as busy:
        _deliver_again_in(record, busy.retry_after_s)
        raise


def _deliver_again_in(record, seconds: float) -> None:
    """The refused record comes back after ``seconds`` (jittered: uploads refused together do not all come back
    together) instead of the queue's visibility timeout. Best effort: on an error the timeout applies."""
    import random

    from botocore.exceptions import BotoCoreError, ClientError

    _, _, _, region, account, name = record.event_source_arn.split(":", 5)  # arn:aws:sqs:REGION:ACCOUNT:NAME
    try:
        sqs = boto3.client("sqs", region_name=region)
        url = sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=record.receipt_handle,
                                      VisibilityTimeout=max(1, round(seconds * random.uniform(0.5, 1.5))))
    except (BotoCoreError, ClientError) as error:
        logger.warning("the refused record's visibility was left to the queue's timeout", extra={"error": str(error)})


def _is_sqs_batch(event) -> bool:
    records = event.get("Records") if isinstance(event, dict) else None
    return bool(records) and all(r.get("eventSource") == "aws:sqs" for r in records)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event, context):
    _config.register_lambda_context(context)
    if _is_sqs_batch(event):
        return process_partial_response(event=event, record_handler=_ingest_queue_record, processor=_batch,
                                        context=context)
    return {"outcomes": [_ingest_ref(ref) for ref in objects_in_event(event)]}
