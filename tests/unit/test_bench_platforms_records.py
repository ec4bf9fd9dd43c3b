"""Platform profiles and result records: what a user sees in every result."""

from __future__ import annotations

import json

import jsonschema
import pytest

from layoutlab.errors import UserError
from layoutlab.platforms import platform_profile
from layoutlab.results.record import (SCHEMA_PATH, derive_rates, error_record, new_record, schema,
                                      validate_record)


@pytest.mark.parametrize(
    "name, kind, memory, vcpu, local",
    [("local-lambda", "lambda", 1769, 1.0, True), ("local-fargate", "fargate", 2048, 1.0, True),
     ("lambda-3538", "lambda", 3538, 2.0, False), ("lambda-10240", "lambda", 10240, 5.79, False),
     ("fargate-0.25-512", "fargate", 512, 0.25, False), ("fargate-4-16384", "fargate", 16384, 4.0, False)],
)
def test_platform_profiles(name, kind, memory, vcpu, local):
    p = platform_profile(name)
    assert (p.kind, p.memory_mb, p.vcpu, p.local, p.name) == (kind, memory, vcpu, local, name)


@pytest.mark.parametrize("name, says", [("lambda-64", "128..10240"), ("fargate-1-512", "2048..8192"),
                                        ("fargate-3-8192", "vCPU must be one of"), ("ec2-large", "unknown platform")])
def test_bad_platforms_are_explained(name, says):
    with pytest.raises(UserError, match=says):
        platform_profile(name)


def test_schema_is_a_valid_json_schema_and_versioned():
    doc = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(doc)
    assert doc["properties"]["schema_version"] == {"const": 1, "description": doc["properties"]["schema_version"]["description"]}
    for field in ("dataset", "variant", "pattern", "reader", "reader_settings", "platform", "repetition", "wall_s",
                  "cpu_s", "peak_rss_mb", "requests", "bytes_transferred", "bytes_needed", "overread_ratio",
                  "points", "points_per_s", "mib_per_point", "checksum_ok", "latency_ms", "bandwidth_mbps",
                  "versions"):
        assert field in doc["required"], field


def test_error_records_have_every_key_and_validate():
    record = error_record("s3://b/k.h5: not found\nsecond line", dataset="k", variant="original", target="s3://b/k.h5",
                          pattern="map-timestep", reader="h5py-s3fs-default", platform="local-lambda")
    assert record["status"] == "error" and record["error"] == "s3://b/k.h5: not found"
    assert set(schema()["required"]) <= set(record)
    assert validate_record(record) == []
    assert record["versions"]["h5py"] and record["versions"]["python"]


def test_every_record_names_the_versions_of_the_virtual_and_icechunk_stack():
    """A kerchunk, Icechunk or h5coro result is only comparable run to run with the versions of the
    libraries that produced and read it (issue 16)."""
    from importlib import metadata

    versions = new_record(dataset="d", variant="v", target="t", pattern="p", reader="kerchunk-fsspec",
                          platform="local-lambda")["versions"]
    for name in ("virtualizarr", "kerchunk", "icechunk", "h5coro", "zarr", "obstore", "hdf5"):
        assert versions.get(name), name
    assert versions["icechunk"] == metadata.version("icechunk")


def test_validation_catches_wrong_types():
    record = new_record(dataset="d", variant="v", target="t", pattern="p", reader="r", platform="local-lambda",
                        wall_s=-1.0)
    problems = validate_record(record)
    assert any("wall_s" in p for p in problems)
    del record["requests"]
    assert any("requests" in p for p in validate_record(record))


def test_derived_rates():
    record = derive_rates(new_record(wall_s=2.0, load_s=1.0, points=1000, peak_rss_mb=100.0,
                                     bytes_needed=4000, bytes_transferred=40000))
    assert record["points_per_s"] == 500.0
    assert record["mib_per_point"] == pytest.approx(0.1)
    assert record["overread_ratio"] == 10.0
    assert record["throughput_gbps"] == pytest.approx(4000 * 8 / 1e9)
    none = derive_rates(new_record(wall_s=1.0, points=None, bytes_needed=None, bytes_transferred=5))
    assert none["points_per_s"] is None and none["overread_ratio"] is None
