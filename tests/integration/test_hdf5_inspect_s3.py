"""inspect on s3:// objects, against the local cloud (moto server on 127.0.0.1, free port)."""

from __future__ import annotations

import pytest

from layoutlab.errors import BadInputFile
from layoutlab.formats.inspect import inspect_file
from layoutlab.samples import atl03
from layoutlab.storage import boto3_s3_client

BUCKET = "layoutlab-hdf5-inspect"


@pytest.fixture(scope="module")
def local_s3():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
    try:
        boto3_s3_client().create_bucket(Bucket=BUCKET)
        yield boto3_s3_client()
    finally:
        monkeypatch.undo()
        server.stop()


def test_s3_report_matches_the_local_one(local_s3, tmp_path):
    path = atl03.write_atl03(tmp_path / "granule.h5", photons=3_000, chunk=1_000)
    local_s3.upload_file(str(path), BUCKET, "incoming/granule.h5")
    remote = inspect_file(f"s3://{BUCKET}/incoming/granule.h5")
    local = inspect_file(path)
    assert remote["location"] == f"s3://{BUCKET}/incoming/granule.h5"
    remote.pop("location"), local.pop("location")
    assert remote == local
    # inspection never writes anything next to the object
    keys = [o["Key"] for o in local_s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
    assert keys == ["incoming/granule.h5"]


def test_missing_object_is_a_one_line_error(local_s3):
    with pytest.raises(BadInputFile, match="no such object"):
        inspect_file(f"s3://{BUCKET}/incoming/nothing-here.h5")


def test_non_hdf5_object_gets_a_verdict(local_s3):
    local_s3.put_object(Bucket=BUCKET, Key="incoming/notes.txt", Body=b"just some notes\n")
    report = inspect_file(f"s3://{BUCKET}/incoming/notes.txt")
    assert report["format"] == "unknown" and "text" in report["verdict"]["summary"]
