"""Backfill: convert every granule already in an archive (a bucket prefix) with a decided product's layout.

The state machine (``stepfunctions/backfill.asl.json``) is one Distributed Map: in AWS its ItemReader lists
the prefix itself (``s3:listObjectsV2``, every page) and batches small granules (ItemBatcher); each child
execution gets ``{"Items": [<listed objects>], "BatchInput": {"product", "bucket", ...}}`` and calls
``convert_batch``. moto's interpreter reads one listing page and has no ItemBatcher, so locally the CLI
writes the listing as pages of JSON items (``write_item_pages``, one page in memory at a time) and the
same Map reads each page with ``s3:getObject`` (page after page: a Choice loop in the same file), each item
of a page one batch of up to ``batch_items`` listed objects, as ItemBatcher would have made it.

Each granule is converted as a production granule of its product (``flow.plan_production``: the variant
resolved for it, written under ``products/<product>/<dataset_id>/``, verified and published by its kind,
metadata last), counted on the PRODUCT item; a failed granule gets its GRANULE and FAILURE items with the
reason, and the batch fails after the others were done, so Step Functions counts it towards the tolerated
failure percentage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from layoutlab.errors import UserError
from layoutlab.products import state

PAGE_ITEMS = 1000  # items per page of the local item list (the size of one listObjectsV2 page)
RUNS_PREFIX = "runs/backfill/"


class BackfillFailed(Exception):
    """Some granules of a batch failed (each recorded with its reason); the Map counts the batch as failed."""


@dataclass(frozen=True)
class BackfillInput:
    product: str
    bucket: str
    prefix: str

    @classmethod
    def from_batch(cls, event: dict) -> tuple["BackfillInput", list[dict]]:
        if not isinstance(event, dict) or not isinstance(event.get("BatchInput"), dict) \
                or not isinstance(event.get("Items"), list):
            raise UserError("backfill batch: expected {'Items': [...], 'BatchInput': {'product', 'bucket', 'prefix'}}, "
                            f"got {sorted(event) if isinstance(event, dict) else type(event).__name__}")
        given = event["BatchInput"]
        missing = [k for k in ("product", "bucket", "prefix") if not isinstance(given.get(k), str)]
        if missing:
            raise UserError(f"backfill batch: BatchInput lacks {', '.join(missing)}")
        return cls(given["product"], given["bucket"], given["prefix"]), event["Items"]


def listed_objects(s3, bucket: str, prefix: str, page_items: int = PAGE_ITEMS):
    """Pages of listed objects under ``prefix`` (``Key``, ``Size``, ``ETag``), folders and empty objects left out."""
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": page_items}):
        items = [{"Key": o["Key"], "Size": o["Size"], "Etag": o.get("ETag", "")}
                 for o in page.get("Contents", []) if not o["Key"].endswith("/") and o["Size"] > 0]
        if items:
            yield items


def write_item_pages(s3, outputs_bucket: str, backfill_id: str, bucket: str, prefix: str,
                     page_items: int = PAGE_ITEMS, batch_items: int = 1) -> dict:
    """The local item list: ``runs/backfill/<id>/items-<n>.json`` (n from 1), one listing page at a time, each
    page a JSON list of batches (lists of up to ``batch_items`` listed objects): the Map's children get a batch
    each, as ItemBatcher gives them in AWS, so one task converts several small granules."""
    if batch_items < 1:
        raise UserError(f"backfill: a batch holds at least one granule, not {batch_items}")
    pages = items = batches = 0
    for page in listed_objects(s3, bucket, prefix, page_items):
        pages += 1
        items += len(page)
        page_batches = [page[i:i + batch_items] for i in range(0, len(page), batch_items)]
        batches += len(page_batches)
        s3.put_object(Bucket=outputs_bucket, Key=page_key(backfill_id, pages), Body=json.dumps(page_batches).encode(),
                      ContentType="application/json")
    return {"pages": pages, "items": items, "batches": batches, "key_prefix": f"{RUNS_PREFIX}{backfill_id}/"}


def page_key(backfill_id: str, page: int) -> str:
    return f"{RUNS_PREFIX}{backfill_id}/items-{page}.json"


def convert_batch(event: dict, *, s3, store, settings) -> dict:
    """Convert each listed granule of the batch as a production granule of the product; per-item outcomes.
    Raises BackfillFailed naming the failed keys once every item was tried."""
    job, items = BackfillInput.from_batch(event)
    outcomes = [convert_item(job, item, s3=s3, store=store, settings=settings) for item in items]
    failed = [o for o in outcomes if o["status"] != "CONVERTED"]
    if failed:
        raise BackfillFailed(f"{len(failed)} of {len(outcomes)} granules failed: "
                             + "; ".join(f"s3://{job.bucket}/{o['key']}: {o['reason']}" for o in failed[:5]))
    return {"product": job.product, "converted": len(outcomes), "outcomes": outcomes}


def convert_item(job: BackfillInput, item: dict, *, s3, store, settings) -> dict:
    from layoutlab.errors import BadInputFile
    from layoutlab.pipeline import identity
    from layoutlab.pipeline.events import ObjectRef
    from layoutlab.pipeline.payloads import ConvertTask, ExecutionInput
    from layoutlab.pipeline.variants import convert_variant
    from layoutlab.products import flow

    key, size = item["Key"], int(item.get("Size") or 0)
    ref = ObjectRef(bucket=job.bucket, key=key, etag=str(item.get("Etag") or item.get("ETag") or "").strip('"') or None,
                    size=size)
    dataset_id = identity.dataset_id(ref)
    try:
        product = state.require_product(store, job.product)
        plan = product.get("plan")
        source = {**ref.to_dict(), "url": ref.url}
        admission = state.admit(store, job.product, dataset_id, size=size, signature=None, named_by="uploader",
                                settings=state.ProductSettings.from_plan(plan), checks=False, study=False)
        store.put_run(dataset_id, status="RUNNING", source=source, product=job.product, product_role="production",
                      product_number=admission.number, study_round=int(admission.item["study_round"]),
                      backfill=True)
        if admission.again and (state.get_granule(store, job.product, dataset_id) or {}).get("status") == "CONVERTED":
            return {"key": key, "dataset_id": dataset_id, "status": "CONVERTED", "again": True}
        from layoutlab.pipeline import plan as plans

        execution = ExecutionInput(dataset_id=dataset_id, source=source,
                                   plan=plans.merge_plan(plan, ceilings=settings.ceilings, input_bytes=size or None))
        output = flow.plan_production(execution, admission, execution.plan, s3=s3, store=store, settings=settings)
        for task in output.convert_tasks:
            convert_variant(ConvertTask.from_event(task.to_event()), s3=s3, store=store, ceilings=settings.ceilings)
        done = flow.finish_production(dataset_id, store.items(dataset=dataset_id), store=store)
    except (UserError, BadInputFile, state.ProductError) as error:
        reason = str(error).splitlines()[0]
        store.put_failure(dataset_id, "convert", "backfill", f"{ref.url}: {reason}", source=ref.to_dict())
        if state.get_granule(store, job.product, dataset_id):
            state.update_granule(store, job.product, dataset_id, status="FAILED", reason=reason)
            state._update(store, job.product, "SET failed_granules = failed_granules + :one", {":one": 1})
        return {"key": key, "dataset_id": dataset_id, "status": "FAILED", "reason": reason}
    return {"key": key, "dataset_id": dataset_id, "status": done["status"], "reason": done.get("reason"),
            "size_bytes": done.get("size_bytes")}
