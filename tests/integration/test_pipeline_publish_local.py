"""A paged variant larger than the multipart threshold is published through the local cloud
(moto server behind the S3 proxy, as the local pipeline and its tasks use it): one multipart
upload straight to the final key, no temporary key, no copy; its parts sent while the copy is
verified, the object made visible only on a clean verdict."""

from __future__ import annotations

import time

import h5py
import numpy as np
import pytest

from layoutlab.convert.repack_common import CopyDiffers
from layoutlab.kinds import _transfer
from layoutlab.pipeline.variants import convert_variant
from layoutlab.storage import boto3_s3_client, s3fs_filesystem
from variant_helpers import PAGED_KEY, pipeline_buckets_and_table, record_s3_calls, uploaded_variant_task

MiB = 2**20
PART = 5 * MiB  # S3's smallest part: the multipart threshold scaled down so the path runs on a small file
VERIFY_SECONDS = 8


def test_a_multipart_publish_through_the_local_cloud(cloud, tmp_path, monkeypatch):
    from layoutlab.convert import repack_hdf5

    monkeypatch.setattr(_transfer, "PUBLISH_PART_BYTES", PART)
    # a verification as long as a big file's (the worker is forked: it compares with this one), so the
    # parts have time to go up beside it
    compare = repack_hdf5.compare_files
    monkeypatch.setattr(repack_hdf5, "compare_files",
                        lambda *args, **kwargs: (time.sleep(VERIFY_SECONDS), compare(*args, **kwargs))[1])
    s3 = boto3_s3_client()
    store = pipeline_buckets_and_table(s3, "results-publish-test")
    values = np.random.default_rng(3).random(12 * MiB // 8)
    source = tmp_path / "big.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("v", data=values, chunks=(MiB // 8,))
    task = uploaded_variant_task(s3, source)
    calls = record_s3_calls(s3)
    done = convert_variant(task, s3=s3, store=store)
    variant = store.get_variant("ds", done["variant"])

    head = s3.head_object(Bucket="outputs", Key=PAGED_KEY)
    parts = -(-head["ContentLength"] // PART)
    assert parts >= 3 and head["ETag"].strip('"').endswith(f"-{parts}")
    assert calls.count("UploadPart") == parts and "CopyObject" not in calls
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="outputs")["Contents"]] == [PAGED_KEY]
    assert s3.list_multipart_uploads(Bucket="outputs").get("Uploads", []) == []
    # the upload ran beside the verification, not after it
    assert variant["parts_sent_before_verdict"] == parts
    # the record says where the task's time went, in the order things happened
    phases = {phase: float(at) for phase, at in variant["phase_seconds"].items()}
    assert list(phases) == ["downloaded", "copy_written", "verdict", "parts_sent", "published"]
    assert phases["downloaded"] <= phases["copy_written"] < phases["verdict"] <= phases["published"]
    assert phases["copy_written"] < phases["parts_sent"] <= phases["published"]
    assert phases["verdict"] - phases["copy_written"] >= VERIFY_SECONDS
    # read back the way readers do (s3fs through the proxy), paged and whole
    with s3fs_filesystem().open(f"outputs/{PAGED_KEY}", "rb") as remote, h5py.File(remote, "r") as f:
        assert f.id.get_create_plist().get_file_space_strategy()[0] == h5py.h5f.FSPACE_STRATEGY_PAGE
        np.testing.assert_array_equal(f["v"][...], values)


def test_a_copy_that_fails_verification_is_never_published(cloud, tmp_path, monkeypatch):
    """The parts already sent while verifying are aborted: no object, no multipart upload left behind."""
    from layoutlab.convert import repack_hdf5

    monkeypatch.setattr(_transfer, "PUBLISH_PART_BYTES", PART)
    # the (forked) worker's comparison finds a difference, as it would in a copier's bug
    monkeypatch.setattr(repack_hdf5, "compare_files", lambda *args, **kwargs: ["/v: stored chunks differ"])
    s3 = boto3_s3_client()
    store = pipeline_buckets_and_table(s3, "results-publish-refused")
    source = tmp_path / "big.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("v", data=np.random.default_rng(4).random(12 * MiB // 8), chunks=(MiB // 8,))
    task = uploaded_variant_task(s3, source)
    calls = record_s3_calls(s3)
    with pytest.raises(CopyDiffers, match="verification of the repacked copy failed"):
        convert_variant(task, s3=s3, store=store)  # (our copier's fault: the state machine records it)

    assert "Contents" not in s3.list_objects_v2(Bucket="outputs")
    assert s3.list_multipart_uploads(Bucket="outputs").get("Uploads", []) == []
    assert "CompleteMultipartUpload" not in calls
    if "CreateMultipartUpload" in calls:  # (the verdict may come before the first part: then nothing was sent)
        assert "AbortMultipartUpload" in calls

