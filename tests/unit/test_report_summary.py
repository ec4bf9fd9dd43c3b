"""The per-dataset summary picks winners the way Nguyen et al. define them."""

from __future__ import annotations

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
