"""The convert step: produce one variant (or one rechunk work unit) and record it.

A variant appears at its final key only when complete. HDF5 goes straight to
its final key in one upload: a multipart upload (above ``PUBLISH_PART_BYTES``)
becomes an object only when CompleteMultipartUpload succeeds, a single PUT only
when its last byte has arrived; a failed upload is aborted, leaving nothing at
the key. (No temporary key and CopyObject: one CopyObject copies at most 5 GiB,
and variants of big granules are larger.) Zarr writes its metadata last (the
rechunker's ``finalize``). The source is read-only: it is downloaded to local
scratch space (Lambda's /tmp, a Fargate task's disk) and never written.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from layoutlab import settings
from layoutlab.ceilings import Ceilings
from layoutlab.errors import BadInputFile
from layoutlab.storage import S3Location

# Leave room for the interpreter and libraries under the platform's memory limit.
RECHUNK_MEMORY_SHARE = 0.5

# Publishing a paged HDF5 variant: parts of 64 MiB, 8 in flight. s3transfer opens each part
# of the file when it sends it rather than loading parts into memory (1 GiB published this way
# to a local moto server raised the uploader's peak RSS by 24 MiB), and raises the part size
# by itself when a file would need more than S3's 10,000 parts (above 625 GiB here).
PUBLISH_PART_BYTES = 64 * 2**20
PUBLISH_THREADS = 8


def _download(s3, source: dict, directory: str) -> Path:
    path = Path(directory) / (Path(source["key"]).name or "source")
    extra = {"VersionId": source["version_id"]} if source.get("version_id") else None
    try:
        s3.download_file(source["bucket"], source["key"], str(path), ExtraArgs=extra)
    except Exception as error:  # botocore raises several types here; name the object either way
        raise BadInputFile(f"s3://{source['bucket']}/{source['key']}", f"cannot be downloaded: {error}") from None
    return path


def _prefix_size(s3, bucket: str, prefix: str) -> int:
    total = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        total += sum(o["Size"] for o in page.get("Contents", []))
    return total


def _peak_rss_mb() -> float:
    from layoutlab.bench.isolation import peak_rss_mb

    return peak_rss_mb()


def convert_variant(task: dict, *, s3, store, memory_mb: int | None = None, ceilings: Ceilings | None = None) -> dict:
    """Run one convert task (phase whole, unit or publish); returns what was done. ``ceilings``: what a
    rechunk may write (objects, declared bytes), checked before it writes; the defaults when None."""
    ceilings = ceilings or Ceilings()
    phase = task.get("phase", "whole")
    spec = task["variant"]
    dataset_id = task["dataset_id"]
    started = time.perf_counter()
    if phase == "unit":
        from layoutlab.convert.rechunk_zarr import load_plan, run_unit

        done = run_unit(load_plan(spec["uri"]), int(task["work_unit"]["k"]))
        store.record_unit_work(dataset_id, spec["name"], int(task["work_unit"]["k"]), done["seconds"], done["bytes"],
                               skipped=bool(done.get("skipped")))
        return done
    if phase == "publish":
        from layoutlab.convert.rechunk_zarr import finalize, load_plan

        finalize(load_plan(spec["uri"]))
        # the work units' own times (summed over parallel tasks) are the conversion's compute time
        detail = store.unit_work(dataset_id, spec["name"])
    else:
        try:
            detail = _convert_whole(task, s3, memory_mb, ceilings)
        except BadInputFile as error:  # this variant fails (named by the upload's key); the others go on
            _remove_partial_output(s3, spec)
            return _record_failure(store, task, _named_by_upload(error, task), started)
        except BaseException:  # our fault or the platform's (the state machine retries or records it): no half variant
            _remove_partial_output(s3, spec)
            raise
        if detail.get("status") == "SKIPPED":  # "auto" found paging of no use here: recorded, not failed
            return _record_skipped(store, task, detail, started)
    done = _record_ready(task, s3, store, detail, started)
    for derived in spec.get("derived") or ():  # references over the variant just published
        sub = {**task, "variant": derived, "over_uri": spec["uri"]}
        sub_started = time.perf_counter()
        try:
            _record_ready(sub, s3, store, _virtual(sub, s3), sub_started)
        except BadInputFile as error:
            _record_failure(store, sub, str(error), sub_started)
    return done


def _convert_whole(task: dict, s3, memory_mb: int | None, ceilings: Ceilings) -> dict:
    spec = task["variant"]
    if spec["kind"] in VIRTUAL_KINDS:
        return _virtual(task, s3)
    if spec["kind"] == "icechunk":
        return _icechunk_native(task, s3, memory_mb, ceilings)
    if spec["format"] == "hdf5":
        return _repack(task, s3)
    return _rechunk(task, s3, memory_mb, ceilings)


def _named_by_upload(error: BadInputFile, task: dict) -> str:
    """The error's text with the scratch copy's path replaced by the upload's S3 location (the user's name)."""
    source = task["source"]
    upload = f"s3://{source['bucket']}/{source['key']}"
    if error.path.startswith("s3://"):
        return str(error)
    return f"{upload}: {error.reason}"


def _remove_partial_output(s3, spec: dict) -> None:
    """Delete what a failed conversion wrote under the variant's location (a Zarr/Icechunk prefix, or the key)."""
    target = S3Location.parse(spec["uri"])
    prefix = target.key + ("/" if spec["format"] in ("zarr", "icechunk") else "")
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=target.bucket, Prefix=prefix):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])
                    if prefix.endswith("/") or o["Key"] == target.key]  # (an HDF5 variant: its key only)
            if keys:
                s3.delete_objects(Bucket=target.bucket, Delete={"Objects": keys, "Quiet": True})
    except Exception as error:  # the conversion's own error is the one to report; say that cleanup failed too
        import logging

        logging.getLogger(__name__).warning("could not remove the partial output under %s: %s", spec["uri"], error)


# Variant kinds that reference the original (or a paged variant) instead of copying its chunks.
VIRTUAL_KINDS = ("virtual-kerchunk", "icechunk-virtual")


def _record_failure(store, task: dict, reason: str, started: float) -> dict:
    """A FAILURE item and a FAILURE variant record for one variant; the run and other variants go on."""
    spec = task["variant"]
    store.put_failure(task["dataset_id"], "convert", spec["name"], reason, variant=spec["name"],
                      variant_kind=spec["kind"])
    store.put_variant(task["dataset_id"], spec["name"], uri=spec["uri"], format=spec["format"],
                      variant_kind=spec["kind"], status="FAILURE", reason=reason,
                      convert_s=time.perf_counter() - started, spec=spec)
    return {"variant": spec["name"], "status": "FAILURE", "reason": reason}


def _record_skipped(store, task: dict, detail: dict, started: float) -> dict:
    """A SKIPPED variant record: paging chosen "auto" that cannot help this file within its size budget.

    Not a failure (no FAILURE item; the run's other variants and the file's results stand): the
    record says why, in ``reason`` and ``page_size_choice``. References planned over the variant
    are recorded SKIPPED too, naming it.
    """
    spec = task["variant"]
    reason = f"paging skipped: {detail['page_size_choice']}"
    store.put_variant(task["dataset_id"], spec["name"], uri=spec["uri"], format=spec["format"],
                      variant_kind=spec["kind"], status="SKIPPED", reason=reason,
                      convert_s=time.perf_counter() - started, spec=spec,
                      **{k: v for k, v in detail.items() if k != "status"})
    for derived in spec.get("derived") or ():
        store.put_variant(task["dataset_id"], derived["name"], uri=derived["uri"], format=derived["format"],
                          variant_kind=derived["kind"], status="SKIPPED", spec=derived,
                          reason=f"references over {spec['name']}, which was not made: {reason}")
    return {"variant": spec["name"], "status": "SKIPPED", "reason": reason}


def _record_ready(task: dict, s3, store, detail: dict, started: float) -> dict:
    from layoutlab.convert.page_budget import DEFAULT_BUDGET, parse_budget

    spec = task["variant"]
    dataset_id = task["dataset_id"]
    target = S3Location.parse(spec["uri"])
    size = _prefix_size(s3, target.bucket, target.key + ("/" if spec["format"] in ("zarr", "icechunk") else ""))
    source_size = int(task["source"].get("size") or 0)
    overhead = (size / source_size - 1) if source_size else None
    budget = parse_budget(detail.get("size_budget", spec.get("size_budget", DEFAULT_BUDGET)))
    if isinstance(detail.get("page_size"), int):  # the page size made, "auto" resolved (the recipe reads the spec)
        spec = {**spec, "page_size": detail["page_size"],
                **({"page_size_requested": spec["page_size"]} if spec.get("page_size") != detail["page_size"] else {})}
    item = {
        "uri": spec["uri"], "format": spec["format"], "variant_kind": spec["kind"], "status": "READY",
        "size_bytes": size, "source_bytes": source_size,
        "size_overhead": overhead, "size_budget": budget,
        # (references are judged by the report with the object they point at, not here)
        **({"within_budget": overhead <= budget} if overhead is not None and spec["kind"] not in VIRTUAL_KINDS
           else {}),
        # for a fanned-out rechunk: the units' summed seconds plus the publish step's own
        "convert_s": time.perf_counter() - started + float(detail.get("units_seconds") or 0.0),
        "peak_rss_mb": _peak_rss_mb(),
        "platform": settings.value("LAYOUTLAB_PLATFORM") or "local", "spec": spec, **detail,
    }
    store.put_variant(dataset_id, spec["name"], **item)
    return {"variant": spec["name"], "size_bytes": size, "convert_s": item["convert_s"]}


def _virtual(task: dict, s3) -> dict:
    """References over the original (or over the paged variant ``over_uri``): kerchunk JSON or Icechunk virtual.

    The file is read from local scratch (its metadata and, for inlined variables, their values);
    the references name the object in S3 (the original pinned to its version in kerchunk's URLs,
    to its ETag in Icechunk's checksums). No chunk data is copied.
    """
    from layoutlab import storage
    from layoutlab.convert import virtual

    spec = task["variant"]
    if task.get("over_uri"):
        over = S3Location.parse(task["over_uri"])
        source = {"bucket": over.bucket, "key": over.key}
    else:
        source = task["source"]
    head = s3.head_object(Bucket=source["bucket"], Key=source["key"],
                          **({"VersionId": source["version_id"]} if source.get("version_id") else {}))
    url = storage.versioned_url(source["bucket"], source["key"], source.get("version_id"))
    with tempfile.TemporaryDirectory(prefix="layoutlab-virtual-") as scratch:
        local = _download(s3, source, scratch)
        started = time.perf_counter()
        layout = virtual.build_layout(str(local), url)
        parse_s = time.perf_counter() - started
        if spec["kind"] == "virtual-kerchunk":
            written = {"references": spec.get("references", "json"),
                       "references_bytes": virtual.write_kerchunk(layout, spec["uri"], s3)}
        else:
            written = virtual.write_icechunk_virtual(layout, spec["uri"], head.get("ETag"))
    return {"virtual": {**layout.record(), **written, "parse_s": parse_s, "over": url,
                        "source_etag": head.get("ETag"), "source_version_id": source.get("version_id")}}


def _icechunk_native(task: dict, s3, memory_mb: int | None, ceilings: Ceilings) -> dict:
    from layoutlab.convert.icechunk_store import write_icechunk_native

    spec = task["variant"]
    max_mem = int(memory_mb * 2**20 * RECHUNK_MEMORY_SHARE) if memory_mb else 256 * 2**20
    with tempfile.TemporaryDirectory(prefix="layoutlab-convert-") as scratch:
        source = _download(s3, task["source"], scratch)
        written = write_icechunk_native(str(source), spec["uri"], spec["chunks"], spec.get("shards"), max_mem,
                                        ceilings=ceilings)
    return {"icechunk": written}


def _repack(task: dict, s3) -> dict:
    """The paged copy, and how its page size was chosen: ``page_size`` "auto" is chosen here from the
    downloaded file within ``size_budget`` (convert/page_budget.py), or paging is skipped (status
    SKIPPED, nothing published); an explicit page size is the plan's."""
    from layoutlab.convert.page_budget import DEFAULT_BUDGET, choose_page_size, is_auto, parse_budget
    from layoutlab.convert.repack import repack
    from layoutlab.convert.repack_common import CopyDiffers
    from layoutlab.errors import BadInputFile, UserError
    from layoutlab.guard import run_guarded

    spec = task["variant"]
    target = S3Location.parse(spec["uri"])
    budget = parse_budget(spec.get("size_budget", DEFAULT_BUDGET))
    page_size = spec.get("page_size", 8 * 2**20)
    with tempfile.TemporaryDirectory(prefix="layoutlab-convert-") as scratch:
        source = _download(s3, task["source"], scratch)
        out = Path(scratch) / "variant.h5"
        # guarded: a damaged file that makes libhdf5 spin is stopped in a minute, not at the task's timeout
        original = f"s3://{task['source']['bucket']}/{task['source']['key']}"
        if is_auto(page_size):
            try:
                choice = run_guarded(choose_page_size, source, budget, path=original,
                                     target_chunk_bytes=spec.get("target_chunk_bytes"))
            except BadInputFile as error:  # (it names the scratch copy: name the upload)
                raise BadInputFile(original, error.reason) from None
            if choice.skip:
                return {"status": "SKIPPED", **choice.record()}
            page_size, paging = choice.page_size, choice.record()
        else:
            paging = {"page_size": int(page_size), "page_size_choice": "set by the plan", "size_budget": budget}
        try:
            summary = run_guarded(repack, source, out, path=original, page_size=page_size, without_credentials=True,
                                  target_chunk_bytes=spec.get("target_chunk_bytes"), verify=True)
        except CopyDiffers:
            raise  # (our copier's fault, never the input's: the state machine records it)
        except UserError as error:  # repack refuses the file (data outside it, damage...): named by the upload
            raise BadInputFile(original, str(error).replace(f"{source}: ", "").replace(str(source), original)) \
                from None
        _publish(s3, out, target)
    result = summary.to_dict()
    # Lists of dataset names can run to thousands (ATL03): keep counts, DynamoDB items are capped at 400 KB.
    # The notes stay text: a line or two, e.g. why the native engine left the copy to the Python engine.
    return {"repack": {k: (len(v) if isinstance(v, (list, dict)) and k != "notes" else v)
                       for k, v in result.items() if k not in ("input", "output")}, **paging}


def _publish(s3, path: Path, target: S3Location) -> None:
    """Upload ``path`` straight to its final key; readers see all of it or nothing.

    boto3's managed transfer: a multipart upload above ``PUBLISH_PART_BYTES`` (S3 makes
    the object visible only at CompleteMultipartUpload), aborted by s3transfer when any
    part fails; S3UploadFailedError then reaches the caller (the state machine's retry).
    A process killed mid-upload cannot abort: the outputs bucket's lifecycle rule
    (AbortIncompleteMultipartUpload, cdk data stack) removes its parts. The classic
    transfer client, always: boto3 may pick the CRT one where awscrt is installed, and
    the abort-on-failure tested here is the classic client's.
    """
    from boto3.s3.transfer import TransferConfig

    config = TransferConfig(multipart_threshold=PUBLISH_PART_BYTES, multipart_chunksize=PUBLISH_PART_BYTES,
                            max_concurrency=PUBLISH_THREADS, preferred_transfer_client="classic")
    s3.upload_file(str(path), target.bucket, target.key, Config=config)


def _rechunk(task: dict, s3, memory_mb: int | None, ceilings: Ceilings) -> dict:
    from layoutlab.convert.rechunk_zarr import rechunk
    from layoutlab.pipeline.planning import rechunk_options

    spec = task["variant"]
    max_mem = int(memory_mb * 2**20 * RECHUNK_MEMORY_SHARE) if memory_mb else None
    with tempfile.TemporaryDirectory(prefix="layoutlab-convert-") as scratch:
        source = _download(s3, task["source"], scratch)
        summary = rechunk(str(source), spec["uri"], progress=False, ceilings=ceilings,
                          **rechunk_options(spec, max_mem))
    return {"rechunk": {k: v for k, v in summary.items() if k != "destination"}}
