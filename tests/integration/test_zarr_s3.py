"""Rechunk to and from s3:// on a moto server (127.0.0.1, free port): same store as locally."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
import zarr

from layoutlab.cli import main as cli_main
from layoutlab.convert import rechunk_zarr as rz
from layoutlab.samples.geos import write_geos
from layoutlab.storage import boto3_s3_client

SHAPE = (24, 19, 36)
BUCKET = "zarr-tests"


@pytest.fixture(scope="module")
def moto_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3(moto_endpoint, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    client = boto3_s3_client()
    client.create_bucket(Bucket=BUCKET)
    source = write_geos(tmp_path / "geos.nc", shape=SHAPE)
    client.upload_file(str(source), BUCKET, "data/geos.nc")
    yield client, source
    # Empty and drop the bucket so every test starts clean.
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for item in page.get("Contents", []):
            client.delete_object(Bucket=BUCKET, Key=item["Key"])
    client.delete_bucket(Bucket=BUCKET)


def keys(client, prefix):
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def open_s3_zarr(url):
    return xr.open_zarr(rz.open_store(url, read_only=True), consolidated=True)


def test_s3_source_to_s3_destination_with_fan_out_matches_a_local_run(s3, tmp_path):
    client, source = s3
    options = dict(chunks={"time": 24, "lat": 5, "lon": 5}, shards={"time": 24, "lat": 10, "lon": 10}, max_mem="64KiB")
    dst = f"s3://{BUCKET}/zarr/geos-ts.zarr"
    plan = json.loads(json.dumps(rz.plan_rechunk(f"s3://{BUCKET}/data/geos.nc", dst, **options)))
    assert plan["source_kind"] == "hdf5"
    for stage in range(plan["stages"]):
        for unit in reversed([u for u in plan["units"] if u["stage"] == stage]):
            rz.run_unit(plan, unit["id"])
    assert "zarr/geos-ts.zarr/zarr.json" not in keys(client, "zarr/")  # not published before finalize
    rz.finalize(plan)
    stored = keys(client, "zarr/geos-ts.zarr/")
    assert not [k for k in stored if rz.STAGING in k]

    local = tmp_path / "local.zarr"
    rz.rechunk(str(source), str(local), progress=False, **options)
    expected = xr.open_dataset(source).load()
    xr.testing.assert_identical(open_s3_zarr(dst).load(), expected)
    local_keys = sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_file())
    assert [k.removeprefix("zarr/geos-ts.zarr/") for k in stored] == local_keys
    for key in local_keys:
        body = client.get_object(Bucket=BUCKET, Key=f"zarr/geos-ts.zarr/{key}")["Body"].read()
        assert body == (local / key).read_bytes(), key


@pytest.mark.slow
def test_s3_zarr_source_via_cli_and_existing_destination_needs_overwrite(s3, capsys):
    client, source = s3
    first = f"s3://{BUCKET}/zarr/maps.zarr"
    assert cli_main(["rechunk", f"s3://{BUCKET}/data/geos.nc", first, "--chunks", "time=1", "--no-progress"]) == 0
    second = f"s3://{BUCKET}/zarr/series.zarr"
    assert cli_main(["rechunk", first, second, "--chunks", "time=24,lat=2,lon=2", "--no-progress"]) == 0
    capsys.readouterr()
    ds = open_s3_zarr(second)
    assert ds["BCEXTTAU"].encoding["chunks"] == (24, 2, 2)
    xr.testing.assert_identical(ds.load(), xr.open_dataset(source).load())

    before = keys(client, "zarr/series.zarr/")
    assert cli_main(["rechunk", first, second, "--chunks", "time=12"]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert keys(client, "zarr/series.zarr/") == before
    assert cli_main(["rechunk", first, second, "--chunks", "time=12", "--overwrite", "--no-progress"]) == 0
    assert open_s3_zarr(second)["BCEXTTAU"].encoding["chunks"] == (12, 19, 36)


def test_nothing_is_ever_written_under_incoming(s3, capsys):
    client, _ = s3
    assert cli_main(["rechunk", f"s3://{BUCKET}/data/geos.nc", f"s3://{BUCKET}/incoming/out.zarr"]) == 2
    assert "incoming/" in capsys.readouterr().err
    assert keys(client, "incoming/") == []


def test_missing_s3_source_is_a_one_line_error(s3, capsys):
    assert cli_main(["rechunk", f"s3://{BUCKET}/data/nope.nc", f"s3://{BUCKET}/zarr/x.zarr"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"layoutlab rechunk: error: s3://{BUCKET}/data/nope.nc: does not exist"
