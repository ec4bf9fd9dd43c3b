"""A fanned-out rechunk records its conversion time: the work units' seconds reach the VARIANT item."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from layoutlab.convert import rechunk_zarr
from layoutlab.pipeline.payloads import ConvertTask
from layoutlab.pipeline.variants import convert_variant
from layoutlab.results.store import ResultsStore

SPEC = {"name": "zarr-24x10x10", "kind": "rechunk-zarr", "format": "zarr",
        "uri": "s3://outputs/variants/ds/zarr-24x10x10.zarr"}


@pytest.fixture
def cloud():
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="outputs")
        s3.put_object(Bucket="outputs", Key="variants/ds/zarr-24x10x10.zarr/c/0/0/0", Body=b"x" * 1000)
        store = ResultsStore("results-test")
        store.create_table()
        yield s3, store


def test_work_unit_times_add_up_in_the_published_variant(cloud, monkeypatch):
    s3, store = cloud
    unit_seconds = {0: 1.25, 1: 2.5, 2: 0.75}
    monkeypatch.setattr(rechunk_zarr, "load_plan", lambda uri: {"uri": uri})
    monkeypatch.setattr(rechunk_zarr, "run_unit",
                        lambda plan, k: {"unit": k, "bytes": 4000, "seconds": unit_seconds[k]})
    monkeypatch.setattr(rechunk_zarr, "finalize", lambda plan: {"destination": plan["uri"]})
    base = {"dataset_id": "ds", "source": {"bucket": "in", "key": "a.nc", "size": 2000}, "variant": SPEC}
    for k in unit_seconds:  # in any order, as parallel Map items would
        convert_variant(ConvertTask.from_event({**base, "phase": "unit", "work_unit": {"k": k}}), s3=s3, store=store)
    published = convert_variant(ConvertTask.from_event({**base, "phase": "publish"}), s3=s3, store=store)
    item = store.get_variant("ds", SPEC["name"])
    assert item["units_done"] == 3 and item["units_bytes"] == 12000
    assert item["units_seconds"] == pytest.approx(4.5)
    assert 4.5 <= item["convert_s"] < 4.5 + 5  # the units' time plus the publish step's own
    assert published["convert_s"] == item["convert_s"]
    assert item["status"] == "READY" and item["size_bytes"] == 1000
    assert [i["variant"] for i in store.items(dataset="ds", kind="VARIANT")] == [SPEC["name"]]


def test_a_retried_work_unit_counts_once(cloud, monkeypatch):
    """A unit task retried after it recorded its work (its Lambda timed out just after, a Map
    item delivered twice) neither adds its time again nor counts as another unit."""
    s3, store = cloud
    attempts = []

    def run_unit(plan, k):
        again = k in attempts  # the done marker exists: the unit is skipped
        attempts.append(k)
        return {"unit": k, "bytes": 0 if again else 4000, "seconds": 0.001 if again else 2.0, "skipped": again}

    monkeypatch.setattr(rechunk_zarr, "load_plan", lambda uri: {"uri": uri})
    monkeypatch.setattr(rechunk_zarr, "run_unit", run_unit)
    monkeypatch.setattr(rechunk_zarr, "finalize", lambda plan: {"destination": plan["uri"]})
    base = {"dataset_id": "ds", "source": {"bucket": "in", "key": "a.nc", "size": 2000}, "variant": SPEC}
    for k in (0, 1, 1, 2, 0):
        convert_variant(ConvertTask.from_event({**base, "phase": "unit", "work_unit": {"k": k}}), s3=s3, store=store)
    convert_variant(ConvertTask.from_event({**base, "phase": "publish"}), s3=s3, store=store)
    item = store.get_variant("ds", SPEC["name"])
    assert item["units_done"] == 3 and item["units_bytes"] == 12000
    assert item["units_seconds"] == pytest.approx(6.0)
    assert len(store.items(dataset="ds", kind="UNIT")) == 3


def test_a_unit_whose_first_record_was_lost_is_still_counted(cloud):
    """A retry that finds the unit done but no record of it (the first attempt died between
    its done marker and its record) records the unit, with the little time it took."""
    _, store = cloud
    store.record_unit_work("ds", SPEC["name"], 4, 0.002, 0, skipped=True)
    store.record_unit_work("ds", SPEC["name"], 5, 3.0, 100)
    store.record_unit_work("ds", SPEC["name"], 5, 0.001, 0, skipped=True)  # keeps the working attempt's
    assert store.unit_work("ds", SPEC["name"]) == {"units_seconds": pytest.approx(3.002), "units_done": 2,
                                                  "units_bytes": 100}
