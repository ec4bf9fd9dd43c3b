"""The convert step: produce one variant (or one rechunk work unit) and record it.

How a variant is made is its kind's (``layoutlab/kinds/``, one module each); this module runs
the task's phase and records the outcome. A variant appears at its final key only when complete.
HDF5 goes straight to its final key in one upload: a multipart upload (above
``kinds._transfer.PUBLISH_PART_BYTES``) becomes an object only when CompleteMultipartUpload
succeeds, a single PUT only when its last byte has arrived; a failed upload is aborted, leaving
nothing at the key. (No temporary key and CopyObject: one CopyObject copies at most 5 GiB, and
variants of big granules are larger.) Zarr writes its metadata last (the rechunker's
``finalize``). The source is read-only: it is downloaded to local scratch space (Lambda's /tmp,
a Fargate task's disk) and never written.
"""

from __future__ import annotations

import time

from layoutlab import kinds, settings
from layoutlab.ceilings import Ceilings
from layoutlab.errors import OUTSIDE_OPEN_FAILED, BadInputFile
from layoutlab.pipeline.payloads import ConvertTask
from layoutlab.storage import S3Location


def _prefix_size(s3, bucket: str, prefix: str) -> int:
    total = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        total += sum(o["Size"] for o in page.get("Contents", []))
    return total


def _peak_rss_mb() -> float:
    from layoutlab.bench.isolation import peak_rss_mb

    return peak_rss_mb()


def convert_variant(task: ConvertTask, *, s3, store, memory_mb: int | None = None,
                    ceilings: Ceilings | None = None) -> dict:
    """Run one convert task (phase whole, unit or publish); returns what was done. ``ceilings``: what a
    rechunk may write (objects, declared bytes), checked before it writes; the defaults when None."""
    ceilings = ceilings or Ceilings()
    spec, kind = task.variant, kinds.get(task.kind)
    started = time.perf_counter()
    if task.phase == "unit":
        if kind.reads_in_worker:
            done, isolation = in_worker(kind.run_work_unit, spec, task.work_unit, name=task.upload_url)
            done = {**done, "isolation": isolation}
        else:
            done = kind.run_work_unit(spec, task.work_unit)
        store.record_unit_work(task.dataset_id, task.name, task.work_unit, done["seconds"], done["bytes"],
                               skipped=bool(done.get("skipped")))
        return done
    if task.phase == "publish":
        kind.publish_work_units(spec)
        # the work units' own times (summed over parallel tasks) are the conversion's compute time
        detail = store.unit_work(task.dataset_id, task.name)
    else:
        try:
            detail = _convert_whole(task, s3, memory_mb, ceilings)
        except BadInputFile as error:  # this variant fails (named by the upload's key); the others go on
            _remove_partial_output(s3, task)
            return _record_failure(store, task, _named_by_upload(error, task), started)
        except BaseException:  # our fault or the platform's (the state machine retries or records it): no half variant
            _remove_partial_output(s3, task)
            raise
        if detail.get("status") == "SKIPPED":  # "auto" found paging of no use here: recorded, not failed
            return _record_skipped(store, task, detail, started)
    done = _record_ready(task, s3, store, detail, started)
    for sub in task.derived():  # references over the variant just published
        sub_started = time.perf_counter()
        try:
            _record_ready(sub, s3, store, _convert_whole(sub, s3, memory_mb, ceilings), sub_started)
        except BadInputFile as error:
            _record_failure(store, sub, str(error), sub_started)
    return done


def _convert_whole(task: ConvertTask, s3, memory_mb: int | None, ceilings: Ceilings) -> dict:
    """The variant made by its kind, from the upload, or (references built in the same task) from the variant
    just published."""
    source = task.source
    if task.over_uri:
        over = S3Location.parse(task.over_uri)
        source = {"bucket": over.bucket, "key": over.key}
    kind = kinds.get(task.kind)
    context = kinds.ConvertContext(memory_mb=memory_mb, ceilings=ceilings)
    if not kind.reads_in_worker:
        return kind.convert(task.variant, source, s3, context)
    detail, isolation = in_worker(_convert_with_own_client, kind.convert, task.variant, source, _client_spec(s3),
                                  context, task.upload_url, name=task.upload_url)
    return {**detail, "isolation": isolation}


def in_worker(fn, *args, name: str, **kwargs) -> tuple:
    """(``fn(*args, **kwargs)``, what isolation held) run in a forked worker that restricts itself, before it
    reads anything of the upload, to a scratch folder of its own and the runtime (layoutlab/sandbox.py:
    Landlock where the kernel has it): whatever the file points at (external storage, a virtual dataset's
    sources, an external link), the kernel refuses the worker every other file, ``/proc`` included. The
    worker downloads and writes in its scratch folder and talks to S3 over TCP, which is not restricted.

    No stall watch (as before, in the task's process): a rechunk may compress for long between writes, and
    its network I/O is not counted in ``/proc/<pid>/io``. A ``BadInputFile`` of the worker is raised here.
    """
    import tempfile

    from layoutlab.guard import start_guarded

    with tempfile.TemporaryDirectory(prefix="layoutlab-worker-") as scratch:
        call = start_guarded(fn, *args, path=name, stall_seconds=float("inf"), confine=([], [scratch]), **kwargs)
        value = call.result()
    return value, call.isolation.to_dict() if call.isolation is not None else None


def _client_spec(s3) -> dict:
    """What makes a new S3 client like ``s3`` in a worker: a fork must not share the parent's pooled
    connections (a request of the child's left half-read would answer the parent's next one)."""
    credentials = s3._request_signer._credentials
    frozen = credentials.get_frozen_credentials() if credentials is not None else None
    return {"endpoint_url": s3.meta.endpoint_url, "region_name": s3.meta.region_name, "config": s3.meta.config,
            **({"aws_access_key_id": frozen.access_key, "aws_secret_access_key": frozen.secret_key,
                "aws_session_token": frozen.token} if frozen is not None else {})}


def _convert_with_own_client(convert, spec: dict, source: dict, client_spec: dict, context, upload: str) -> dict:
    import boto3

    try:
        return convert(spec, source, boto3.session.Session().client("s3", **client_spec), context)
    except OSError as error:
        said = str(error)
        if not any(text in said for text in OUTSIDE_OPEN_FAILED):
            raise
        raise BadInputFile(upload, "a dataset's values lie in a file outside the upload, which this worker may "
                                   f"not open (HDF5: {said.splitlines()[0][:200]})") from None


def _named_by_upload(error: BadInputFile, task: ConvertTask) -> str:
    """The error's text with the scratch copy's path replaced by the upload's S3 location (the user's name)."""
    if error.path.startswith("s3://"):
        return str(error)
    return f"{task.upload_url}: {error.reason}"


def _remove_partial_output(s3, task: ConvertTask) -> None:
    """Delete what a failed conversion wrote under the variant's location (a Zarr/Icechunk prefix, or the key)."""
    target = S3Location.parse(task.uri)
    prefix = target.key + ("" if kinds.get(task.kind).one_object else "/")
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=target.bucket, Prefix=prefix):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])
                    if prefix.endswith("/") or o["Key"] == target.key]  # (an HDF5 variant: its key only)
            if keys:
                s3.delete_objects(Bucket=target.bucket, Delete={"Objects": keys, "Quiet": True})
    except Exception as error:  # the conversion's own error is the one to report; say that cleanup failed too
        import logging

        logging.getLogger(__name__).warning("could not remove the partial output under %s: %s", task.uri, error)


def _record_failure(store, task: ConvertTask, reason: str, started: float) -> dict:
    """A FAILURE item and a FAILURE variant record for one variant; the run and other variants go on."""
    store.put_failure(task.dataset_id, "convert", task.name, reason, variant=task.name, variant_kind=task.kind)
    store.put_variant(task.dataset_id, task.name, uri=task.uri, format=task.variant["format"],
                      variant_kind=task.kind, status="FAILURE", reason=reason,
                      convert_s=time.perf_counter() - started, spec=task.variant)
    return {"variant": task.name, "status": "FAILURE", "reason": reason}


def _record_skipped(store, task: ConvertTask, detail: dict, started: float) -> dict:
    """A SKIPPED variant record: paging chosen "auto" that cannot help this file within its size budget.

    Not a failure (no FAILURE item; the run's other variants and the file's results stand): the
    record says why, in ``reason`` and ``page_size_choice``. References planned over the variant
    are recorded SKIPPED too, naming it.
    """
    reason = f"paging skipped: {detail['page_size_choice']}"
    store.put_variant(task.dataset_id, task.name, uri=task.uri, format=task.variant["format"],
                      variant_kind=task.kind, status="SKIPPED", reason=reason,
                      convert_s=time.perf_counter() - started, spec=task.variant,
                      **{k: v for k, v in detail.items() if k != "status"})
    for sub in task.derived():
        store.put_variant(sub.dataset_id, sub.name, uri=sub.uri, format=sub.variant["format"],
                          variant_kind=sub.kind, status="SKIPPED", spec=sub.variant,
                          reason=f"references over {task.name}, which was not made: {reason}")
    return {"variant": task.name, "status": "SKIPPED", "reason": reason}


def _record_ready(task: ConvertTask, s3, store, detail: dict, started: float) -> dict:
    from layoutlab.convert.page_budget import DEFAULT_BUDGET, parse_budget

    spec = task.variant
    target = S3Location.parse(task.uri)
    kind = kinds.get(task.kind)
    size = _prefix_size(s3, target.bucket, target.key + ("" if kind.one_object else "/"))
    source_size = int(task.source.get("size") or 0)
    overhead = (size / source_size - 1) if source_size else None
    budget = parse_budget(detail.get("size_budget", spec.get("size_budget", DEFAULT_BUDGET)))
    if isinstance(detail.get("page_size"), int):  # the page size made, "auto" resolved (the recipe reads the spec)
        spec = {**spec, "page_size": detail["page_size"],
                **({"page_size_requested": spec["page_size"]} if spec.get("page_size") != detail["page_size"] else {})}
    item = {
        "uri": task.uri, "format": spec["format"], "variant_kind": task.kind, "status": "READY",
        "size_bytes": size, "source_bytes": source_size,
        "size_overhead": overhead, "size_budget": budget,
        # (references are judged by the report with the object they point at, not here)
        **({"within_budget": overhead <= budget} if overhead is not None and not kind.virtual else {}),
        # for a fanned-out rechunk: the units' summed seconds plus the publish step's own
        "convert_s": time.perf_counter() - started + float(detail.get("units_seconds") or 0.0),
        "peak_rss_mb": _peak_rss_mb(),
        "platform": settings.value("LAYOUTLAB_PLATFORM") or "local", "spec": spec, **detail,
    }
    lacks = variables_left_out(detail)
    if lacks:  # (a READY variant never lacks a variable without its record, and the report, saying so)
        item["lacks"] = lacks
    store.put_variant(task.dataset_id, task.name, **item)
    return {"variant": task.name, "size_bytes": size, "convert_s": item["convert_s"]}


def variables_left_out(detail: dict) -> list[str]:
    """``"path: reason"`` for each variable of the upload the converter left out of the variant (a type Zarr
    cannot hold, values outside the file...), from what the kind returned (``rechunk`` / ``icechunk``)."""
    lacks = []
    for part in detail.values():
        if isinstance(part, dict):
            lacks += [f"{s['variable']}: {s['reason']}" for s in part.get("skipped") or []
                      if isinstance(s, dict) and s.get("variable") and "attribute" not in s]
    return lacks
