"""The decision: winners per pattern and reader, the workload mix, the Pareto front, one sentence."""

from __future__ import annotations

import pytest

from layoutlab.errors import UserError
from layoutlab.report.decision import MixError, decide, pareto_front, parse_mix

# seconds: (timeseries-point, map-timestep) per variant — the paper's trade-off in miniature
TIMES = {"zarr-ts": (0.1, 9.0), "zarr-map": (8.0, 0.1), "zarr-bal": (0.5, 0.6), "original": (4.0, 0.3)}


def records(platform="lambda-1769", times=TIMES, reps=3):
    out = []
    for variant, (ts, mp) in times.items():
        for pattern, wall in (("timeseries-point", ts), ("map-timestep", mp)):
            for rep in range(reps):
                for reader, factor in (("fast", 1.0), ("slow", 3.0)):
                    if variant == "original" and reader == "slow" and pattern == "map-timestep":
                        factor = 0.5  # the "slow" reader is the better one for this one case
                    out.append({"kind": "RESULT", "dataset": "d", "variant": variant, "pattern": pattern,
                                "reader": reader, "platform": platform, "repetition": rep,
                                "wall_s": wall * factor * (1 + rep / 100), "checksum_ok": True,
                                "peak_rss_mb": 100.0 + rep})
    return out


def test_without_a_mix_the_balanced_variant_is_recommended_in_one_sentence():
    result = decide(records())
    plat = result["platforms"]["lambda-1769"]
    assert plat["balanced_product"]["variant"] == "zarr-bal"
    assert plat["patterns"]["timeseries-point"]["performance_bias"] == pytest.approx(80.0, rel=0.02)
    assert result["sentence"].startswith("On lambda-1769, keep zarr-bal")
    assert result["sentence"].count(".") >= 1 and "\n" not in result["sentence"]


def test_a_workload_mix_flips_the_choice():
    series_heavy = decide(records(), mix=parse_mix("timeseries-point=0.9,map-timestep=0.1"))
    map_heavy = decide(records(), mix=parse_mix("timeseries-point=0.1,map-timestep=0.9"))
    assert series_heavy["platforms"]["lambda-1769"]["mix_choice"]["variant"] == "zarr-bal"
    assert map_heavy["platforms"]["lambda-1769"]["mix_choice"]["variant"] == "original"
    only_series = decide(records(), mix={"timeseries-point": 1.0})
    assert only_series["platforms"]["lambda-1769"]["mix_choice"]["variant"] == "zarr-ts"
    assert "keep zarr-ts" in only_series["sentence"] and "timeseries-point 100%" in only_series["sentence"]
    # 0.9 x 0.5 + 0.1 x 0.6 = 0.51 s for zarr-bal (median of 1.00, 1.01, 1.02 x)
    assert series_heavy["platforms"]["lambda-1769"]["mix_choice"]["mix_wall_s"] == pytest.approx(0.51 * 1.01)


def test_best_variant_is_given_per_reader_too():
    plat = decide(records())["platforms"]["lambda-1769"]
    maps = plat["patterns"]["map-timestep"]
    assert maps["best_variant"] == "zarr-map" and maps["best_reader"] == "fast"
    assert maps["by_reader"]["slow"]["best_variant"] == "original"  # 0.3 x 0.5 beats 0.1 x 3


def test_pareto_front_keeps_only_undominated_variants():
    points = [
        {"variant": "fast-big", "read_s": 0.1, "size_bytes": 900, "convert_s": 5.0, "peak_rss_mb": 100},
        {"variant": "slow-small", "read_s": 0.9, "size_bytes": 100, "convert_s": 5.0, "peak_rss_mb": 100},
        {"variant": "worse", "read_s": 0.2, "size_bytes": 950, "convert_s": 6.0, "peak_rss_mb": 100},
        {"variant": "free", "read_s": 1.0, "size_bytes": 100, "convert_s": 0.0, "peak_rss_mb": 100},
    ]
    marked = {p["variant"]: p for p in pareto_front(points)}
    assert {v for v, p in marked.items() if p["on_front"]} == {"fast-big", "slow-small", "free"}
    assert marked["worse"]["dominated_by"] == ["fast-big"]


def test_pareto_front_of_a_decision_uses_variant_sizes_and_conversion_times():
    variants = {"zarr-ts": {"size_bytes": 10, "convert_s": 1.0}, "zarr-map": {"size_bytes": 10, "convert_s": 1.0},
                "zarr-bal": {"size_bytes": 10, "convert_s": 1.0},
                "original": {"size_bytes": 10, "variant_kind": "original"}}
    pareto = decide(records(), variants=variants)["platforms"]["lambda-1769"]["pareto"]
    assert pareto["axes"] == ["read_s", "size_bytes", "convert_s", "peak_rss_mb"]
    by_variant = {p["variant"]: p for p in pareto["points"]}
    assert by_variant["original"]["convert_s"] == 0.0  # the original costs nothing to make
    # median over the two patterns: zarr-bal 0.55 s; original 2.075 s but free to make;
    # zarr-map 4.05 s and zarr-ts 4.55 s cost as much as zarr-bal to make and read slower
    assert set(pareto["front"]) == {"zarr-bal", "original"}
    assert by_variant["zarr-ts"]["dominated_by"] == ["original", "zarr-bal", "zarr-map"]
    without_sizes = decide(records())["platforms"]["lambda-1769"]["pareto"]
    assert without_sizes["axes"] == ["read_s", "peak_rss_mb"]


def test_parse_mix_errors_say_what_is_wrong():
    with pytest.raises(MixError, match="unknown pattern 'timeseries-pint'.*known: .*timeseries-point"):
        parse_mix("timeseries-pint=0.5,map-timestep=0.5")
    with pytest.raises(MixError, match="sum to 1.4, not 1"):
        parse_mix("timeseries-point=0.7,map-timestep=0.7")
    with pytest.raises(MixError, match="PATTERN=SHARE"):
        parse_mix("timeseries-point")
    with pytest.raises(MixError, match="positive"):
        parse_mix("timeseries-point=-0.5,map-timestep=1.5")
    thirds = parse_mix("timeseries-point=0.333,map-timestep=0.333,map-time-mean=0.333")
    assert sum(thirds.values()) == pytest.approx(1.0, abs=1e-12)


def test_a_mix_naming_an_unmeasured_pattern_is_an_error():
    with pytest.raises(MixError, match="map-time-mean were not measured"):
        decide(records(), mix={"map-time-mean": 1.0})


def test_decide_takes_one_dataset():
    other = [dict(r, dataset="e") for r in records()]
    with pytest.raises(UserError, match="one dataset"):
        decide(records() + other)


def test_results_whose_values_did_not_check_out_do_not_count():
    bad = [dict(r, checksum_ok=False) if r["variant"] == "zarr-ts" else r for r in records()]
    result = decide(bad)
    assert result["platforms"]["lambda-1769"]["patterns"]["timeseries-point"]["best_variant"] == "zarr-bal"
    assert result["results_excluded"] == 12


def test_results_with_nothing_to_check_count_and_wrong_values_do_not():
    # A user's own file: values cannot be regenerated, so every check is None (not False).
    unchecked = [{**r, "checksum_ok": None} for r in records()]
    result = decide(unchecked)
    assert result["sentence"].startswith("On lambda-1769, keep zarr-bal")
    assert result["results_counted"] == len(unchecked) and result["results_excluded"] == 0
    # Values checked and found wrong: the fastest variant for maps is ignored, and counted as excluded.
    wrong = [{**r, "checksum_ok": False} if r["variant"] == "zarr-map" else r for r in records()]
    result = decide(wrong)
    maps = result["platforms"]["lambda-1769"]["patterns"]["map-timestep"]
    assert maps["best_variant"] != "zarr-map"
    assert result["results_excluded"] == sum(1 for r in wrong if r["checksum_ok"] is False)


def test_every_comparison_with_the_original_carries_an_interval_and_a_verdict():
    plat = decide(records())["platforms"]["lambda-1769"]
    comparison = plat["choice"]["comparison"]
    assert set(comparison) == {"timeseries-point", "map-timestep"}
    ts, maps = comparison["timeseries-point"], comparison["map-timestep"]
    assert ts["verdict"] == "faster" and ts["interval"][0] <= ts["ratio"] <= ts["interval"][1] < 1
    assert maps["verdict"] == "slower" and maps["interval"][0] > 1
    assert "95% interval" in plat["sentence"]
    assert decide(records())["sentence"] == decide(records())["sentence"]  # seeded: the same answer every run


def test_no_measurable_difference_keeps_the_original():
    # every variant within the repetitions' spread of the original: nothing is measurably faster
    noisy = []
    for variant in ("original", "zarr-a", "zarr-b"):
        for pattern in ("timeseries-point", "map-timestep"):
            for rep, wall in enumerate((1.0, 1.3, 0.8) if variant == "original" else (0.95, 1.25, 0.85)):
                noisy.append({"kind": "RESULT", "dataset": "d", "variant": variant, "pattern": pattern,
                              "reader": "r", "platform": "lambda-1769", "repetition": rep, "wall_s": wall,
                              "checksum_ok": True, "peak_rss_mb": 100.0})
    plat = decide(noisy)["platforms"]["lambda-1769"]
    assert plat["choice"]["variant"] == "original" and plat["choice"]["no_measurable_difference"]
    assert {c["verdict"] for c in plat["choice"]["comparison"].values()} == {"no measurable difference"}
    assert plat["sentence"].startswith("On lambda-1769, keep the original: no variant reads measurably faster")


def test_one_repetition_cannot_decide_and_keeps_the_original():
    plat = decide(records(reps=1))["platforms"]["lambda-1769"]
    assert plat["choice"]["variant"] == "original"
    assert all(c["interval"] is None and c["verdict"] == "too few repetitions to tell"
               for c in plat["choice"]["comparison"].values())
    assert "3 needed" in plat["sentence"]


def test_a_dominated_variant_is_never_recommended():
    # zarr-bal is the balanced choice, but zarr-twin reads as fast, is smaller and as cheap to make
    times = {**TIMES, "zarr-twin": (0.5, 0.6)}
    variants = {name: {"size_bytes": 10, "convert_s": 1.0} for name in times}
    variants["zarr-twin"]["size_bytes"] = 5
    variants["original"] = {"size_bytes": 10, "variant_kind": "original"}
    plat = decide(records(times=times), variants=variants)["platforms"]["lambda-1769"]
    points = {p["variant"]: p for p in plat["pareto"]["points"]}
    assert points["zarr-bal"]["dominated_by"] == ["zarr-twin"]
    assert plat["choice"]["variant"] == "zarr-twin" and plat["choice"]["replaced_dominated"] == "zarr-bal"
    assert plat["sentence"].startswith("On lambda-1769, keep zarr-twin: zarr-bal was chosen first")
    assert not points[plat["choice"]["variant"]]["dominated_by"]
