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


# -- objects larger than memory (apply(key_buffer_bytes=...), the 7 GB granule of issue 16) -----------
PART = 5 * 2**20


def _multipart(client, key: str, parts: list[bytes], **create) -> dict:
    upload = client.create_multipart_upload(Bucket="bkt", Key=key, **create)
    done = []
    for number, data in enumerate(parts, start=1):
        extra = {"ChecksumAlgorithm": create["ChecksumAlgorithm"]} if "ChecksumAlgorithm" in create else {}
        answer = client.upload_part(Bucket="bkt", Key=key, UploadId=upload["UploadId"], PartNumber=number,
                                    Body=data, **extra)
        part = {"PartNumber": number, "ETag": answer["ETag"]}
        for name in ("ChecksumCRC32", "ChecksumSHA256"):
            if name in answer:
                part[name] = answer[name]
        done.append(part)
    return client.complete_multipart_upload(Bucket="bkt", Key=key, UploadId=upload["UploadId"],
                                            MultipartUpload={"Parts": done})


def _stored(key: str):
    from moto.s3.models import s3_backends

    return s3_backends["123456789012"]["aws"].buckets["bkt"].keys[key]


@pytest.mark.parametrize("create", [
    {}, {"ChecksumAlgorithm": "CRC32"}, {"ChecksumAlgorithm": "CRC32", "ChecksumType": "FULL_OBJECT"},
    {"ChecksumAlgorithm": "SHA256"},
], ids=["plain", "crc32", "crc32-full-object", "sha256"])
def test_a_multipart_upload_over_the_buffer_is_joined_on_disk_with_the_same_answers(s3, monkeypatch, create):
    """Over the buffer size the parts are streamed to a temporary file (never joined in memory);
    the object, its ETag and its checksum are what stock moto gives for the same parts."""
    import tracemalloc

    from moto.s3.models import FakeMultipart

    peaks = []
    patched = FakeMultipart.complete

    def measured(self, body):  # the memory of joining the parts, nothing else
        tracemalloc.start()
        try:
            return patched(self, body)
        finally:
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()

    monkeypatch.setattr(FakeMultipart, "complete", measured)
    client, _ = s3
    parts = [os.urandom(PART), os.urandom(PART), os.urandom(PART // 3)]
    whole = b"".join(parts)
    in_memory = _multipart(client, "in-memory", parts, **create)  # under the default buffer: moto's own join
    assert not _stored("in-memory")._value_buffer._rolled

    monkeypatch.setenv("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(2**20))  # what apply(key_buffer_bytes=1 MiB) sets
    on_disk = _multipart(client, "on-disk", parts, **create)
    key = _stored("on-disk")
    assert key._value_buffer._rolled  # in a temporary file
    # moto's join holds a bytearray and its bytes() copy at once (2x the object); streaming ~one part
    stock_peak, streamed_peak = peaks
    assert stock_peak >= 2 * len(whole)
    assert streamed_peak < len(whole) / 2, streamed_peak
    assert on_disk["ETag"] == in_memory["ETag"]
    for name in ("ChecksumCRC32", "ChecksumSHA256", "ChecksumType"):
        assert on_disk.get(name) == in_memory.get(name)
    # the object's own checksum as stored (moto's default full-object one when the upload names none)
    assert (_stored("on-disk").checksum_value, _stored("on-disk").checksum_type) == (
        _stored("in-memory").checksum_value, _stored("in-memory").checksum_type)
    assert _stored("on-disk").checksum_value
    assert client.get_object(Bucket="bkt", Key="on-disk")["Body"].read() == whole
    ranged = client.get_object(Bucket="bkt", Key="on-disk", Range=f"bytes={PART - 10}-{PART + 9}")
    assert ranged["Body"].read() == whole[PART - 10:PART + 10]
    assert client.head_object(Bucket="bkt", Key="on-disk")["ContentLength"] == len(whole)


def test_a_multipart_upload_over_the_buffer_still_refuses_a_wrong_part(s3, monkeypatch):
    client, _ = s3
    monkeypatch.setenv("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(2**20))
    upload = client.create_multipart_upload(Bucket="bkt", Key="bad")
    first = client.upload_part(Bucket="bkt", Key="bad", UploadId=upload["UploadId"], PartNumber=1, Body=b"a" * PART)
    client.upload_part(Bucket="bkt", Key="bad", UploadId=upload["UploadId"], PartNumber=2, Body=b"b" * PART)
    with pytest.raises(ClientError, match="InvalidPart"):
        client.complete_multipart_upload(Bucket="bkt", Key="bad", UploadId=upload["UploadId"], MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": first["ETag"]}, {"PartNumber": 2, "ETag": first["ETag"]}]})
    small = client.upload_part(Bucket="bkt", Key="bad", UploadId=upload["UploadId"], PartNumber=3, Body=b"c" * 100)
    with pytest.raises(ClientError, match="EntityTooSmall"):
        client.complete_multipart_upload(Bucket="bkt", Key="bad", UploadId=upload["UploadId"], MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": first["ETag"]}, {"PartNumber": 3, "ETag": small["ETag"]},
                      {"PartNumber": 2, "ETag": client.upload_part(
                          Bucket="bkt", Key="bad", UploadId=upload["UploadId"], PartNumber=2,
                          Body=b"b" * PART)["ETag"]}]})
    with pytest.raises(ClientError):
        client.get_object(Bucket="bkt", Key="bad")


def test_apply_sets_the_buffer_size(monkeypatch):
    monkeypatch.setenv("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(moto_patch.KEY_BUFFER_BYTES))
    moto_patch.apply(key_buffer_bytes=64 * 2**20)  # already applied: only the size changes
    assert os.environ["MOTO_S3_DEFAULT_KEY_BUFFER_SIZE"] == str(64 * 2**20)


def test_dynamodb_reads_answer_what_stock_moto_answers():
    """Scan, Query, GetItem and BatchGetItem through the patch give the documents moto's own serializer
    gives, for every kind of attribute value; errors are unchanged."""
    import decimal

    from boto3.dynamodb.conditions import Key
    from moto.dynamodb.responses import DynamoHandler

    item = {"pk": "d", "sk": "RESULT#1", "binary": b"\x00\x01\xff", "numbers": {1, 2}, "binaries": {b"a", b"b"},
            "strings": {"x", "y"}, "number": decimal.Decimal("1.5"), "nothing": None, "flag": True,
            "nested": {"list": [1, "a", {"deep": [b"z", None]}], "empty": {}}, "text": "é ✓"}
    patched = DynamoHandler.serialized
    answers = {}
    for name, serializer in (("patched", patched), ("stock", patched.__wrapped__)):
        DynamoHandler.serialized = serializer
        try:
            with moto.mock_aws():
                table = boto3.resource("dynamodb", region_name="us-east-1").create_table(
                    TableName="t", BillingMode="PAY_PER_REQUEST",
                    KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                    AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                          {"AttributeName": "sk", "AttributeType": "S"}])
                table.put_item(Item=item)
                table.put_item(Item={"pk": "d", "sk": "RESULT#2", "n": 2})
                client = table.meta.client
                with pytest.raises(ClientError, match="ResourceNotFoundException"):
                    client.scan(TableName="missing")
                answers[name] = (table.scan()["Items"], table.query(KeyConditionExpression=Key("pk").eq("d"))["Items"],
                                 table.get_item(Key={"pk": "d", "sk": "RESULT#1"})["Item"],
                                 client.batch_get_item(RequestItems={"t": {"Keys": [{"pk": "d", "sk": "RESULT#1"}]}})
                                 ["Responses"]["t"], table.scan(Limit=1)["LastEvaluatedKey"])
        finally:
            DynamoHandler.serialized = patched
    assert answers["patched"] == answers["stock"]
    assert answers["patched"][2] == {**item, "binary": boto3.dynamodb.types.Binary(b"\x00\x01\xff"),
                                     "binaries": {boto3.dynamodb.types.Binary(b"a"), boto3.dynamodb.types.Binary(b"b")},
                                     "nested": {"list": [decimal.Decimal(1), "a", {"deep": [boto3.dynamodb.types.Binary(b"z"), None]}],
                                                "empty": {}},
                                     "numbers": {decimal.Decimal(1), decimal.Decimal(2)}}


def _results_like_table():
    return boto3.resource("dynamodb", region_name="us-east-1").create_table(
        TableName="t", BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}])


def test_a_cancelled_transaction_leaves_every_item_as_it_was_and_a_committed_one_writes_them_all():
    """The slot take of products/concurrency.py: a Put only if absent and a counter Update only under a bound."""
    from moto.dynamodb.models import dynamodb_backends

    with moto.mock_aws():
        table = _results_like_table()
        client = boto3.client("dynamodb", region_name="us-east-1")  # (the resource's client would re-serialize)
        table.put_item(Item={"pk": "PRODUCT#A", "sk": "RUNNING", "running": 2})
        table.put_item(Item={"pk": "PRODUCT#A", "sk": "EXECUTION#old", "note": "kept"})
        stored = dynamodb_backends["123456789012"]["us-east-1"].tables["t"]

        def take(execution, bound, extra=()):
            client.transact_write_items(TransactItems=[
                {"Put": {"TableName": "t", "Item": {"pk": {"S": "PRODUCT#A"}, "sk": {"S": f"EXECUTION#{execution}"}},
                         "ConditionExpression": "attribute_not_exists(pk)"}},
                {"Update": {"TableName": "t", "Key": {"pk": {"S": "PRODUCT#A"}, "sk": {"S": "RUNNING"}},
                            "UpdateExpression": "SET running = running + :one",
                            "ConditionExpression": "running < :bound",
                            "ExpressionAttributeValues": {":one": {"N": "1"}, ":bound": {"N": str(bound)}}}},
                *extra])

        with pytest.raises(ClientError, match="TransactionCanceled"):  # the bound is reached: nothing written
            take("new", bound=2)
        with pytest.raises(ClientError, match="TransactionCanceled"):  # the last operation fails: the first two undone
            take("new", bound=3, extra=[{"Delete": {"TableName": "t", "Key": {"pk": {"S": "PRODUCT#A"},
                                                                             "sk": {"S": "EXECUTION#old"}},
                                                    "ConditionExpression": "attribute_not_exists(note)"}}])
        items = {i["sk"]: i for i in table.scan()["Items"]}
        assert set(items) == {"RUNNING", "EXECUTION#old"} and items["RUNNING"]["running"] == 2
        assert items["EXECUTION#old"]["note"] == "kept"
        take("new", bound=3)
        items = {i["sk"]: i for i in table.scan()["Items"]}
        assert set(items) == {"RUNNING", "EXECUTION#old", "EXECUTION#new"} and items["RUNNING"]["running"] == 3
        # the table was never replaced by a copy of itself (a copy per transaction grew the local cloud per granule)
        assert dynamodb_backends["123456789012"]["us-east-1"].tables["t"] is stored
