"""The ranged-GET patch: same answers as S3, without reading the whole object.

In-process (moto's mock_aws through boto3's stubber, no sockets).
"""

from __future__ import annotations

import os

import boto3
import pytest
from botocore.exceptions import ClientError

from layoutlab.local import moto_patch

moto = pytest.importorskip("moto")
moto_patch.apply()

SIZE = 3 * 2**20 + 17


class CountingBuffer:
    """Wraps a FakeKey's buffer and counts the bytes read from it."""

    def __init__(self, inner):
        self.inner, self.read_bytes = inner, 0

    def read(self, n=-1):
        data = self.inner.read(n)
        self.read_bytes += len(data)
        return data

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def s3():
    with moto.mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="bkt")
        data = os.urandom(SIZE)
        client.put_object(Bucket="bkt", Key="obj", Body=data)
        yield client, data


def _key():
    from moto.s3.models import s3_backends

    return s3_backends["123456789012"]["aws"].buckets["bkt"].keys["obj"]


@pytest.mark.parametrize("header, expected", [
    ("bytes=0-4095", slice(0, 4096)),
    ("bytes=1000000-1004095", slice(1000000, 1004096)),
    (f"bytes={SIZE - 10}-", slice(SIZE - 10, SIZE)),
    ("bytes=-100", slice(SIZE - 100, SIZE)),
    (f"bytes={SIZE - 5}-{SIZE + 1000}", slice(SIZE - 5, SIZE)),
])
def test_ranges_are_served_like_s3(s3, header, expected):
    client, data = s3
    response = client.get_object(Bucket="bkt", Key="obj", Range=header)
    body = response["Body"].read()
    assert body == data[expected]
    assert response["ContentRange"] == f"bytes {expected.start}-{expected.stop - 1}/{SIZE}"
    assert response["ContentLength"] == len(body)


def test_a_range_reads_only_the_range(s3):
    client, data = s3
    key = _key()
    key._value_buffer = CountingBuffer(key._value_buffer)
    body = client.get_object(Bucket="bkt", Key="obj", Range="bytes=2000000-2004095")["Body"].read()
    assert body == data[2000000:2004096]
    assert key._value_buffer.read_bytes == 4096  # stock moto reads all 3 MiB here


def test_whole_object_and_unsatisfiable_range_unchanged(s3):
    client, data = s3
    assert client.get_object(Bucket="bkt", Key="obj")["Body"].read() == data
    with pytest.raises(ClientError, match="InvalidRange"):
        client.get_object(Bucket="bkt", Key="obj", Range=f"bytes={SIZE + 10}-{SIZE + 20}")
    # copies and HEAD still see the whole value
    client.copy_object(Bucket="bkt", Key="copy", CopySource={"Bucket": "bkt", "Key": "obj"})
    assert client.get_object(Bucket="bkt", Key="copy")["Body"].read() == data
    assert client.head_object(Bucket="bkt", Key="obj", Range="bytes=0-9")["ContentLength"] == 10


def test_objects_are_kept_in_memory(s3):
    assert int(os.environ["MOTO_S3_DEFAULT_KEY_BUFFER_SIZE"]) >= 2**30
    assert not _key()._value_buffer._rolled  # no spill to a temporary file


def test_patch_refuses_another_moto_version(monkeypatch):
    monkeypatch.setattr(moto_patch, "_applied", False)
    monkeypatch.setattr(moto, "__version__", "9.9.9")
    with pytest.raises(RuntimeError, match="moto 5.2.5"):
        moto_patch.apply()
