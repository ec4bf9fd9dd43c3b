"""The recommendation weighs what a layout costs: where two choices read no measurably differently, the
cheaper one is kept (a virtual variant that reads as fast as a copy wins), and the sentence says which
cost decided it; the original kept for want of a measurable difference says what converting would cost."""

from __future__ import annotations

import pytest

from layoutlab.report.cost import conversion_usd, layout_costs, load_prices
from layoutlab.report.decision import decide

PLATFORM = "local-lambda"
PROFILE = {"name": "local-lambda", "kind": "lambda", "memory_mb": 1769, "local": True}
ORIGINAL_BYTES = 30_000_000
SPREAD = (1.0, 1.08, 0.93, 1.04, 0.96)  # five repetitions' noise around each case's median


def results(times: dict[tuple[str, str], float], gets: dict[str, int], patterns=("beam-read",)) -> list[dict]:
    """(variant, reader) -> median wall s, the same for every pattern; ``gets``: GETs per read of each variant."""
    out = []
    for (variant, reader), wall in times.items():
        for pattern in patterns:
            for rep, factor in enumerate(SPREAD):
                out.append({"kind": "RESULT", "dataset": "granule", "variant": variant, "pattern": pattern,
                            "reader": reader, "platform": PLATFORM, "platform_profile": PROFILE, "repetition": rep,
                            "wall_s": wall * factor, "checksum_ok": True, "status": "ok", "peak_rss_mb": 150.0,
                            "requests": gets[variant], "get_requests": gets[variant], "head_requests": 0,
                            "request_counting": "proxy"})
    return out


def variants(**overrides) -> dict[str, dict]:
    items = {
        "original": {"variant": "original", "variant_kind": "original", "size_bytes": ORIGINAL_BYTES,
                     "status": "READY"},
        "paged-8MiB": {"variant": "paged-8MiB", "variant_kind": "repack-paged", "size_bytes": 42_000_000,
                       "source_bytes": ORIGINAL_BYTES, "size_overhead": 0.4, "convert_s": 5.0,
                       "platform": PLATFORM, "status": "READY",
                       "spec": {"kind": "repack-paged", "page_size": 8 * 2**20}},
        "kerchunk-original": {"variant": "kerchunk-original", "variant_kind": "virtual-kerchunk",
                              "size_bytes": 1_000_000, "source_bytes": ORIGINAL_BYTES, "size_overhead": -0.97,
                              "convert_s": 2.0, "platform": PLATFORM, "status": "READY",
                              "spec": {"kind": "virtual-kerchunk", "over": "original"}},
    }
    for name, fields in overrides.items():
        items[name.replace("_", "-")] = {**items[name.replace("_", "-")], **fields}
    return items


GETS = {"original": 40, "paged-8MiB": 4, "kerchunk-original": 4}


def test_references_that_read_as_fast_as_the_copy_win_on_cost_and_the_sentence_gives_the_figures():
    records = results({("original", "h5py-s3fs-aligned"): 1.0, ("paged-8MiB", "h5py-s3fs-aligned"): 0.30,
                       ("kerchunk-original", "kerchunk-fsspec"): 0.31}, GETS)
    decided = decide(records, variants=variants())
    choice = decided["platforms"][PLATFORM]["choice"]
    # the rule picks the copy first (never more than 1.0x the fastest); the references read as fast and cost less
    assert choice["variant"] == "kerchunk-original"
    assert choice["cheaper_than"]["instead_of"] == "paged-8MiB"
    assert choice["cheaper_than"]["against_choice"]["beam-read"]["verdict"] == "no measurable difference"
    assert choice["cheaper_than"]["cost"] < choice["cheaper_than"]["instead_of_cost"]
    sentence = decided["sentence"]
    assert sentence.startswith("On local-lambda, keep kerchunk-original: it reads as fast as paged-8MiB")
    costs = decided["platforms"][PLATFORM]["costs"]
    mine, copy = costs["kerchunk-original"], costs["paged-8MiB"]
    assert mine["conversion_usd"] < copy["conversion_usd"]  # 2 s of Lambda against 5 s
    assert mine["storage_bytes"] == ORIGINAL_BYTES + 1_000_000 < copy["storage_bytes"] == 42_000_000
    from layoutlab.report.decision import usd

    for figure in (usd(mine["conversion_usd"]), usd(copy["conversion_usd"]), usd(mine["storage_usd_per_month"]),
                   usd(copy["storage_usd_per_month"])):
        assert figure in sentence
    assert "over 12 months at 1,000 reads a month" in sentence
    assert "Against the original: beam-read 0.31x" in sentence and "faster" in sentence


def test_the_copy_stays_when_it_reads_measurably_faster_than_the_cheaper_references():
    records = results({("original", "h5py-s3fs-aligned"): 1.0, ("paged-8MiB", "h5py-s3fs-aligned"): 0.30,
                       ("kerchunk-original", "kerchunk-fsspec"): 0.60}, GETS)
    choice = decide(records, variants=variants())["platforms"][PLATFORM]["choice"]
    assert choice["variant"] == "paged-8MiB" and choice["cheaper_than"] is None


def test_request_costs_count_a_references_variant_that_reads_as_fast_with_many_more_requests_loses():
    records = results({("original", "h5py-s3fs-aligned"): 1.0, ("paged-8MiB", "h5py-s3fs-aligned"): 0.30,
                       ("kerchunk-original", "kerchunk-fsspec"): 0.31},
                      {**GETS, "kerchunk-original": 400})  # 396 more GETs x 12,000 reads a year: ~$1.90
    choice = decide(records, variants=variants())["platforms"][PLATFORM]["choice"]
    assert choice["variant"] == "paged-8MiB" and choice["cheaper_than"] is None


def test_without_the_platform_a_variant_was_converted_on_no_cost_is_guessed_and_the_rule_stands():
    older = variants(paged_8MiB={"platform": None}, kerchunk_original={"platform": None})
    records = results({("original", "h5py-s3fs-aligned"): 1.0, ("paged-8MiB", "h5py-s3fs-aligned"): 0.30,
                       ("kerchunk-original", "kerchunk-fsspec"): 0.31}, GETS)
    decided = decide(records, variants=older)
    costs = decided["platforms"][PLATFORM]["costs"]
    assert costs["paged-8MiB"]["conversion_usd"] is None
    assert costs["paged-8MiB"]["conversion"]["paged-8MiB"]["billed"] == \
        "the platform it was converted on was not recorded"
    assert costs["original"]["conversion_usd"] == 0
    assert decided["platforms"][PLATFORM]["choice"]["variant"] == "paged-8MiB"


def test_the_original_kept_for_want_of_a_difference_says_what_converting_would_have_cost():
    records = results({("original", "h5py-s3fs-aligned"): 0.50, ("paged-8MiB", "h5py-s3fs-aligned"): 0.49}, GETS)
    items = {k: v for k, v in variants().items() if k != "kerchunk-original"}
    decided = decide(records, variants=items)
    costs = decided["platforms"][PLATFORM]["costs"]
    from layoutlab.report.decision import usd

    extra = costs["paged-8MiB"]["storage_usd_per_month"] - costs["original"]["storage_usd_per_month"]
    assert decided["sentence"].startswith("On local-lambda, keep the original")
    assert (f"making paged-8MiB would cost {usd(costs['paged-8MiB']['conversion_usd'])} once and "
            f"{usd(extra)} a month more in S3") in decided["sentence"]


def test_a_kept_paged_variant_over_its_size_budget_is_flagged_in_the_sentence():
    records = results({("original", "h5py-s3fs-aligned"): 1.0, ("paged-8MiB", "h5py-s3fs-aligned"): 0.30}, GETS)
    items = {k: v for k, v in variants().items() if k != "kerchunk-original"}
    sentence = decide(records, variants=items)["sentence"]
    assert "keep paged-8MiB" in sentence
    assert "Size budget: paged-8MiB adds +40.0% vs a 5% budget (default): OVER." in sentence
    within = dict(items, **{"paged-8MiB": {**items["paged-8MiB"], "size_budget": 0.5, "within_budget": True}})
    assert "Size budget" not in decide(records, variants=within)["sentence"]


def test_conversion_is_priced_on_the_platform_it_ran_on():
    prices = load_prices()
    on_lambda = conversion_usd({"convert_s": 4.5185, "platform": "local-lambda"}, prices)
    # 4.5185 s bills 4,519 ms; 1769 MB = 1.7275390625 GB; x $0.0000166667 per GB-s, + $0.20 per million requests
    assert on_lambda["usd"] == pytest.approx(1.7275390625 * 4.519 * 0.0000166667 + 0.2e-6, rel=1e-6)
    assert on_lambda["billed"] == "Lambda 1769 MB, 4519 ms, 1 invocation(s)"
    fanned = conversion_usd({"convert_s": 4.5185, "platform": "lambda-1769", "rechunk": {"units": 4}}, prices)
    assert fanned["usd"] == pytest.approx(on_lambda["usd"] + 4 * 0.2e-6)  # each work unit an invocation
    on_fargate = conversion_usd({"convert_s": 12.0, "platform": "fargate-1-2048"}, prices)
    assert on_fargate["usd"] == pytest.approx(60 * (0.04048 + 2 * 0.004445) / 3600)  # the one-minute minimum
    assert conversion_usd({"convert_s": 1.0, "platform": "local"}, prices)["usd"] is None
    assert conversion_usd({"variant_kind": "original"}, prices)["usd"] == 0.0


def test_references_over_a_paged_copy_cost_the_copy_too():
    items = variants()
    items["kerchunk-paged-8MiB"] = {"variant": "kerchunk-paged-8MiB", "variant_kind": "virtual-kerchunk",
                                    "size_bytes": 900_000, "convert_s": 3.0, "platform": PLATFORM,
                                    "status": "READY", "spec": {"kind": "virtual-kerchunk", "over": "paged-8MiB"}}
    records = results({("original", "h5py-s3fs-aligned"): 1.0, ("kerchunk-paged-8MiB", "kerchunk-fsspec"): 0.3},
                      {**GETS, "kerchunk-paged-8MiB": 4})
    prices = load_prices()
    row = layout_costs(records, items, prices)[PLATFORM]["kerchunk-paged-8MiB"]
    assert list(row["conversion"]) == ["paged-8MiB", "kerchunk-paged-8MiB"]  # in the order they are made
    assert row["conversion_usd"] == pytest.approx(conversion_usd(items["paged-8MiB"], prices)["usd"]
                                                  + conversion_usd(items["kerchunk-paged-8MiB"], prices)["usd"])
    assert row["storage_bytes"] == 42_000_000 + 900_000
    assert row["requests_usd_per_1000"]["beam-read"] == pytest.approx(4 * 0.0004)
