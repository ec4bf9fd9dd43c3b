"""The local cloud with its objects on disk (issue 16's 7 GB granule does not fit in memory).

``start_local_cloud(objects_on_disk_over=N)``: an object over N bytes, uploaded in parts as boto3
does for a large file, is kept in a temporary file by the cloud's process and served back whole
and by ranges exactly as uploaded.
"""

from __future__ import annotations

import os

import boto3
from boto3.s3.transfer import TransferConfig

from layoutlab.local.cloud import start_local_cloud

PART = 5 * 2**20


def open_temporary_bytes(pid: int) -> int:
    """Bytes of the deleted temporary files a process holds open (where moto spills objects)."""
    total = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed meanwhile
            continue
        if target.endswith("(deleted)"):
            total += os.stat(f"/proc/{pid}/fd/{fd}").st_size
    return total


def test_large_objects_live_on_disk_and_read_back_exactly(tmp_path):
    data = os.urandom(3 * PART + 12345)
    source = tmp_path / "granule.h5"
    source.write_bytes(data)
    cloud = start_local_cloud(objects_on_disk_over=2**20)
    try:
        s3 = boto3.client("s3", endpoint_url=cloud.moto_endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        s3.create_bucket(Bucket="bkt")
        before = open_temporary_bytes(cloud.pid)
        s3.upload_file(str(source), "bkt", "targets/granule.h5",
                       Config=TransferConfig(multipart_threshold=PART, multipart_chunksize=PART))
        assert s3.head_object(Bucket="bkt", Key="targets/granule.h5")["ETag"].endswith('-4"')  # in parts
        # the joined object sits in a temporary file of the cloud's process, not in its memory
        assert open_temporary_bytes(cloud.pid) - before >= len(data)
        assert s3.get_object(Bucket="bkt", Key="targets/granule.h5")["Body"].read() == data
        for start, end in ((0, 4095), (PART - 3, PART + 3), (len(data) - 100, len(data) - 1)):
            body = s3.get_object(Bucket="bkt", Key="targets/granule.h5", Range=f"bytes={start}-{end}")["Body"].read()
            assert body == data[start:end + 1]
    finally:
        cloud.stop()
