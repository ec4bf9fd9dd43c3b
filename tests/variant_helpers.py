"""What the tests of a paged-HDF5 variant made and published by the pipeline share: the buckets and
results table it writes to, the variant's spec, an upload to convert, and the S3 calls it sends.

Imported as ``variant_helpers`` (pytest puts tests/ on the path: pyproject's ``pythonpath``).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from layoutlab.results.store import ResultsStore

PAGED_SPEC = {"name": "paged-1MiB", "kind": "repack-paged", "format": "hdf5", "page_size": 2**20,
              "uri": "s3://outputs/variants/ds/paged-1MiB.h5"}
PAGED_KEY = "variants/ds/paged-1MiB.h5"  # where PAGED_SPEC's variant is published, in the outputs bucket


def pipeline_buckets_and_table(s3, table: str = "results-test") -> ResultsStore:
    """The ``ingest`` and ``outputs`` buckets and the results table, in whatever S3 and DynamoDB ``s3`` and the
    environment point at (moto in-process or the local cloud)."""
    for bucket in ("ingest", "outputs"):
        s3.create_bucket(Bucket=bucket)
    store = ResultsStore(table)
    store.create_table()
    return store


@contextmanager
def pipeline_cloud():
    """moto in-process with the pipeline's buckets and results table: (s3 client, ResultsStore)."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        yield s3, pipeline_buckets_and_table(s3)


def uploaded_variant_task(s3, source: Path, spec: dict = PAGED_SPEC):
    """Upload ``source`` to ``ingest/incoming/NAME`` and return the convert task that makes ``spec`` of it
    (a ``payloads.ConvertTask``, as the convert handler parses its event)."""
    from layoutlab.pipeline.payloads import ConvertTask

    key = f"incoming/{source.name}"
    s3.upload_file(str(source), "ingest", key)
    return ConvertTask.from_event({"dataset_id": "ds", "source": {"bucket": "ingest", "key": key,
                                                                  "size": source.stat().st_size}, "variant": spec})


def record_s3_calls(s3) -> list[str]:
    """The S3 operations the client sends from now on, in order (a list that grows as it sends them)."""
    calls: list[str] = []
    s3.meta.events.register("before-call.s3.*", lambda model, **_: calls.append(model.name))
    return calls
