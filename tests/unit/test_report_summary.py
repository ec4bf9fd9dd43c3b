"""The per-dataset summary picks winners the way Nguyen et al. define them."""

from __future__ import annotations

import re

import pytest

from layoutlab.report.summary import summarize

# seconds: (timeseries-point, map-timestep) per variant — the paper's trade-off in miniature
TIMES = {"zarr-ts": (0.1, 9.0), "zarr-map": (8.0, 0.1), "zarr-bal": (0.5, 0.6), "original": (4.0, 0.3)}


def records(platform="local-lambda", reps=3, bad=()):
    out = []
    for variant, (ts, mp) in TIMES.items():
        for pattern, wall in (("timeseries-point", ts), ("map-timestep", mp)):
            for rep in range(reps):
                for reader, factor in (("fast", 1.0), ("slow", 3.0)):
                    out.append({"dataset": "d", "variant": variant, "pattern": pattern, "reader": reader,
                                "platform": platform, "repetition": rep, "wall_s": wall * factor * (1 + rep / 100),
                                "checksum_ok": (variant, pattern) not in bad})
    return out


def test_best_variant_bias_and_balanced_choice():
    summary = summarize("d", records())
    plat = summary["platforms"]["local-lambda"]
    ts = plat["patterns"]["timeseries-point"]
    assert ts["best_variant"] == "zarr-ts" and ts["best_reader"] == "fast"
    assert ts["worst_variant"] == "zarr-map"
    assert ts["performance_bias"] == pytest.approx(80.0, rel=0.01)
    assert plat["balanced_product"]["variant"] == "zarr-bal"
    assert plat["min_worst_slowdown"]["variant"] == "zarr-bal"


def test_results_whose_values_did_not_check_out_are_not_counted():
    summary = summarize("d", records(bad={("zarr-ts", "timeseries-point")}))
    ts = summary["platforms"]["local-lambda"]["patterns"]["timeseries-point"]
    assert ts["best_variant"] == "zarr-bal"
    assert summary["results_excluded"] == 6


def test_each_platform_is_summarised_on_its_own():
    summary = summarize("d", records("local-lambda") + records("local-fargate"))
    assert set(summary["platforms"]) == {"local-lambda", "local-fargate"}


def test_scaling_reports_aggregate_throughput_and_efficiency_per_worker_count():
    from layoutlab.report.summary import scaling

    records = []
    for n, seconds in ((1, 1.0), (2, 1.0), (4, 2.0)):  # 4 workers: the store saturates
        for k in range(n):
            records.append({"kind": "RESULT", "pattern": "slab-read", "variant": "zarr", "platform": "lambda-1769",
                            "repetition": 0, "checksum_ok": True, "load_s": seconds, "bytes_needed": 2**20 * 100,
                            "pattern_params": {"workers": n, "worker": k, "scaling": "weak"}})
    points = scaling(records)["lambda-1769"]["zarr"]["weak"]
    assert [(p["workers"], round(p["aggregate_mib_s"])) for p in points] == [(1, 100), (2, 200), (4, 200)]
    assert [round(p["efficiency"], 2) for p in points] == [1.0, 1.0, 0.5]
    summary = summarize("d", records)
    assert summary["platforms"] == {}  # slab reads are not a pattern to pick a layout by


def test_the_summary_item_carries_costs_budget_choice_and_results_prints_them(capsys):
    """What `layoutlab results --kind SUMMARY` shows under the table: the recommendation, the recipe, then the
    size budget, each layout's costs and the seeds' effect, from the SUMMARY item alone."""
    from layoutlab.commands.results import _print_recipes
    from layoutlab.report.decision import decide

    variants = {"original": {"variant_kind": "original", "size_bytes": 10_000_000},
                "zarr-bal": {"variant_kind": "rechunk-zarr", "size_bytes": 9_000_000, "size_overhead": -0.1,
                             "convert_s": 3.0, "platform": "local-lambda"}}
    recs = [dict(r, kind="RESULT", platform_profile={"kind": "lambda", "memory_mb": 1769}, get_requests=6,
                 requests=6, head_requests=0) for r in records()]
    decided = decide(recs, variants=variants)
    summary = summarize("d", recs, decided)
    costs = summary["costs"]["local-lambda"]
    assert costs["original"]["conversion_usd"] == 0 and costs["zarr-bal"]["conversion_usd"] > 0
    assert costs["zarr-bal"]["conversion"]["zarr-bal"]["billed"] == "Lambda 1769 MB, 3000 ms, 1 invocation(s)"
    assert costs["zarr-ts"]["conversion_usd"] is None  # no VARIANT item: its conversion is not guessed
    assert summary["choice"]["local-lambda"]["variant"] == "zarr-bal"
    assert summary["cost_yardstick"] == {"months": 12, "reads_per_month": 1000}
    item = {"kind": "SUMMARY", "dataset": "d", "recommendation": decided["sentence"], "recipe_text": "# recipe",
            **summary}
    _print_recipes([item], "table")
    out = capsys.readouterr().out
    assert f"d: {decided['sentence']}" in out and "# recipe" in out
    assert "size budget ([!]: a paged variant, or references, over its budget):" in out
    assert re.search(r"zarr-bal +rechunk-zarr +9\.0 +-10\.0% vs a 5% budget \(default\): within", out)
    assert re.search(r"zarr-bal +\$0\.0000\d\d +3\.0 +\$0\.000\d+ +\$0\.0\d+", out)  # convert $, s, S3 $, reads
    # an older SUMMARY item without those fields prints what it has, no error
    _print_recipes([{"kind": "SUMMARY", "dataset": "d", "recommendation": "keep it"}], "table")
    assert capsys.readouterr().out == "\nd: keep it\n"


def test_the_rounds_of_repetitions_are_told_under_the_recommendation(capsys):
    """The pipeline's SUMMARY says how many rounds of repetitions ran and what stayed undecided: shown by
    `layoutlab results --kind SUMMARY`, the demo's report text and the HTML report's notes."""
    from layoutlab.commands.results import _print_recipes
    from layoutlab.report import html, tables

    text = "2 rounds of repetitions (3, then up to 6); 1 comparison still undecided at 6: paged-8MiB vs original"
    summary = {"kind": "SUMMARY", "dataset": "d", "recommendation": "keep original",
               "repetition_rounds": {"rounds": 2, "text": text}}
    assert tables.decision_lines(summary)[-1] == text
    _print_recipes([summary], "table")
    assert text in capsys.readouterr().out
    recs = [dict(r, kind="RESULT") for r in records()]
    section = html.build_section("d", {"RESULT": recs, "SUMMARY": [summary]})
    assert text in section.notes
