"""A paged-HDF5 variant is published straight to its final key (issue 14, item 3).

One CopyObject copies at most 5 GiB, so the old publish (upload to ``KEY.partial``, then
``copy_object`` into place) failed for the variants of big granules. The fake S3 here is
moto with that limit enforced at a scaled-down size (``COPY_LIMIT``), with S3's own error;
the multipart threshold is scaled down with it, so the multipart path really runs for a
variant larger than the copy limit. S3's 5 MiB minimum part size stays as AWS has it.
"""

from __future__ import annotations

import io

import boto3
import h5py
import numpy as np
import pytest
from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import ClientError
from moto.s3.exceptions import S3ClientError
from moto.s3.models import S3Backend

from layoutlab.kinds import _transfer
from layoutlab.pipeline.variants import convert_variant
from variant_helpers import PAGED_KEY as VARIANT_KEY
from variant_helpers import PAGED_SPEC as SPEC
from variant_helpers import pipeline_cloud, record_s3_calls, uploaded_variant_task

MiB = 2**20
COPY_LIMIT = 8 * MiB  # stands for S3's 5 GiB
PART = 5 * MiB  # S3's minimum part size: the smallest multipart threshold that works
S3_COPY_LIMIT_MESSAGE = ("The specified copy source is larger than the maximum allowable size for a copy source: "
                         "5368709120")


def _copy_source_too_large():
    return S3ClientError("InvalidRequest", S3_COPY_LIMIT_MESSAGE)


@pytest.fixture
def cloud(monkeypatch):
    """moto's S3 and DynamoDB, CopyObject and UploadPartCopy refusing sources above COPY_LIMIT."""
    copy_object, upload_part_copy = S3Backend.copy_object, S3Backend.upload_part_copy

    def limited_copy_object(self, src_key, *args, **kwargs):
        if src_key.size > COPY_LIMIT:
            raise _copy_source_too_large()
        return copy_object(self, src_key, *args, **kwargs)

    def limited_upload_part_copy(self, dest_bucket_name, multipart_id, part_id, src_bucket_name, src_key_name,
                                 src_version_id, start_byte, end_byte):
        size = (end_byte - start_byte + 1 if start_byte is not None and end_byte is not None
                else self.get_object(src_bucket_name, src_key_name, version_id=src_version_id).size)
        if size > COPY_LIMIT:
            raise _copy_source_too_large()
        return upload_part_copy(self, dest_bucket_name, multipart_id, part_id, src_bucket_name, src_key_name,
                                src_version_id, start_byte, end_byte)

    monkeypatch.setattr(S3Backend, "copy_object", limited_copy_object)
    monkeypatch.setattr(S3Backend, "upload_part_copy", limited_upload_part_copy)
    monkeypatch.setattr(_transfer, "PUBLISH_PART_BYTES", PART)
    with pipeline_cloud() as (s3, store):
        yield s3, store


@pytest.fixture
def big_source(cloud, tmp_path):
    """An upload whose paged variant is larger than COPY_LIMIT (incompressible, so no filter shrinks it)."""
    s3, _store = cloud
    values = np.random.default_rng(14).random(12 * MiB // 8)
    path = tmp_path / "big.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("v", data=values, chunks=(MiB // 8,))
    return uploaded_variant_task(s3, path), values


def _open_uploads(s3) -> list[dict]:
    return s3.list_multipart_uploads(Bucket="outputs").get("Uploads", [])


def test_the_fake_refuses_a_copy_above_the_limit_as_s3_does(cloud):
    s3, _store = cloud
    s3.put_object(Bucket="outputs", Key="small", Body=b"x" * COPY_LIMIT)
    s3.put_object(Bucket="outputs", Key="big", Body=b"x" * (COPY_LIMIT + 1))
    s3.copy_object(Bucket="outputs", Key="small-copy", CopySource={"Bucket": "outputs", "Key": "small"})
    with pytest.raises(ClientError) as refused:
        s3.copy_object(Bucket="outputs", Key="big-copy", CopySource={"Bucket": "outputs", "Key": "big"})
    assert refused.value.response["Error"] == {"Code": "InvalidRequest", "Message": S3_COPY_LIMIT_MESSAGE}
    # boto3's managed copy goes multipart above its threshold (UploadPartCopy, parts below the limit): allowed
    s3.copy({"Bucket": "outputs", "Key": "big"}, "outputs", "big-managed-copy",
            Config=boto3.s3.transfer.TransferConfig(multipart_threshold=PART, multipart_chunksize=PART))
    assert s3.head_object(Bucket="outputs", Key="big-managed-copy")["ContentLength"] == COPY_LIMIT + 1


def test_a_variant_larger_than_the_copy_limit_is_published_by_multipart_upload(cloud, big_source):
    s3, store = cloud
    task, values = big_source
    calls = record_s3_calls(s3)
    convert_variant(task, s3=s3, store=store)

    head = s3.head_object(Bucket="outputs", Key=VARIANT_KEY)
    size = head["ContentLength"]
    assert size > COPY_LIMIT
    parts = -(-size // PART)
    assert parts >= 3
    # the multipart path ran, and nothing was copied
    assert calls.count("CreateMultipartUpload") == 1 and calls.count("CompleteMultipartUpload") == 1
    assert calls.count("UploadPart") == parts
    assert not {"CopyObject", "UploadPartCopy", "DeleteObject", "AbortMultipartUpload"} & set(calls)
    assert head["ETag"].strip('"').endswith(f"-{parts}")  # S3's ETag of a multipart object
    # only the variant under its prefix (no temporary key), no upload left open
    listed = s3.list_objects_v2(Bucket="outputs", Prefix="variants/ds/")["Contents"]
    assert [o["Key"] for o in listed] == [VARIANT_KEY]
    assert _open_uploads(s3) == []
    item = store.get_variant("ds", SPEC["name"])
    assert item["status"] == "READY" and item["size_bytes"] == size and item["repack"]["verified"]
    # and it is the paged file, whole
    body = s3.get_object(Bucket="outputs", Key=VARIANT_KEY)["Body"].read()
    with h5py.File(io.BytesIO(body), "r") as f:
        np.testing.assert_array_equal(f["v"][...], values)


def test_the_old_publish_fails_on_the_fake(cloud, tmp_path):
    """What the pipeline did before: upload to KEY.partial, then CopyObject: refused above the limit."""
    s3, _store = cloud
    path = tmp_path / "variant.h5"
    path.write_bytes(b"\0" * (COPY_LIMIT + MiB))
    s3.upload_file(str(path), "outputs", VARIANT_KEY + ".partial")
    with pytest.raises(ClientError, match="maximum allowable size for a copy source"):
        s3.copy_object(Bucket="outputs", Key=VARIANT_KEY, CopySource={"Bucket": "outputs", "Key": VARIANT_KEY + ".partial"})


def test_a_failure_mid_upload_leaves_nothing_at_the_key_and_no_open_upload(cloud, big_source, monkeypatch):
    s3, store = cloud
    task, _values = big_source
    upload_part = S3Backend.upload_part

    def second_part_denied(self, bucket_name, multipart_id, part_id, value):
        if part_id == 2:  # e.g. credentials that expire mid-upload: a 4xx that botocore does not retry
            raise S3ClientError("AccessDenied", "Access Denied")
        return upload_part(self, bucket_name, multipart_id, part_id, value)

    monkeypatch.setattr(S3Backend, "upload_part", second_part_denied)
    calls = record_s3_calls(s3)
    with pytest.raises(S3UploadFailedError, match="AccessDenied"):
        convert_variant(task, s3=s3, store=store)

    assert "CreateMultipartUpload" in calls and "AbortMultipartUpload" in calls
    assert "CompleteMultipartUpload" not in calls
    with pytest.raises(ClientError) as missing:
        s3.head_object(Bucket="outputs", Key=VARIANT_KEY)
    assert missing.value.response["Error"]["Code"] == "404"
    assert "Contents" not in s3.list_objects_v2(Bucket="outputs", Prefix="variants/")
    assert _open_uploads(s3) == []
    assert store.get_variant("ds", SPEC["name"]) is None  # nothing recorded as READY
