"""Two runs of the same demo recommend the same layout: the choice follows what the intervals say,
not which of two close medians came out ahead this time."""

from __future__ import annotations

from layoutlab.report.decision import as_fast, decide

PLATFORM = "local-lambda"
PROFILE = {"name": "local-lambda", "kind": "lambda", "memory_mb": 1769, "local": True}


def records(times: dict[str, dict[str, float]], spreads: dict[tuple[str, str], tuple[float, ...]]) -> list[dict]:
    """variant -> pattern -> median s; (variant, pattern)'s repetitions spread by its factors (else TIGHT)."""
    out = []
    for variant, by_pattern in times.items():
        for pattern, wall in by_pattern.items():
            for rep, factor in enumerate(spreads.get((variant, pattern), TIGHT)):
                out.append({"kind": "RESULT", "dataset": "grid", "variant": variant, "pattern": pattern,
                            "reader": "zarr-obstore", "platform": PLATFORM, "platform_profile": PROFILE,
                            "repetition": rep, "wall_s": wall * factor, "checksum_ok": True, "status": "ok",
                            "peak_rss_mb": 150.0, "requests": 5, "get_requests": 5, "head_requests": 0})
    return out


TIGHT = (1.0, 1.01, 0.99)
SWINGING = (1.0, 2.0, 0.67)  # a measurement that swings: its median can land well below a close rival's


def test_a_variant_measurably_faster_on_one_pattern_and_no_slower_on_the_other_is_kept():
    """B's map median came out low this run (0.15 s, a swinging measurement), so the product of medians
    picks B (0.24 x 0.15 < 0.20 x 0.20); but A is measurably faster on the time series and not measurably
    slower on maps: A is kept, as it would be in a run where B's map median came out high."""
    times = {"original": {"timeseries-point": 1.0, "map-timestep": 1.0},
             "zarr-a": {"timeseries-point": 0.20, "map-timestep": 0.20},
             "zarr-b": {"timeseries-point": 0.24, "map-timestep": 0.15}}
    variants = {"original": {"variant_kind": "original", "size_bytes": 9_300_000},
                "zarr-a": {"variant_kind": "rechunk-zarr", "size_bytes": 9_400_000, "convert_s": 0.6},
                "zarr-b": {"variant_kind": "rechunk-zarr", "size_bytes": 9_600_000, "convert_s": 0.7}}
    decided = decide(records(times, {("zarr-b", "map-timestep"): SWINGING}), variants=variants)
    result = decided["platforms"][PLATFORM]
    assert result["balanced_product"]["variant"] == "zarr-b"
    assert result["choice"]["variant"] == "zarr-a"
    assert "reads measurably faster than zarr-b" in result["choice"]["why"]


def test_an_undecided_comparison_around_a_ratio_of_1_3_is_not_as_fast():
    assert not as_fast({"verdict": "no measurable difference", "ratio": 1.34, "interval": [0.73, 1.38]})
    assert as_fast({"verdict": "no measurable difference", "ratio": 1.04, "interval": [0.9, 1.2]})
    assert as_fast({"verdict": "faster", "ratio": 0.6, "interval": [0.5, 0.7]})
    assert not as_fast({"verdict": "slower", "ratio": 1.5, "interval": [1.2, 1.8]})


def test_a_choice_the_evidence_cannot_separate_from_a_rival_says_so_and_what_would():
    """Two variants whose repetitions overlap on the patterns chosen on: whichever median comes out ahead, the
    sentence names the other, the intervals, and that more repetitions would tell them apart."""
    times = {"original": {"timeseries-point": 1.0, "map-timestep": 1.0},
             "zarr-a": {"timeseries-point": 0.20, "map-timestep": 0.20},
             "zarr-b": {"timeseries-point": 0.21, "map-timestep": 0.205}}
    variants = {"original": {"variant_kind": "original", "size_bytes": 9_300_000},
                "zarr-a": {"variant_kind": "rechunk-zarr", "size_bytes": 9_400_000, "convert_s": 0.6},
                "zarr-b": {"variant_kind": "rechunk-zarr", "size_bytes": 9_300_500, "convert_s": 0.5}}
    swing = {(v, p): SWINGING for v in ("zarr-a", "zarr-b") for p in ("timeseries-point", "map-timestep")}
    result = decide(records(times, swing), variants=variants)["platforms"][PLATFORM]
    kept = result["choice"]["variant"]
    other = ({"zarr-a", "zarr-b"} - {kept}).pop()
    assert set(result["choice"]["unseparated"]) == {other}
    assert f"cannot separate {kept} from {other}" in result["sentence"]
    assert "More repetitions" in result["sentence"]
    # measurably apart: nothing of the kind is said
    clear = decide(records(times, {}), variants=variants)["platforms"][PLATFORM]
    assert clear["choice"]["unseparated"] == {} and "cannot separate" not in clear["sentence"]


def test_a_trade_off_the_intervals_do_not_settle_is_said_not_printed_as_a_finding():
    """The ATL03-like demo granule (2026-11-26): paged-auto fastest for beam-read, icechunk-virtual for open +
    list; the worst-case slowdown kept one run after run in turn (icechunk's beam-read median 0.50 s one run,
    0.93 s the next). Each is measurably slower than the other somewhere, so neither is "unseparated" in the
    old sense; but where the slowdowns' intervals overlap (here 1.77x vs 1.36x, each spread +-20 %) the
    sentence names the rival and says another run may keep it. A clear gap settles the trade-off."""
    times = {"original": {"beam-read": 0.87, "granule-open-list": 2.69},
             "paged-auto": {"beam-read": 0.525, "granule-open-list": 1.88},
             "icechunk-virtual": {"beam-read": 0.93, "granule-open-list": 1.38}}
    variants = {"original": {"variant_kind": "original", "size_bytes": 56_900_000},
                "paged-auto": {"variant_kind": "repack-paged", "size_bytes": 58_700_000, "convert_s": 3.8},
                "icechunk-virtual": {"variant_kind": "icechunk-virtual", "size_bytes": 57_300_000, "convert_s": 21.5}}
    swinging = {("icechunk-virtual", "beam-read"): (1.0, 0.8, 1.2), ("paged-auto", "granule-open-list"): (1.0, 0.85, 1.15)}
    result = decide(records(times, swinging), variants=variants)["platforms"][PLATFORM]
    assert result["choice"]["variant"] == "paged-auto"
    assert set(result["choice"]["unseparated"]) == {"icechunk-virtual"}
    assert "cannot separate paged-auto from icechunk-virtual" in result["sentence"]
    assert "another run may keep any of them" in result["sentence"]

    settled = {"original": {"beam-read": 0.87, "granule-open-list": 2.69},
               "paged-auto": {"beam-read": 0.30, "granule-open-list": 1.45},
               "icechunk-virtual": {"beam-read": 0.93, "granule-open-list": 1.38}}
    result = decide(records(settled, {}), variants=variants)["platforms"][PLATFORM]
    assert result["choice"]["variant"] == "paged-auto"
    assert not result["choice"]["unseparated"]
    assert "cannot separate" not in result["sentence"]
