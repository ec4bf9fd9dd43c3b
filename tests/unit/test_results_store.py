"""The results table: items by kind, one pattern across datasets, no duplicates, CLI formats."""

from __future__ import annotations

import csv
import io
import json

import pytest

from layoutlab import cli


def record(dataset="d1", variant="paged-8MiB", pattern="map-timestep", reader="h5py-s3fs-aligned",
           platform="local-lambda", repetition=0, wall_s=0.25):
    return {"dataset": dataset, "variant": variant, "pattern": pattern, "reader": reader,
            "platform": platform, "repetition": repetition, "wall_s": wall_s, "requests": 4,
            "bytes_transferred": 8388608, "peak_rss_mb": 101.5, "checksum_ok": True,
            "reader_settings": {"block_size": 8388608, "cache_type": "blockcache"}}


def test_results_round_trip_with_floats_and_nested_settings(store):
    store.put_result(record(wall_s=0.123456789))
    [item] = store.items(kind="RESULT")
    assert item["wall_s"] == pytest.approx(0.123456789)
    assert item["reader_settings"] == {"block_size": 8388608, "cache_type": "blockcache"}
    assert item["checksum_ok"] is True


def test_writing_the_same_case_twice_keeps_one_item(store):
    store.put_result(record(wall_s=1.0))
    store.put_result(record(wall_s=2.0))
    assert [i["wall_s"] for i in store.items(kind="RESULT")] == [2.0]


def test_one_pattern_is_compared_across_datasets(store):
    for dataset in ("d1", "d2"):
        for pattern in ("map-timestep", "timeseries-point"):
            for rep in range(2):
                store.put_result(record(dataset=dataset, pattern=pattern, repetition=rep))
    found = store.items(pattern="timeseries-point")
    assert {(i["dataset"], i["repetition"]) for i in found} == {("d1", 0), ("d1", 1), ("d2", 0), ("d2", 1)}
    assert all(i["pattern"] == "timeseries-point" for i in found)


def test_dataset_query_returns_every_kind_and_filters_by_kind(store):
    store.put_run("d1", status="SUCCEEDED", source="s3://ingest/incoming/a.nc")
    store.put_variant("d1", "paged-8MiB", size_bytes=123)
    store.put_result(record())
    store.put_failure("d1", "bench", "case-7", "incoming/a.nc: pattern beam-read needs a granule")
    store.put_summary("d1", {"balanced": "zarr-120x50x100"})
    assert {i["kind"] for i in store.items(dataset="d1")} == {"RUN", "VARIANT", "RESULT", "FAILURE", "SUMMARY"}
    [failure] = store.items(dataset="d1", kind="FAILURE")
    assert "beam-read" in failure["reason"]
    assert store.datasets() == ["d1"]


def test_cli_prints_table_csv_and_json(store, capsys):
    store.put_result(record())
    store.put_result(record(pattern="timeseries-point", wall_s=3.5))
    assert cli.main(["results", "--pattern", "timeseries-point"]) == 0
    table = capsys.readouterr().out
    assert "timeseries-point" in table and "map-timestep" not in table
    assert cli.main(["results", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert sorted(r["pattern"] for r in rows) == ["map-timestep", "timeseries-point"]
    assert cli.main(["results", "--format", "json", "--dataset", "d1"]) == 0
    items = json.loads(capsys.readouterr().out)
    assert {i["wall_s"] for i in items} == {0.25, 3.5}
    assert all("pk" not in i for i in items)


def test_cli_names_a_missing_table(store, capsys):
    assert cli.main(["results", "--table", "nope"]) == 2
    assert "results table 'nope' not found" in capsys.readouterr().err


def test_numpy_scalars_in_records_are_stored_as_numbers(store):
    import numpy as np

    store.put_result(record(wall_s=np.float64(0.5)) | {"points": np.int64(7), "lat_min": np.float32(1.5)})
    [item] = store.items(kind="RESULT")
    assert (item["wall_s"], item["points"], item["lat_min"]) == (0.5, 7, 1.5)
