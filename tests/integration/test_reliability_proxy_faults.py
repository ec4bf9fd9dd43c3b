"""Faults injected by the local S3 proxy (issue #8, item 6): work completes through retries.

The proxy answers a seeded share of requests ``503 SlowDown`` (S3's XML body,
request not forwarded), resets 1 % of connections without an answer, and
delays 5 % by 100 ms. Then:

- every benchmark reader still measures its case, with the same values as
  without faults, and a case whose requests met a fault says so in its record
  (``faults_seen``, ``retries``);
- a Zarr rechunk written to S3 through the faults, and a repacked HDF5
  uploaded and downloaded with boto3, give objects byte-identical to the
  fault-free run;
- the same seed gives the same faults.
"""

from __future__ import annotations

import hashlib

import boto3
import pytest

from layoutlab.bench.runner import run_case, upload_target
from layoutlab.cli import main
from layoutlab.results.record import validate_record
from layoutlab.samples.geos import write_geos

pytestmark = pytest.mark.slow

FAULTS = {"slowdown_rate": 0.05, "reset_rate": 0.01, "slow_rate": 0.05, "slow_ms": 100, "seed": 8}
CASES = [
    ("timeseries-point", "h5py-s3fs-default", "geos"),
    ("map-timestep", "h5py-s3fs-aligned", "geos"),
    ("map-time-mean", "xarray-h5netcdf", "geos"),
    ("map-timestep", "zarr-obstore", "zarr"),
    ("timeseries-point", "zarr-fsspec", "zarr"),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import xarray as xr

    root = tmp_path_factory.mktemp("fault-files")
    geos = write_geos(root / "geos.nc", shape=(24, 46, 72))
    with xr.open_dataset(geos) as ds:
        ds.to_zarr(root / "geos.zarr", zarr_format=3, mode="w", consolidated=False,
                   encoding={"BCEXTTAU": {"chunks": (24, 8, 8)}})
    return {"geos": geos, "zarr": root / "geos.zarr"}


@pytest.fixture
def faulty(cloud):
    """Faults on for the default client and every client opened in the test; off afterwards."""
    cloud.set_faults(**FAULTS)
    try:
        yield cloud
    finally:
        cloud.set_faults()


def _objects(s3, bucket: str, prefix: str) -> dict[str, str]:
    digests = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            digests[item["Key"][len(prefix):]] = hashlib.sha256(body).hexdigest()
    return digests


def test_fault_settings_are_checked(cloud):
    from urllib.error import HTTPError

    with pytest.raises(HTTPError):
        cloud.set_faults(slowdown_rate=1.5)
    with pytest.raises(HTTPError):
        cloud.set_faults(typo_rate=0.1)


def test_the_same_seed_gives_the_same_faults(cloud):
    from botocore.config import Config
    from botocore.exceptions import ClientError

    s3 = boto3.client("s3", endpoint_url=cloud.moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="seeded")
    s3.put_object(Bucket="seeded", Key="obj", Body=b"x" * 1000)
    # no retries: every injected 503 reaches the caller
    plain = boto3.client("s3", endpoint_url=cloud.s3_endpoint, region_name="us-east-1",
                         config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))
    seen = []
    for _ in range(2):
        cloud.set_faults(slowdown_rate=0.3, seed=3)  # setting faults restarts the client's draws
        before = cloud.client_stats("default")["faults"]["slowdown"]
        fates = []
        try:
            for _ in range(30):
                try:
                    plain.head_object(Bucket="seeded", Key="obj")
                    fates.append("ok")
                except ClientError as error:
                    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 503
                    fates.append("503")
            assert cloud.client_stats("default")["faults"]["slowdown"] - before == fates.count("503")
        finally:
            cloud.set_faults()
        seen.append(fates)
    assert seen[0] == seen[1] and 0 < seen[0].count("503") < 30


@pytest.mark.parametrize("pattern, reader, target", CASES)
def test_every_reader_completes_through_faults_with_the_same_values(cloud, files, pattern, reader, target):
    url = upload_target(files[target], cloud)
    case = {"target": url, "pattern": pattern, "reader": reader, "latency_ms": 0, "bandwidth_mbps": 0}
    clean = run_case(case)
    assert clean["status"] == "ok" and clean["retries"] == 0, clean.get("error")
    cloud.set_faults(**FAULTS)
    try:
        records = [run_case(case) for _ in range(3)]
    finally:
        cloud.set_faults()
    for record in records:
        assert record["status"] == "ok", record["error"]
        assert validate_record(record) == []
        assert record["checksum_ok"] is True
        assert record["result_summary"] == clean["result_summary"]
        assert record["retries"] == record["faults_seen"]["slowdown"] + record["faults_seen"]["reset"]
    print(f"\n{reader} {pattern}: requests {[r['requests'] for r in records]} (clean {clean['requests']}), "
          f"faults {[r['faults_seen'] for r in records]}")


def test_cases_that_met_faults_are_flagged(cloud, files):
    # A case of many requests (every chunk of the Zarr store: about 60 GETs), so that at a
    # 20 % share of 503s each run meets some: a case of two GETs (s3fs reads this small file
    # in one block) may meet none, whatever the seed, and then there is nothing to flag.
    url = upload_target(files["zarr"], cloud)
    case = {"target": url, "pattern": "map-time-mean", "reader": "zarr-obstore", "latency_ms": 0, "bandwidth_mbps": 0}
    clean = run_case(case)
    cloud.set_faults(**{**FAULTS, "slowdown_rate": 0.2})
    try:
        records = [run_case(case) for _ in range(3)]
    finally:
        cloud.set_faults()
    assert clean["status"] == "ok" and clean["retries"] == 0 and clean["requests"] >= 30, clean
    assert all(r["status"] == "ok" and r["checksum_ok"] is True for r in records)
    for record in records:
        assert record["retries"] > 0 and record["faults_seen"]["slowdown"] > 0
        # each fault cost one request more than the clean run made, as the proxy saw them (obstore's
        # client counts, the record's main ones, cannot see the retries obstore makes inside Rust)
        wire, clean_wire = record["proxy_counts"]["requests"], clean["proxy_counts"]["requests"]
        assert wire >= clean_wire + record["faults_seen"]["slowdown"]


def test_conversions_through_faults_write_identical_objects(cloud, files, tmp_path):
    s3 = boto3.client("s3", endpoint_url=cloud.moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="faults-out")
    repacked = tmp_path / "paged.h5"
    assert main(["repack", str(files["geos"]), str(repacked), "--page-size", "1MiB"]) == 0
    runs = {}
    for label, faults in (("clean", {}), ("faulty", FAULTS)):
        cloud.set_faults(**faults)
        try:
            # AWS_ENDPOINT_URL_S3 (set by the cloud fixture) is the proxy's default client
            code = main(["rechunk", str(files["geos"]), f"s3://faults-out/{label}/geos.zarr",
                         "--chunks", "time=24,lat=10,lon=10", "--no-progress"])
            assert code == 0
            through_proxy = boto3.client("s3", region_name="us-east-1")
            through_proxy.upload_file(str(repacked), "faults-out", f"{label}/paged.h5")
            through_proxy.download_file("faults-out", f"{label}/paged.h5", str(tmp_path / f"{label}.h5"))
            stats = cloud.client_stats("default")
        finally:
            cloud.set_faults()
        runs[label] = (_objects(s3, "faults-out", f"{label}/"), stats["faults"])
    clean, faulty = runs["clean"][0], runs["faulty"][0]
    assert clean == faulty and len(clean) > 5
    assert (tmp_path / "faulty.h5").read_bytes() == repacked.read_bytes()
    faults = runs["faulty"][1]
    print(f"\nconversions through faults: {len(faulty)} objects identical; faults injected {faults}")
    assert faults["slowdown"] + faults["reset"] > 0
