"""The backfill state machine on the local cloud (moto 5.2.5).

Two differences from AWS, both in how the Map gets its items, none in what a child does: moto's
interpreter has no ``ItemBatcher`` (its ASL grammar does not know the field), so the local definition
drops it from ``BackfillListing``; and its ``s3:listObjectsV2`` reader reads one page (≤ 1,000 keys), so a
local backfill starts with ``listing.source = "pages"``: the item list written page by page
(``products/backfill.write_item_pages``, each page's items already batches of ``batch`` granules), read by
``BackfillPage`` with ``s3:getObject``, page after page.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from layoutlab.local import dispatch
from layoutlab.local.pipeline import ROLE_ARN, local_definition

BACKFILL_ASL_PATH = Path(__file__).resolve().parents[3] / "stepfunctions" / "backfill.asl.json"


def local_backfill_definition(text: str | None = None) -> str:
    definition = json.loads(BACKFILL_ASL_PATH.read_text() if text is None else text)
    definition["States"]["BackfillListing"].pop("ItemBatcher", None)
    return local_definition(json.dumps(definition, indent=2))


def ensure_state_machine(sfn) -> str:
    definition = local_backfill_definition()
    try:
        sfn.create_state_machine(name=dispatch.BACKFILL_STATE_MACHINE, definition=definition, roleArn=ROLE_ARN)
    except sfn.exceptions.StateMachineAlreadyExists:
        sfn.update_state_machine(stateMachineArn=dispatch.backfill_state_machine_arn(), definition=definition)
    return dispatch.backfill_state_machine_arn()


def start_backfill(s3, sfn, bucket: str, prefix: str, product: str, *, page_items: int = 1000,
                   max_concurrency: int = 1, tolerated_failure_percentage: float = 10, batch: int = 1) -> dict:
    """Write the item list and start the backfill execution; ``{"execution_arn": None}`` when nothing is listed."""
    from layoutlab.products.backfill import write_item_pages

    backfill_id = f"{product}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    listing = write_item_pages(s3, dispatch.OUTPUTS_BUCKET, backfill_id, bucket, prefix, page_items, batch)
    started = {"backfill_id": backfill_id, **listing, "execution_arn": None}
    if not listing["items"]:
        return started
    arn = ensure_state_machine(sfn)
    execution = {"product": product, "bucket": bucket, "prefix": prefix, "max_concurrency": max_concurrency,
                 "tolerated_failure_percentage": tolerated_failure_percentage, "batch": {"max_items": batch},
                 "listing": {"source": "pages", "backfill_id": backfill_id, "pages": listing["pages"], "page": 1}}
    response = sfn.start_execution(stateMachineArn=arn, name=backfill_id[:80], input=json.dumps(execution))
    return {**started, "execution_arn": response["executionArn"]}


def wait(sfn, execution_arn: str, timeout: float = 3600) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        described = sfn.describe_execution(executionArn=execution_arn)
        if described["status"] != "RUNNING" or time.monotonic() > deadline:
            return described
        time.sleep(0.5)
