"""The SQS event source of the ingest function, in the local cloud: what Lambda's event source mapping does.

In AWS the CDK app routes uploads S3 → EventBridge rule → SQS queue → ingest through an event source mapping
(batches, ``ReportBatchItemFailures``). moto 5.2.5 has the first three (its EventBridge rules deliver to SQS
targets; ``s3_events`` gives the event AWS's shape) but no event source mapping for a function it cannot run.
``QueueEventSource`` plays that part, in the local cloud's server process: a few pollers receive up to
``batch_size`` messages (long polling), wrap them as the Lambda SQS event (``Records`` with ``messageId``,
``body``, ``eventSource: aws:sqs``), invoke the function through the local dispatcher, and delete the messages
the function did not name in ``batchItemFailures``; those, and every message of a batch whose invocation
failed, become visible again after the queue's visibility timeout, as in AWS. Nothing here schedules or
reorders: the queue's own redelivery is the retry, its redrive policy the dead-letter queue.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

LOG = logging.getLogger(__name__)

# (function ARN, event) -> the function's answer; raises on a failed invocation.
LambdaInvoke = Callable[[str, dict], object]


def lambda_sqs_event(messages: list[dict], queue_arn: str, region: str) -> dict:
    """The event Lambda's SQS event source passes to the function for ``messages`` (ReceiveMessage's)."""
    return {"Records": [{
        "messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
        "attributes": dict(m.get("Attributes") or {}), "messageAttributes": dict(m.get("MessageAttributes") or {}),
        "md5OfBody": m.get("MD5OfBody", ""), "eventSource": "aws:sqs", "eventSourceARN": queue_arn,
        "awsRegion": region} for m in messages]}


def failed_ids(answer, messages: list[dict]) -> set[str]:
    """The message ids the function asks to keep: its ``batchItemFailures``; all when it gave no such answer."""
    if not isinstance(answer, dict) or not isinstance(answer.get("batchItemFailures"), list):
        return {m["MessageId"] for m in messages}
    return {str(f.get("itemIdentifier")) for f in answer["batchItemFailures"] if isinstance(f, dict)}


class QueueEventSource:
    """Polls ``queue_name`` and invokes ``function_arn`` with its messages in batches (see the module)."""

    def __init__(self, sqs, queue_name: str, function_arn: str, invoke: LambdaInvoke, *, batch_size: int,
                 workers: int, wait_s: int = 1):
        self._sqs, self._queue_name, self._function_arn, self._invoke = sqs, queue_name, function_arn, invoke
        self._batch_size, self._wait_s = batch_size, wait_s
        self._stop = threading.Event()
        self.invocations = 0
        self._threads = [threading.Thread(target=self._poll, name=f"sqs-source-{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def _queue(self) -> tuple[str, str] | None:
        try:
            url = self._sqs.get_queue_url(QueueName=self._queue_name)["QueueUrl"]
        except self._sqs.exceptions.QueueDoesNotExist:
            return None  # not deployed yet (LocalPipeline.setup(s3_events=True) creates it)
        arn = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        return url, arn

    def _poll(self) -> None:
        queue = None
        while not self._stop.is_set():
            try:
                queue = queue or self._queue()
                if queue is None:
                    self._stop.wait(1)
                    continue
                self._one_batch(*queue)
            except self._sqs.exceptions.QueueDoesNotExist:  # the local cloud was reset: wait for a new queue
                queue = None
                self._stop.wait(1)
            except Exception:  # the poller outlives one bad batch or a reset of the local cloud, as Lambda's does
                LOG.exception("the local SQS event source of %s failed a poll; polling again", self._function_arn)
                queue = None
                self._stop.wait(1)

    def _one_batch(self, url: str, arn: str) -> None:
        messages = self._sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=self._batch_size,
                                             WaitTimeSeconds=self._wait_s, AttributeNames=["All"]).get("Messages", [])
        if not messages:
            return
        region = arn.split(":")[3]
        self.invocations += 1
        try:
            answer = self._invoke(self._function_arn, lambda_sqs_event(messages, arn, region))
        except Exception as error:  # the whole batch comes back after the visibility timeout
            LOG.warning("%s failed on a batch of %d message(s): %s; they are delivered again later",
                        self._function_arn, len(messages), str(error).splitlines()[0] if str(error) else error)
            return
        keep = failed_ids(answer, messages)
        done = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
                if m["MessageId"] not in keep]
        if done:
            self._sqs.delete_message_batch(QueueUrl=url, Entries=done)

    def stop(self, timeout: float = 5) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
