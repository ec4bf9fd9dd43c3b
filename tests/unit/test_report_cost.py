"""$ per 1,000 accesses and storage $ per month, from measured results and a dated price file."""

from __future__ import annotations

import json

import pytest

from layoutlab.errors import BadInputFile
from layoutlab.report.cost import DEFAULT_PRICES, cost_table, load_prices, storage_costs


def record(platform, profile, wall_s, gets, heads=0, variant="zarr-a", pattern="timeseries-point"):
    return {"kind": "RESULT", "dataset": "d", "variant": variant, "pattern": pattern, "reader": "zarr-obstore",
            "platform": platform, "platform_profile": profile, "repetition": 0, "wall_s": wall_s,
            "checksum_ok": True, "requests": gets + heads, "get_requests": gets, "head_requests": heads,
            "request_counting": "proxy"}


def test_the_dated_price_file_names_its_sources_and_date():
    prices = load_prices()
    assert prices["retrieved"] == "2026-11-23"
    assert prices["source"]["lambda"].startswith("https://aws.amazon.com/")
    assert prices["lambda"]["usd_per_gb_second"] == 0.0000166667


def test_one_lambda_case_by_hand():
    prices = load_prices()
    rows = cost_table([record("lambda-1769", {"kind": "lambda", "memory_mb": 1769, "vcpu": 1.0}, 0.2504, 12)],
                      {"zarr-a": {"size_bytes": 3 * 2**30}}, prices)
    (row,) = rows
    # 0.2504 s bills 251 ms; 1769 MB = 1.7275390625 GB; 1.7275390625 x 0.251 x 0.0000166667 = 7.22687e-6 $ per access
    assert row["billed"] == "per access: 251 ms"
    assert row["compute_usd"] == pytest.approx(7.22687e-3, rel=1e-5)  # x 1,000 accesses
    assert row["invoke_usd"] == pytest.approx(0.0002)  # 1,000 x $0.20 / 1M
    assert row["s3_get_usd"] == pytest.approx(0.0048)  # 12,000 GETs x $0.0004 / 1,000
    assert row["usd_per_1000"] == pytest.approx(7.22687e-3 + 0.0002 + 0.0048, rel=1e-5)
    assert row["storage_usd_per_month"] == pytest.approx(3 * 0.023)


def test_fargate_batch_pays_the_one_minute_minimum_once():
    profile = {"kind": "fargate", "memory_mb": 2048, "vcpu": 1}
    short, long = cost_table([record("local-fargate", profile, 0.01, 2),
                              record("local-fargate", profile, 0.5, 2, variant="zarr-b")])
    per_second = (1 * 0.04048 + 2 * 0.004445) / 3600
    assert short["billed"] == "one task: 60 s"  # 1,000 x 10 ms = 10 s, billed the 60 s minimum
    assert short["compute_usd"] == pytest.approx(60 * per_second)
    assert long["billed"] == "one task: 500 s"
    assert long["compute_usd"] == pytest.approx(500 * per_second)


def test_heads_are_priced_like_gets_and_uncounted_requests_stay_unknown():
    profile = {"kind": "lambda", "memory_mb": 1024, "vcpu": 0.58}
    counted = record("lambda-1024", profile, 0.1, 3, heads=1)
    uncounted = dict(record("lambda-1024", profile, 0.1, 0, variant="zarr-b"), request_counting="none",
                     requests=None, get_requests=None, head_requests=None)
    rows = {r["variant"]: r for r in cost_table([counted, uncounted])}
    assert rows["zarr-a"]["s3_get_usd"] == pytest.approx(4 * 0.0004)
    assert rows["zarr-b"]["s3_get_usd"] is None


def test_lists_are_priced_at_the_list_tier():
    """S3 bills LIST with PUT/COPY/POST ($0.005 per 1,000), not with GET; client counts say list_requests."""
    profile = {"kind": "lambda", "memory_mb": 1024, "vcpu": 0.58}
    listing = dict(record("lambda-1024", profile, 0.1, 3), list_requests=2, request_counting="client")
    (row,) = cost_table([listing])
    assert row["list_requests"] == 2
    assert row["s3_get_usd"] == pytest.approx(3 * 0.0004)
    assert row["s3_list_usd"] == pytest.approx(2 * 0.005)
    assert row["usd_per_1000"] == pytest.approx(row["compute_usd"] + row["invoke_usd"] + 3 * 0.0004 + 2 * 0.005)


def test_a_broken_price_file_names_the_file_and_the_missing_price(tmp_path):
    prices = json.loads(DEFAULT_PRICES.read_text())
    del prices["s3"]["usd_per_1000_get"]
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(prices))
    with pytest.raises(BadInputFile, match=r"prices\.json: needs a non-negative number at s3\.usd_per_1000_get"):
        load_prices(path)
    with pytest.raises(BadInputFile, match="not found"):
        load_prices(tmp_path / "missing.json")


def test_storage_costs_per_variant_cheapest_first():
    rows = storage_costs({"big": {"size_bytes": 2 * 2**30}, "small": {"size_bytes": 2**29}, "unknown": {}})
    assert [(r["variant"], round(r["storage_usd_per_month"], 4)) for r in rows] == [("small", 0.0115), ("big", 0.046)]
