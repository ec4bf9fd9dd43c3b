"""The results table: one DynamoDB table, single-table design.

Keys (strings):
  pk = ``DATASET#<dataset_id>``
  sk = ``RUN`` | ``VARIANT#<variant>`` | ``RESULT#<variant>#<pattern>#<reader>#<platform>#<rep>``
       | ``SUMMARY`` | ``FAILURE#<stage>#<detail>`` | ``UNIT#<variant>#<k>`` (a rechunk work
       unit's seconds and bytes: one item per unit, so a retried unit counts once)
  and one item per uploaded key: pk = ``OBJECT#<bucket>/<key>``, sk = ``CURRENT`` —
       the key's current version (the one with the latest S3 ``sequencer`` seen),
       so an older version's event arriving late cannot start anything.
  and per product (``layoutlab/products/state.py``): pk = ``PRODUCT#<name>``, sk = ``PRODUCT`` (its
       state, counts, decision) | ``GRANULE#<dataset_id>`` (one granule's role: study / production / check).
  GSI ``by-pattern`` (sparse: RESULT items only): pattern_pk = ``PATTERN#<pattern>``,
       pattern_sk = ``<variant>#<reader>#<platform>#<dataset>#<rep>`` — one pattern
       compared across datasets, variants, readers and platforms in one query.
  The CDK data stack builds the table from these names.

Result items carry the bench record unchanged (the versioned schema in
``results/schema.json``) plus these keys and ``kind``. The same code serves
AWS and the local cloud: the endpoint comes from ``AWS_ENDPOINT_URL`` like
every other client (see ``layoutlab.storage``).
"""

from __future__ import annotations

import json
import os
from decimal import Decimal
from typing import Iterable, Iterator

from layoutlab import settings
from layoutlab.storage import aws_region

PK, SK, GSI1_NAME, GSI1PK, GSI1SK = "pk", "sk", "by-pattern", "pattern_pk", "pattern_sk"
KINDS = ("RUN", "VARIANT", "UNIT", "RESULT", "SUMMARY", "FAILURE", "OBJECT", "PRODUCT", "GRANULE")
TABLE_ENV = "LAYOUTLAB_RESULTS_TABLE"
DEFAULT_TABLE = "layoutlab-results"


def dataset_pk(dataset_id: str) -> str:
    return f"DATASET#{dataset_id}"


def object_pk(bucket: str, key: str) -> str:
    return f"OBJECT#{bucket}/{key}"


# S3 sequencers are hexadecimal strings whose length may differ between events; AWS
# says to compare them as hex after left-padding the shorter with zeros. 64 digits
# leaves room to spare (S3 sends 16-18), so padded strings sort like the numbers.
SEQUENCER_DIGITS = 64


def sequencer_order(sequencer: str) -> str:
    """``sequencer`` left-padded with zeros to a fixed width, upper case: compares as a string
    the way the hex numbers compare. Raises ValueError for a value that is not hex."""
    text = str(sequencer).strip().upper()
    if not text or len(text) > SEQUENCER_DIGITS or any(c not in "0123456789ABCDEF" for c in text):
        raise ValueError(f"not an S3 sequencer (hex digits, at most {SEQUENCER_DIGITS}): {sequencer!r}")
    return text.rjust(SEQUENCER_DIGITS, "0")


def result_sort_key(record: dict) -> str:
    """``RESULT#<case_id>``; a case id is variant#pattern#reader#platform#rep (plus the
    worker for a scaling study's cases), derived when the record carries none."""
    if record.get("case_id"):
        return f"RESULT#{record['case_id']}"
    return "RESULT#" + "#".join(
        str(record[name]) for name in ("variant", "pattern", "reader", "platform")
    ) + f"#{int(record['repetition']):03d}"


def to_dynamo(value):
    """JSON-like value -> what DynamoDB accepts (floats as Decimal; NaN/inf as None; numpy scalars unwrapped)."""
    if hasattr(value, "item") and not isinstance(value, (dict, list, tuple, str, bytes)):
        value = value.item()  # numpy scalar -> Python scalar (repr(np.float64(1.0)) is not a number)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        return Decimal(repr(float(value)))
    if isinstance(value, dict):
        return {str(k): to_dynamo(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_dynamo(v) for v in value]
    return value


def from_dynamo(value):
    """DynamoDB item -> plain JSON-able values (Decimal -> int or float)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_dynamo(v) for v in value]
    if isinstance(value, set):
        return sorted(from_dynamo(v) for v in value)
    return value


class ResultsStore:
    """Read and write the results table. ``table_name`` defaults to $LAYOUTLAB_RESULTS_TABLE."""

    def __init__(self, table_name: str | None = None, endpoint_url: str | None = None):
        import boto3

        self.table_name = table_name or settings.value(TABLE_ENV) or DEFAULT_TABLE
        endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or os.environ.get("AWS_ENDPOINT_URL")
        self._resource = boto3.resource("dynamodb", endpoint_url=endpoint, region_name=aws_region())
        self.table = self._resource.Table(self.table_name)

    # -- creation (local cloud and tests; in AWS the CDK data stack owns the table) --
    def create_table(self) -> None:
        client = self._resource.meta.client
        existing = client.list_tables().get("TableNames", [])
        if self.table_name in existing:
            return
        client.create_table(
            TableName=self.table_name,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": n, "AttributeType": "S"} for n in (PK, SK, GSI1PK, GSI1SK)
            ],
            KeySchema=[{"AttributeName": PK, "KeyType": "HASH"}, {"AttributeName": SK, "KeyType": "RANGE"}],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": GSI1_NAME,
                    "KeySchema": [
                        {"AttributeName": GSI1PK, "KeyType": "HASH"},
                        {"AttributeName": GSI1SK, "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        )
        client.get_waiter("table_exists").wait(TableName=self.table_name)

    # -- writes --
    def _put(self, item: dict) -> dict:
        self.table.put_item(Item=to_dynamo(item))
        return item

    def put_run(self, dataset_id: str, **fields) -> dict:
        return self._put({PK: dataset_pk(dataset_id), SK: "RUN", "kind": "RUN", "dataset": dataset_id, **fields})

    def create_run(self, dataset_id: str, **fields) -> bool:
        """Write the RUN item only if the dataset has none; False when it already had one."""
        item = {PK: dataset_pk(dataset_id), SK: "RUN", "kind": "RUN", "dataset": dataset_id, **fields}
        try:
            self.table.put_item(Item=to_dynamo(item), ConditionExpression="attribute_not_exists(pk)")
        except self.table.meta.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def update_run(self, dataset_id: str, **fields) -> None:
        """Set fields on the RUN item (status, finished, ...)."""
        names = {f"#f{i}": k for i, k in enumerate(fields)}
        values = {f":v{i}": to_dynamo(v) for i, v in enumerate(fields.values())}
        self.table.update_item(
            Key={PK: dataset_pk(dataset_id), SK: "RUN"},
            UpdateExpression="SET " + ", ".join(f"#f{i} = :v{i}" for i in range(len(fields))),
            ExpressionAttributeNames=names, ExpressionAttributeValues=values,
        )

    def claim_current_version(self, bucket: str, key: str, sequencer: str, dataset_id: str,
                              **fields) -> dict | None:
        """Make ``dataset_id`` the key's current version unless a later one is already current.

        One conditional write: it succeeds when the key has no current version, when
        ``sequencer`` is later than the current one's, or when it names the same
        version again (a retry). Returns None when claimed, else the current item
        (the later version), which is left untouched.
        """
        order = sequencer_order(sequencer)
        item = {PK: object_pk(bucket, key), SK: "CURRENT", "kind": "OBJECT", "bucket": bucket, "key": key,
                "dataset": dataset_id, "sequencer": sequencer, "sequencer_order": order, **fields}
        try:
            self.table.put_item(
                Item=to_dynamo(item),
                ConditionExpression="attribute_not_exists(pk) OR sequencer_order < :order "
                                    "OR (sequencer_order = :order AND dataset = :dataset)",
                ExpressionAttributeValues={":order": order, ":dataset": dataset_id},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except self.table.meta.client.exceptions.ConditionalCheckFailedException as error:
            # The failed write answers with the item that stopped it (no GetItem permission needed).
            from boto3.dynamodb.types import TypeDeserializer

            current = error.response.get("Item") or {}
            return from_dynamo({k: TypeDeserializer().deserialize(v) for k, v in current.items()})
        return None

    def current_version(self, bucket: str, key: str) -> dict | None:
        """The key's current version item (``dataset``, ``version_id``, ``sequencer``), if any."""
        item = self.table.get_item(Key={PK: object_pk(bucket, key), SK: "CURRENT"}).get("Item")
        return from_dynamo(item) if item else None

    def put_variant(self, dataset_id: str, variant: str, **fields) -> dict:
        if "kind" in fields:
            raise ValueError("'kind' names the item kind; call the variant's kind 'variant_kind'")
        return self._put(
            {PK: dataset_pk(dataset_id), SK: f"VARIANT#{variant}", "kind": "VARIANT",
             "dataset": dataset_id, "variant": variant, **fields}
        )

    def record_unit_work(self, dataset_id: str, variant: str, unit: int, seconds: float, nbytes: int,
                         skipped: bool = False) -> None:
        """Record what rechunk work unit ``unit`` of a variant did (its seconds and bytes).

        One item per unit, keyed by the unit: a task retried after its record (a Lambda
        that timed out once the work was done, a redelivered Map item) overwrites it
        instead of adding to a total. A retry that found the unit already done
        (``skipped``) writes only when the unit has no record yet, so it never replaces
        the working attempt's time with its own near-zero one.
        """
        item = to_dynamo({PK: dataset_pk(dataset_id), SK: f"UNIT#{variant}#{int(unit):06d}", "kind": "UNIT",
                          "dataset": dataset_id, "variant": variant, "unit": int(unit),
                          "seconds": float(seconds), "bytes": int(nbytes), "skipped": bool(skipped)})
        if not skipped:
            self.table.put_item(Item=item)
            return
        try:
            self.table.put_item(Item=item, ConditionExpression="attribute_not_exists(pk)")
        except self.table.meta.client.exceptions.ConditionalCheckFailedException:
            pass  # the unit's own record stays

    def unit_work(self, dataset_id: str, variant: str) -> dict:
        """Totals over the variant's work-unit records: ``units_seconds``, ``units_done``, ``units_bytes``."""
        units = [u for u in self.items(dataset=dataset_id, kind="UNIT") if u["variant"] == variant]
        return {"units_seconds": sum(float(u["seconds"]) for u in units), "units_done": len(units),
                "units_bytes": sum(int(u["bytes"]) for u in units)}

    def get_variant(self, dataset_id: str, variant: str) -> dict | None:
        item = self.table.get_item(Key={PK: dataset_pk(dataset_id), SK: f"VARIANT#{variant}"}).get("Item")
        return from_dynamo(item) if item else None

    def put_result(self, record: dict) -> dict:
        """Store one bench record. The key is the case, so writing a case twice keeps one item."""
        rest = "#".join(str(record[n]) for n in ("variant", "reader", "platform", "dataset"))
        item = {
            **record,
            PK: dataset_pk(record["dataset"]),
            SK: result_sort_key(record),
            GSI1PK: f"PATTERN#{record['pattern']}",
            GSI1SK: f"{rest}#{int(record['repetition']):03d}" + (
                f"#{record['case_id']}" if record.get("case_id") else ""),
            "kind": "RESULT",
        }
        return self._put(item)

    def put_summary(self, dataset_id: str, summary: dict) -> dict:
        return self._put({PK: dataset_pk(dataset_id), SK: "SUMMARY", "kind": "SUMMARY",
                          "dataset": dataset_id, **summary})

    def put_failure(self, dataset_id: str, stage: str, detail: str, reason: str, **fields) -> dict:
        return self._put(
            {PK: dataset_pk(dataset_id), SK: f"FAILURE#{stage}#{detail}", "kind": "FAILURE",
             "dataset": dataset_id, "stage": stage, "detail": detail, "reason": reason, **fields}
        )

    # -- reads --
    def get_failure(self, dataset_id: str, stage: str, detail: str) -> dict | None:
        item = self.table.get_item(Key={PK: dataset_pk(dataset_id), SK: f"FAILURE#{stage}#{detail}"}).get("Item")
        return from_dynamo(item) if item else None

    def _pages(self, method, **kwargs) -> Iterator[dict]:
        while True:
            page = method(**kwargs)
            for item in page.get("Items", []):
                yield from_dynamo(item)
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def items(self, dataset: str | None = None, pattern: str | None = None,
              kind: str | None = None) -> list[dict]:
        """Items filtered by dataset, pattern (results only) and kind, in key order."""
        from boto3.dynamodb.conditions import Attr, Key

        if kind and kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
        if dataset:
            condition = Key(PK).eq(dataset_pk(dataset))
            if kind:
                condition &= Key(SK).begins_with(kind)
            items = self._pages(self.table.query, KeyConditionExpression=condition)
            if pattern:
                items = (i for i in items if i.get("pattern") == pattern)
        elif pattern:
            items = self._pages(
                self.table.query, IndexName=GSI1_NAME,
                KeyConditionExpression=Key(GSI1PK).eq(f"PATTERN#{pattern}"),
            )
        else:
            kwargs = {"FilterExpression": Attr("kind").eq(kind)} if kind else {}
            items = self._pages(self.table.scan, **kwargs)
        found = list(items)
        if kind:
            found = [i for i in found if i.get("kind") == kind]
        return sorted(found, key=lambda i: (i[PK], i[SK]))

    def datasets(self) -> list[str]:
        return sorted({i["dataset"] for i in self.items(kind="RUN")})


def public_fields(item: dict) -> dict:
    """An item without the storage keys, as users see it."""
    return {k: v for k, v in item.items() if k not in (PK, SK, GSI1PK, GSI1SK)}


def dumps(items: Iterable[dict]) -> str:
    return json.dumps([public_fields(i) for i in items], indent=2, sort_keys=True, default=str)
