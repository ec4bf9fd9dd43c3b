"""How many executions a product may run at once: a counter in the results table, taken where executions
start (ingest) and given back where they end (summarize, record_failure).

  pk = ``PRODUCT#<name>``, sk = ``RUNNING``: ``running`` (executions holding a slot now), ``limit`` (the bound
       the last taker saw);
  pk = ``PRODUCT#<name>``, sk = ``EXECUTION#<dataset_id>``: one per execution that took a slot, with
       ``acquired`` and (once given back) ``released`` (epoch seconds).

Taking a slot is one DynamoDB transaction: put the EXECUTION item (only if the dataset has none) and add one
to ``running`` (only if it is under the bound). So a retried ingest of the same upload finds its slot again
and counts nothing twice, and a record over the bound is refused without anything written: ingest reports it
as a batch item failure and SQS delivers it again after the queue's visibility timeout — the queue is the
wait, nothing is scheduled here. Giving a slot back is the mirror transaction (mark the EXECUTION item
released, only once; subtract one), so a repeated summarize or record_failure gives back nothing more.

The counter is a separate item from the PRODUCT item (``products/state.py``) because ingest takes a slot
before the plan step has read the file: the PRODUCT item, and its signature, are made there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from layoutlab.results.store import PK, SK, from_dynamo, to_dynamo

DEFAULT_MAX_CONCURRENT_EXECUTIONS = 10
RUNNING_SK = "RUNNING"
EXECUTION_SK = "EXECUTION#"


# How long a refused upload stays out of sight in the queue before it is delivered again (the ingest handler
# sets its message's visibility, jittered): about a production granule's execution for a product at its bound;
# longer while the product's study granules are measured (a study takes minutes). Without it a refused upload
# waited the queue's whole visibility timeout (6 x ingest's timeout in AWS), and a slot freed meanwhile idled.
BUSY_RETRY_S = 5
STUDYING_RETRY_S = 30


class ProductBusy(Exception):
    """The product runs as many executions as its plan allows, or its study is full and undecided: this upload
    waits in the queue for ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: float | None = None):
        super().__init__(message)
        self.retry_after_s = BUSY_RETRY_S if retry_after_s is None else retry_after_s


@dataclass(frozen=True)
class Slot:
    product: str
    dataset_id: str
    again: bool  # the dataset held its slot already (a repeated delivery of the same upload)


def _pk(name: str) -> str:
    return f"PRODUCT#{name}"


def _cancellation_codes(error) -> list[str | None]:
    return [r.get("Code") for r in error.response.get("CancellationReasons", [])]


def _at_the_bound(product: str, limit: int, dataset_id: str) -> ProductBusy:
    return ProductBusy(f"product {product!r} runs {limit} execution(s) at once (plan field "
                       f"products.max_concurrent_executions): {dataset_id} waits")


def acquire(store, product: str, dataset_id: str, limit: int, *, clock=time.time) -> Slot:
    """Take one of ``product``'s ``limit`` execution slots for ``dataset_id``; raises ProductBusy when all are
    taken. A dataset that holds a slot already keeps it (``again``)."""
    client = store.table.meta.client
    # Most takes in a burst find the bound reached: say so from two reads, without a transaction (a cancelled
    # TransactWriteItems still consumes capacity in AWS; moto deep-copies the whole table for each one, which
    # took the local cloud to 7.1 GB in a 300-granule burst). The transaction below still decides every race.
    held = store.table.get_item(Key={PK: _pk(product), SK: RUNNING_SK}, ConsistentRead=True).get("Item")
    if held is not None and int(held.get("running", 0)) >= int(limit):
        mine = store.table.get_item(Key={PK: _pk(product), SK: f"{EXECUTION_SK}{dataset_id}"},
                                    ConsistentRead=True).get("Item")
        if mine is not None:
            return Slot(product, dataset_id, again=True)
        raise _at_the_bound(product, limit, dataset_id)
    at = clock()
    execution = {PK: _pk(product), SK: f"{EXECUTION_SK}{dataset_id}", "kind": "PRODUCT_EXECUTION",
                 "product": product, "dataset": dataset_id, "acquired": at}
    try:
        client.transact_write_items(TransactItems=[
            {"Put": {"TableName": store.table_name, "Item": to_dynamo(execution),
                     "ConditionExpression": "attribute_not_exists(pk)"}},
            {"Update": {"TableName": store.table_name, "Key": {PK: _pk(product), SK: RUNNING_SK},
                        "UpdateExpression": "SET running = if_not_exists(running, :zero) + :one, #l = :limit, "
                                            "kind = :kind, product = :product",
                        "ConditionExpression": "attribute_not_exists(running) OR running < :limit",
                        "ExpressionAttributeNames": {"#l": "limit"},
                        "ExpressionAttributeValues": {":zero": 0, ":one": 1, ":limit": int(limit),
                                                      ":kind": "PRODUCT_RUNNING", ":product": product}}},
        ])
    except client.exceptions.TransactionCanceledException as error:
        codes = _cancellation_codes(error)
        if any(code not in ("None", "ConditionalCheckFailed", "TransactionConflict", None) for code in codes):
            raise  # not a condition (throttling, a bad request): the caller's error, retried by the platform
        if codes and codes[0] == "ConditionalCheckFailed":
            return Slot(product, dataset_id, again=True)
        raise _at_the_bound(product, limit, dataset_id) from None
    return Slot(product, dataset_id, again=False)


def take_upload_slot(store, key: str, metadata: dict, plan: dict, dataset_id: str) -> str | None:
    """Ingest's hook (``pipeline.ingest.ingest_object(take_slot=...)``): the product the uploader named (key
    folder or metadata), once the upload holds one of its slots; None when it named none (a product found by
    structure is known only at the plan step, after the file is read, so it is not bounded here). Raises
    ProductBusy when the product's slots are taken."""
    from layoutlab.errors import UserError
    from layoutlab.products import signature, state

    try:
        product = signature.named_product(key, metadata)
    except UserError:
        return None  # an invalid name: the plan step refuses the granule with its reason, as before
    if product is None:
        return None
    _refuse_while_the_study_is_full(store, product, dataset_id)
    acquire(store, product, dataset_id, state.ProductSettings.from_plan(plan).max_concurrent_executions)
    return product


def _refuse_while_the_study_is_full(store, product: str, dataset_id: str) -> None:
    """ProductBusy when the product's study granules are all taken and not decided yet: the plan step would
    make this granule wait for the decision (``state.admit``'s ProductStudying, retried with backoff) while its
    execution held one of the product's slots; it waits in the queue instead, holding nothing."""
    from layoutlab.products import state

    item = state.get_product(store, product)
    if not item or item.get("state") != state.STUDYING or dataset_id in (item.get("studying") or []):
        return
    if int(item.get("study_slots", 0)) >= int(item.get("study_granules", 0) or 0) > 0:
        raise ProductBusy(f"product {product!r}: its study granules ({', '.join(item.get('studying') or [])}) "
                          f"are not decided yet; {dataset_id} waits in the queue", retry_after_s=STUDYING_RETRY_S)


def release(store, product: str, dataset_id: str, *, clock=time.time) -> bool:
    """Give back ``dataset_id``'s slot of ``product``; False when it held none or gave it back already."""
    client = store.table.meta.client
    try:
        client.transact_write_items(TransactItems=[
            {"Update": {"TableName": store.table_name, "Key": {PK: _pk(product), SK: f"{EXECUTION_SK}{dataset_id}"},
                        "UpdateExpression": "SET released = :at",
                        "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(released)",
                        "ExpressionAttributeValues": {":at": to_dynamo(float(clock()))}}},
            {"Update": {"TableName": store.table_name, "Key": {PK: _pk(product), SK: RUNNING_SK},
                        "UpdateExpression": "SET running = running - :one",
                        "ConditionExpression": "running > :zero",
                        "ExpressionAttributeValues": {":one": 1, ":zero": 0}}},
        ])
    except client.exceptions.TransactionCanceledException as error:
        if any(code not in ("None", "ConditionalCheckFailed", "TransactionConflict", None)
               for code in _cancellation_codes(error)):
            raise
        return False
    return True


def release_for_dataset(store, dataset_id: str) -> bool:
    """The end of ``dataset_id``'s execution (summarize or record_failure): give back the slot ingest took,
    named on its RUN item (``execution_product``); False when it took none."""
    run = next(iter(store.items(dataset=dataset_id, kind="RUN")), {})
    product = run.get("execution_product")
    return release(store, product, dataset_id) if product else False


def running(store, product: str) -> int:
    item = store.table.get_item(Key={PK: _pk(product), SK: RUNNING_SK}, ConsistentRead=True).get("Item")
    return int(from_dynamo(item).get("running") or 0) if item else 0


def executions(store, product: str) -> list[dict]:
    """The product's EXECUTION items: when each execution took its slot and gave it back."""
    from boto3.dynamodb.conditions import Key

    return list(store._pages(store.table.query, KeyConditionExpression=Key(PK).eq(_pk(product))
                             & Key(SK).begins_with(EXECUTION_SK)))


def peak_concurrency(intervals: list[tuple[float, float | None]]) -> int:
    """The most intervals (acquired, released; None: still held) open at one instant; a slot given back at the
    instant another is taken does not overlap it."""
    edges = sorted([(start, 1) for start, _ in intervals] +
                   [(end, -1) for _, end in intervals if end is not None], key=lambda edge: (edge[0], edge[1]))
    peak = now = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak
