"""The PRODUCT item and the GRANULE items: a product's state in the results table.

  pk = ``PRODUCT#<name>``, sk = ``PRODUCT``: state (``studying`` -> ``decided`` -> ``production``; back
       to ``studying`` when a drift check or a granule of another structure asks for a new study), the
       study round, the granules studied / being studied, counts, bytes in and out, the decision and its
       history (who, when, why);
  pk = ``PRODUCT#<name>``, sk = ``GRANULE#<dataset_id>``: one per granule admitted, with its role
       (``study``, ``production``, ``check``: production plus a drift benchmark) — written in the same
       DynamoDB transaction that takes a study slot or a production number, so a retried plan step finds
       its granule's role again and never counts a granule twice.

Plain functions over a ``ResultsStore`` (its table): the same code in AWS and on the local cloud.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass

from layoutlab.errors import UserError
from layoutlab.results.store import PK, SK, from_dynamo, to_dynamo

STUDYING, DECIDED, PRODUCTION = "studying", "decided", "production"
STATES = (STUDYING, DECIDED, PRODUCTION)
ROLES = ("study", "production", "check")
DEFAULT_STUDY_GRANULES = 3
DEFAULT_CHECK_EVERY = 20
DEFAULT_DRIFT_TOLERANCE = 0.1
DEFAULT_MAX_CONCURRENT_EXECUTIONS = 10  # (products/concurrency.py enforces it at ingest)
DEFAULT_STUDY_SIZE_TOLERANCE = 0.1
DEFAULT_STUDY_WINDOW_S = 300
HISTORY_KEEP = 50  # decision history entries kept on the item (an item is at most 400 KB)
_ATTEMPTS = 25


class ProductStudying(Exception):
    """The product's study slots are taken and its decision is not made yet: this granule waits (the state
    machine retries the plan step on this error's name, with backoff)."""


class ProductError(UserError):
    """A product cannot be found or changed as asked (one line, naming the product)."""


def product_pk(name: str) -> str:
    return f"PRODUCT#{name}"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class ProductSettings:
    """The plan's ``products`` fields (pipeline/plan.schema.json)."""

    study_granules: int = DEFAULT_STUDY_GRANULES
    check_every: int = DEFAULT_CHECK_EVERY
    drift_tolerance: float = DEFAULT_DRIFT_TOLERANCE
    by_structure: bool = False
    max_concurrent_executions: int = DEFAULT_MAX_CONCURRENT_EXECUTIONS
    study_size_tolerance: float = DEFAULT_STUDY_SIZE_TOLERANCE
    study_window_s: float = DEFAULT_STUDY_WINDOW_S

    @classmethod
    def from_plan(cls, plan: dict | None) -> "ProductSettings":
        given = (plan or {}).get("products") or {}
        return cls(study_granules=int(given.get("study_granules", DEFAULT_STUDY_GRANULES)),
                   check_every=int(given.get("check_every", DEFAULT_CHECK_EVERY)),
                   drift_tolerance=float(given.get("drift_tolerance", DEFAULT_DRIFT_TOLERANCE)),
                   by_structure=bool(given.get("by_structure", False)),
                   max_concurrent_executions=int(given.get("max_concurrent_executions",
                                                           DEFAULT_MAX_CONCURRENT_EXECUTIONS)),
                   study_size_tolerance=float(given.get("study_size_tolerance", DEFAULT_STUDY_SIZE_TOLERANCE)),
                   study_window_s=float(given.get("study_window_s", DEFAULT_STUDY_WINDOW_S)))


@dataclass(frozen=True)
class Admission:
    product: str
    role: str  # study | production | check
    number: int  # the granule's number in its role (study slot from 1, production count from 1)
    item: dict  # the PRODUCT item as read when admitted
    again: bool = False  # the granule had been admitted before (a retried plan step)


def get_product(store, name: str) -> dict | None:
    item = store.table.get_item(Key={PK: product_pk(name), SK: "PRODUCT"}, ConsistentRead=True).get("Item")
    return from_dynamo(item) if item else None


def require_product(store, name: str) -> dict:
    item = get_product(store, name)
    if item is None:
        raise ProductError(f"product {name!r}: no PRODUCT item in table {store.table_name!r}")
    return item


def get_granule(store, name: str, dataset_id: str) -> dict | None:
    item = store.table.get_item(Key={PK: product_pk(name), SK: f"GRANULE#{dataset_id}"},
                                ConsistentRead=True).get("Item")
    return from_dynamo(item) if item else None


def granules(store, name: str) -> list[dict]:
    from boto3.dynamodb.conditions import Key

    return [i for i in store._pages(store.table.query, KeyConditionExpression=Key(PK).eq(product_pk(name))
                                    & Key(SK).begins_with("GRANULE#"))]


def products(store) -> list[dict]:
    return [i for i in store.items(kind="PRODUCT")]


def ensure_product(store, name: str, *, signature: str | None, named_by: str, settings: ProductSettings,
                   plan: dict | None = None) -> dict:
    """The product's item, created (state studying, round 1) when the product is new; ``plan`` is the plan of
    its first granule (what a backfill resolves the product's variant with)."""
    item = {PK: product_pk(name), SK: "PRODUCT", "kind": "PRODUCT", "product": name, "state": STUDYING,
            "signature": signature, "named_by": named_by, "study_round": 1, "study_slots": 0,
            "study_granules": settings.study_granules, "check_every": settings.check_every,
            "drift_tolerance": settings.drift_tolerance, "studying": [], "studied": [],
            "granules": 0, "study_count": 0, "production_granules": 0, "checks": 0, "failed_granules": 0,
            "bytes_in": 0, "bytes_out": 0, "convert_s": 0, "decision": None, "history": [], "created": now(),
            "plan": plan}
    try:
        store.table.put_item(Item=to_dynamo(item), ConditionExpression="attribute_not_exists(pk)")
    except store.table.meta.client.exceptions.ConditionalCheckFailedException:
        pass
    return require_product(store, name)


def _granule_item(name: str, dataset_id: str, role: str, number: int, round_: int, **fields) -> dict:
    return {PK: product_pk(name), SK: f"GRANULE#{dataset_id}", "kind": "GRANULE", "product": name,
            "dataset": dataset_id, "role": role, "number": number, "study_round": round_, "status": "admitted",
            "admitted": now(), **fields}


def _transact(store, product_update: dict, granule: dict) -> str | None:
    """Update the PRODUCT item and put the GRANULE item in one transaction; None when done, else which
    condition failed: ``granule`` (admitted before) or ``product`` (the product changed meanwhile)."""
    # (the resource's client serialises plain values itself: DynamoDB types are not written by hand)
    client = store.table.meta.client
    update = {"TableName": store.table_name, "Key": product_update["Key"],
              "UpdateExpression": product_update["UpdateExpression"],
              "ConditionExpression": product_update["ConditionExpression"],
              "ExpressionAttributeValues": to_dynamo(product_update["Values"])}
    if product_update.get("Names"):
        update["ExpressionAttributeNames"] = product_update["Names"]
    put = {"TableName": store.table_name, "Item": to_dynamo(granule), "ConditionExpression": "attribute_not_exists(pk)"}
    try:
        client.transact_write_items(TransactItems=[{"Update": update}, {"Put": put}])
    except client.exceptions.TransactionCanceledException as error:
        reasons = [r.get("Code") for r in error.response.get("CancellationReasons", [])]
        if any(code not in ("None", "ConditionalCheckFailed", "TransactionConflict", None) for code in reasons):
            raise  # not a lost race (throttling, a bad request): the caller's error
        if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
            return "granule"
        return "product"
    return None


def similar_study_granule(store, name: str, round_: int, size: int, settings: ProductSettings,
                          at: float) -> str | None:
    """The study granule of this round whose size is within ``study_size_tolerance`` of ``size`` (relative to
    the larger), while the round's study window is open (``study_window_s`` from its first study granule's
    admission); else None. The study prefers granules of different sizes: a granule like one already studied
    waits (it becomes a production granule if the decision comes first), unless no other size arrives within
    the window. Failed study granules count for nothing."""
    if settings.study_size_tolerance <= 0 or settings.study_window_s <= 0:
        return None
    studied = [g for g in granules(store, name) if g.get("role") == "study"
               and int(g.get("study_round") or 0) == round_ and g.get("status") != "FAILED"]
    if not studied:
        return None
    opened = min(datetime.datetime.fromisoformat(g["admitted"]).timestamp() for g in studied)
    if at - opened >= settings.study_window_s:
        return None
    for granule in studied:
        other = int(granule.get("bytes_in") or 0)
        if abs(other - size) <= settings.study_size_tolerance * max(other, size, 1):
            return granule["dataset"]
    return None


def admit(store, name: str, dataset_id: str, *, size: int, signature: str | None, named_by: str,
          settings: ProductSettings, checks: bool = True, study: bool = True, plan: dict | None = None,
          clock=time.time) -> Admission:
    """Admit one granule into its product: a study slot while the product is studying and has one free (and
    the granule's size is not like a study granule's, ``similar_study_granule``), else (decided) the next
    production number, every ``check_every``-th of which is a drift check.
    Raises ProductStudying when the study is full and undecided, or the granule waits for another size. A
    backfill admits with ``checks`` off (no benchmark inside a batch) and ``study`` off (an archive is
    converted by a decided product only)."""
    product = ensure_product(store, name, signature=signature, named_by=named_by, settings=settings, plan=plan)
    for _ in range(_ATTEMPTS):
        existing = get_granule(store, name, dataset_id)
        if existing is not None:
            return Admission(name, existing["role"], int(existing["number"]), product, again=True)
        product = require_product(store, name)
        if signature and product.get("signature") and signature != product["signature"] \
                and product["state"] != STUDYING:
            mark_for_study(store, name, f"granule {dataset_id} has another structure ({signature}, the product's "
                                        f"is {product['signature']})", by="layoutlab")
            continue
        round_ = int(product["study_round"])
        if product["state"] == STUDYING and not study:
            raise ProductError(f"product {name!r} is not decided (state studying, round {round_}): granule "
                               f"{dataset_id} is not converted; study the product first, or 'layoutlab product "
                               f"decide {name} --variant V'")
        if product["state"] == STUDYING:
            slots, limit = int(product["study_slots"]), int(product["study_granules"])
            if slots >= limit:
                raise ProductStudying(
                    f"product {name!r}: its {limit} study granules ({', '.join(product.get('studying') or [])}) "
                    f"are not decided yet; granule {dataset_id} waits for the decision")
            similar = similar_study_granule(store, name, round_, int(size), settings, clock())
            if similar:
                raise ProductStudying(
                    f"product {name!r}: granule {dataset_id} ({int(size)} bytes) is within "
                    f"{settings.study_size_tolerance:.0%} of study granule {similar} of round {round_}; it waits "
                    f"for a granule of another size until {settings.study_window_s:.0f} s after the round's first")
            failed = _transact(store, {
                "Key": {PK: product_pk(name), SK: "PRODUCT"},
                "UpdateExpression": "SET study_slots = :next, studying = list_append(studying, :me), "
                                    "granules = granules + :one, bytes_in = bytes_in + :size, "
                                    "signature = if_not_exists(signature, :sig)",
                "ConditionExpression": "#s = :studying AND study_slots = :slots AND study_round = :round",
                "Names": {"#s": "state"},
                "Values": {":next": slots + 1, ":me": [dataset_id], ":one": 1, ":size": int(size),
                           ":studying": STUDYING, ":slots": slots, ":round": round_, ":sig": signature}},
                _granule_item(name, dataset_id, "study", slots + 1, round_, bytes_in=int(size), signature=signature))
            if failed is None:
                return Admission(name, "study", slots + 1, product)
            continue
        number = int(product["production_granules"]) + 1
        role = "check" if checks and number % int(product["check_every"]) == 0 else "production"
        failed = _transact(store, {
            "Key": {PK: product_pk(name), SK: "PRODUCT"},
            "UpdateExpression": "SET production_granules = :number, granules = granules + :one, "
                                "bytes_in = bytes_in + :size",
            "ConditionExpression": "#s IN (:decided, :production) AND production_granules = :before "
                                   "AND study_round = :round",
            "Names": {"#s": "state"},
            "Values": {":number": number, ":one": 1, ":size": int(size), ":decided": DECIDED,
                       ":production": PRODUCTION, ":before": number - 1, ":round": round_}},
            _granule_item(name, dataset_id, role, number, round_, bytes_in=int(size), signature=signature,
                          variant=(product.get("decision") or {}).get("variant")))
        if failed is None:
            return Admission(name, role, number, product)
    raise ProductError(f"product {name!r}: granule {dataset_id} not admitted after {_ATTEMPTS} attempts "
                       f"(the product item kept changing)")


def _update(store, name: str, expression: str, values: dict, condition: str | None = None,
            names: dict | None = None) -> bool:
    kwargs = {"Key": {PK: product_pk(name), SK: "PRODUCT"}, "UpdateExpression": expression,
              "ExpressionAttributeValues": to_dynamo(values)}
    if condition:
        kwargs["ConditionExpression"] = condition
    if names:
        kwargs["ExpressionAttributeNames"] = names
    try:
        store.table.update_item(**kwargs)
    except store.table.meta.client.exceptions.ConditionalCheckFailedException:
        return False
    return True


def update_granule(store, name: str, dataset_id: str, **fields) -> None:
    names = {f"#f{i}": k for i, k in enumerate(fields)}
    values = {f":v{i}": to_dynamo(v) for i, v in enumerate(fields.values())}
    store.table.update_item(Key={PK: product_pk(name), SK: f"GRANULE#{dataset_id}"},
                            UpdateExpression="SET " + ", ".join(f"#f{i} = :v{i}" for i in range(len(fields))),
                            ExpressionAttributeNames=names, ExpressionAttributeValues=values)


def _history_entry(decision: dict | None, event: str, by: str, reason: str) -> dict:
    return {"at": now(), "event": event, "by": by, "reason": reason,
            "variant": (decision or {}).get("variant")}


def set_decision(store, name: str, decision: dict, *, event: str, by: str, reason: str,
                 round_: int | None = None) -> bool:
    """Record ``decision`` as the product's (state decided). With ``round_``, only if the product is still
    studying that round (the automatic decision: a person's override or a later round wins)."""
    product = require_product(store, name)
    history = (list(product.get("history") or []) + [_history_entry(decision, event, by, reason)])[-HISTORY_KEEP:]
    condition, values = None, {":d": decision, ":h": history, ":state": DECIDED}
    if round_ is not None:
        condition = "#s = :studying AND study_round = :round"
        values.update({":studying": STUDYING, ":round": round_})
    return _update(store, name, "SET decision = :d, history = :h, #s = :state", values, condition,
                   names={"#s": "state"})


def mark_for_study(store, name: str, reason: str, *, by: str) -> None:
    """Back to studying, in a new round (the next granules are studied; the last decision stays on the item
    and in the history until the new one replaces it)."""
    product = require_product(store, name)
    history = (list(product.get("history") or []) + [_history_entry(product.get("decision"), "new study", by,
                                                                    reason)])[-HISTORY_KEEP:]
    _update(store, name, "SET #s = :studying, study_round = study_round + :one, study_slots = :zero, "
                         "studying = :empty, studied = :empty, history = :h, restudy_reason = :why",
            {":studying": STUDYING, ":one": 1, ":zero": 0, ":empty": [], ":h": history, ":why": reason},
            condition="#s <> :studying", names={"#s": "state"})


def record_studied(store, name: str, dataset_id: str, round_: int) -> dict | None:
    """One study granule summarized; the product item after it (None when the round moved on)."""
    # (contains() on a list compares whole elements: the dataset id string; a repeated call counts once)
    try:
        store.table.update_item(
            Key={PK: product_pk(name), SK: "PRODUCT"},
            UpdateExpression="SET studied = list_append(studied, :me), study_count = study_count + :one",
            ConditionExpression="study_round = :round AND NOT contains(studied, :ds)",
            ExpressionAttributeValues={":me": [dataset_id], ":one": 1, ":round": round_, ":ds": dataset_id})
    except store.table.meta.client.exceptions.ConditionalCheckFailedException:
        pass
    return get_product(store, name)


def release_study_slot(store, name: str, dataset_id: str, round_: int, reason: str) -> None:
    """A study granule failed: its slot is free for the next granule (the study would otherwise wait forever)."""
    product = require_product(store, name)
    studying = [d for d in (product.get("studying") or []) if d != dataset_id]
    if len(studying) == len(product.get("studying") or []):
        return
    _update(store, name, "SET studying = :s, study_slots = study_slots - :one, failed_granules = failed_granules + :one",
            {":s": studying, ":one": 1, ":round": round_, ":studying": STUDYING},
            condition="study_round = :round AND #s = :studying", names={"#s": "state"})


def add_output(store, name: str, *, bytes_out: int, convert_s: float, production: bool) -> None:
    """Bytes written and conversion seconds of one granule; the first production granule moves a decided
    product to ``production``."""
    _update(store, name, "SET bytes_out = bytes_out + :b, convert_s = convert_s + :s",
            {":b": int(bytes_out), ":s": float(convert_s)})
    if production:
        _update(store, name, "SET #s = :production", {":production": PRODUCTION, ":decided": DECIDED},
                condition="#s = :decided", names={"#s": "state"})
