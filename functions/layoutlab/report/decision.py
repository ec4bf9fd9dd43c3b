"""From one dataset's results to a decision: which layout to keep, and why.

Input: the dataset's result records (``results/schema.json``) and, optionally,
its VARIANT items (size, conversion time) and a workload mix. Everything is
computed per platform (Lambda and Fargate need not agree) from the median of
the repetitions whose values checked out.

Following Nguyen et al. (2023):
  * the *performance bias* of a pattern is the slowest variant's time over the
    fastest's;
  * the *balanced* choice minimises the product of the time-series and map
    times; we also give the variant with the smallest worst-case slowdown.
A variant's time for a pattern is that of its best reader (the layout is judged
by the best way to read it; the reader is named); ``by_reader`` keeps the
per-reader view.

Beyond the paper:
  * a *workload mix* (``parse_mix("timeseries-point=0.7,map-timestep=0.3")``)
    gives each variant the weighted mean of its pattern times; the mix choice
    minimises it;
  * the *Pareto front* over (read time, storage size, conversion time, peak
    memory): the variants no other variant beats on every axis at once; the
    recommendation is never a variant another one dominates;
  * *uncertainty*: every comparison of the chosen variant with the original
    carries a 95 % bootstrap interval of the ratio of their median times over
    the repetitions. Where no pattern is measurably faster than the original
    ("no measurable difference", or too few repetitions to tell), the original
    is kept: it needs no conversion and no extra storage;
  * *cost* (``cost.layout_costs``): conversion $ once, storage $ a month, S3
    request $ per 1,000 reads. When another variant reads no measurably slower
    than the chosen one on the patterns it was chosen on (every interval of
    their ratio reaches below 1 or lies below it), is measurably faster than
    the original on one of them, is on the Pareto front, and costs less, it is
    kept instead: a virtual variant that reads as fast as a copy wins on cost.
    Their read times being indistinguishable, so is the compute they bill; the
    costs weighed are conversion, storage and requests, over a yardstick of
    ``COST_MONTHS`` months at ``READS_PER_MONTH`` reads a month (shared over the
    patterns as the mix says, else equally). The sentence gives the figures;
  * *the seeds' effect* (``paged_reader_effect``): Lopez et al.'s pair, the
    original read with h5py's defaults against a paged copy read with the
    aligned reader, per pattern with its interval, whatever the choice.

A variant's size on the Pareto front is what must stay stored to read it
(``budget.storage_bytes``): references count the object they point at, and
their conversion time adds that of the copy they were made over.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from layoutlab.errors import UserError
from layoutlab.report import budget, cost

TIMESERIES_PATTERNS = ("timeseries-point", "timeseries-region-mean")
MAP_PATTERNS = ("map-timestep", "map-time-mean")
SCALING_PATTERN = "slab-read"  # reported by summary.scaling(), per worker count
# Mix weights are shares of the workload: they must sum to 1 within this much
# (rounding in hand-written mixes); within it they are normalised exactly.
MIX_SUM_TOLERANCE = 0.01
PARETO_AXES = ("read_s", "size_bytes", "convert_s", "peak_rss_mb")
# Bootstrap of the ratio of two medians: resamples, confidence, and the fewest repetitions of each
# side for an interval to mean anything (with fewer, the answer is "cannot tell").
BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95
MIN_REPETITIONS = 3
ORIGINAL = "original"
# The yardstick costs are weighed over (not a measurement: a year of keeping a layout, read a thousand times a
# month); decide() takes others.
COST_MONTHS = 12
READS_PER_MONTH = 1000
# Lopez et al.: the original with h5py's defaults against a paged copy with a reader aligned to its pages.
DEFAULT_READER = "h5py-s3fs-default"
ALIGNED_READER = "h5py-s3fs-aligned"


class MixError(UserError):
    """A workload mix that cannot be used (unknown pattern, bad weight, weights not summing to 1)."""


# -- medians -------------------------------------------------------------------
def measured(record: dict) -> bool:
    """A result that may be ranked: a RESULT that ran and whose values did not fail their check.

    ``checksum_ok`` is None when there was nothing to check against: a listing
    (granule-open-list), or a user's own file whose values cannot be regenerated.
    Those count; only values that were checked and found wrong (False) do not.
    """
    return (record.get("kind", "RESULT") == "RESULT" and record.get("status", "ok") == "ok"
            and record.get("checksum_ok") is not False)


def wrong_values(record: dict) -> bool:
    """A result whose values were checked and did not match the source: never ranked."""
    return record.get("kind", "RESULT") == "RESULT" and record.get("checksum_ok") is False


def good_results(records: list[dict]) -> list[dict]:
    """Result records that count: measured, a wall time, not a scaling study."""
    return [r for r in records
            if measured(r) and r.get("pattern") != SCALING_PATTERN and r.get("wall_s") is not None]


def median_field(records: list[dict], field: str) -> dict[tuple, float]:
    """(platform, pattern, variant, reader) -> median of ``field`` over good repetitions."""
    values: dict[tuple, list[float]] = defaultdict(list)
    for record in good_results(records):
        if record.get(field) is not None:
            values[(record["platform"], record["pattern"], record["variant"], record["reader"])].append(
                float(record[field]))
    return {key: statistics.median(v) for key, v in values.items()}


def median_times(records: list[dict]) -> dict[tuple, float]:
    """(platform, pattern, variant, reader) -> median wall_s over good repetitions."""
    return median_field(records, "wall_s")


def best_readers(medians: dict[tuple, float]) -> dict[tuple, tuple[float, str]]:
    """(platform, pattern, variant) -> (median wall_s, reader) of its fastest reader."""
    best: dict[tuple, tuple[float, str]] = {}
    for (platform, pattern, variant, reader), wall in sorted(medians.items()):
        key = (platform, pattern, variant)
        if key not in best or wall < best[key][0]:
            best[key] = (wall, reader)
    return best


def times_by_pattern(best: dict[tuple, tuple[float, str]], platform: str) -> dict[str, dict[str, float]]:
    """pattern -> variant -> best-reader wall time, on one platform."""
    by_pattern: dict[str, dict[str, float]] = defaultdict(dict)
    for (plat, pattern, variant), (wall, _) in best.items():
        if plat == platform:
            by_pattern[pattern][variant] = wall
    return dict(by_pattern)


def walls_by_key(records: list[dict]) -> dict[tuple, list[float]]:
    """(platform, pattern, variant, reader) -> every good repetition's wall_s."""
    values: dict[tuple, list[float]] = defaultdict(list)
    for record in good_results(records):
        values[(record["platform"], record["pattern"], record["variant"], record["reader"])].append(
            float(record["wall_s"]))
    return dict(values)


def ratio_interval(a: list[float], b: list[float], seed: int = 0) -> tuple[float, float] | None:
    """The ``CONFIDENCE`` bootstrap interval of median(a) / median(b); None with fewer than
    ``MIN_REPETITIONS`` on either side (an interval from one or two runs would claim too much).
    Seeded: the same records always give the same interval."""
    if min(len(a), len(b)) < MIN_REPETITIONS:
        return None
    import numpy as np

    rng = np.random.default_rng(seed)
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ma = np.median(xa[rng.integers(0, len(xa), (BOOTSTRAP_SAMPLES, len(xa)))], axis=1)
    mb = np.median(xb[rng.integers(0, len(xb), (BOOTSTRAP_SAMPLES, len(xb)))], axis=1)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(ma / mb, [tail, 100 - tail])
    return float(low), float(high)


def compare(a: list[float], b: list[float]) -> dict:
    """A against B: ratio of medians, its interval, and the verdict it supports."""
    ratio = statistics.median(a) / statistics.median(b)
    interval = ratio_interval(a, b)
    if interval is None:
        verdict = "too few repetitions to tell"
    elif interval[1] < 1:
        verdict = "faster"
    elif interval[0] > 1:
        verdict = "slower"
    else:
        verdict = "no measurable difference"
    return {"ratio": ratio, "interval": list(interval) if interval else None, "verdict": verdict,
            "repetitions": [len(a), len(b)]}


# -- Nguyen et al.'s measures ----------------------------------------------------------
def pattern_winners(walls: dict[str, float]) -> dict:
    """Fastest and slowest variant of one pattern and the performance bias (slowest / fastest)."""
    fastest = min(walls, key=walls.get)
    slowest = max(walls, key=walls.get)
    return {
        "best_variant": fastest,
        "best_wall_s": walls[fastest],
        "worst_variant": slowest,
        "worst_wall_s": walls[slowest],
        "performance_bias": walls[slowest] / walls[fastest] if walls[fastest] > 0 else math.inf,
        "wall_s_by_variant": dict(sorted(walls.items())),
    }


def balanced_product(by_pattern: dict[str, dict[str, float]]) -> dict | None:
    """The variant minimising (time-series time x map time), Nguyen et al.'s balanced choice."""
    series = [p for p in TIMESERIES_PATTERNS if p in by_pattern]
    maps = [p for p in MAP_PATTERNS if p in by_pattern]
    if not series or not maps:
        return None
    s, m = series[0], maps[0]
    candidates = sorted(set(by_pattern[s]) & set(by_pattern[m]))
    if not candidates:
        return None
    choice = min(candidates, key=lambda v: by_pattern[s][v] * by_pattern[m][v])
    return {"variant": choice, "patterns": [s, m],
            "timeseries_wall_s": by_pattern[s][choice], "map_wall_s": by_pattern[m][choice]}


def min_worst_slowdown(by_pattern: dict[str, dict[str, float]]) -> dict | None:
    """The variant whose worst slowdown against each pattern's fastest variant is smallest."""
    if not by_pattern:
        return None
    variants = sorted(set.intersection(*(set(w) for w in by_pattern.values())))
    if not variants:
        return None
    fastest = {p: min(w.values()) for p, w in by_pattern.items()}

    def worst(variant: str) -> float:
        return max(by_pattern[p][variant] / fastest[p] for p in by_pattern if fastest[p] > 0)

    choice = min(variants, key=worst)
    return {"variant": choice, "worst_slowdown": worst(choice)}


# -- workload mix ----------------------------------------------------------------
def known_patterns() -> list[str]:
    from layoutlab.bench.patterns import PATTERNS

    return [name for name in PATTERNS if name != SCALING_PATTERN]


def parse_mix(text: str) -> dict[str, float]:
    """``"timeseries-point=0.7,map-timestep=0.3"`` -> ``{pattern: share}``.

    Shares must be positive and sum to 1 (within 1%, then normalised exactly);
    a mix that sums to anything else is an error, not silently rescaled,
    because "0.7 + 0.7" is more likely a typo than a wish.
    """
    if not text or not text.strip():
        raise MixError("empty workload mix; expected e.g. 'timeseries-point=0.7,map-timestep=0.3'")
    known = known_patterns()
    mix: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        name = name.strip()
        if not sep:
            raise MixError(f"mix entry {part.strip()!r}: expected PATTERN=SHARE, e.g. 'map-timestep=0.3'")
        if name not in known:
            raise MixError(f"mix entry {part.strip()!r}: unknown pattern {name!r}; known: {', '.join(known)}")
        if name in mix:
            raise MixError(f"mix names pattern {name!r} twice")
        try:
            share = float(value)
        except ValueError:
            raise MixError(f"mix entry {part.strip()!r}: share {value.strip()!r} is not a number") from None
        if not share > 0 or math.isinf(share):
            raise MixError(f"mix entry {part.strip()!r}: share must be a positive number")
        mix[name] = share
    return normalise_mix(mix)


def normalise_mix(mix: dict[str, float]) -> dict[str, float]:
    total = sum(mix.values())
    if abs(total - 1.0) > MIX_SUM_TOLERANCE:
        raise MixError(f"mix shares sum to {total:g}, not 1: give each pattern's share of the workload "
                       f"(e.g. 0.7 and 0.3)")
    return {name: share / total for name, share in mix.items()}


def mix_times(by_pattern: dict[str, dict[str, float]], mix: dict[str, float]) -> dict[str, float]:
    """variant -> weighted mean time over the mix, for variants measured on every pattern of the mix."""
    missing = [p for p in mix if p not in by_pattern]
    if missing:
        raise MixError(f"mix pattern(s) {', '.join(missing)} were not measured for this dataset "
                       f"(measured: {', '.join(sorted(by_pattern)) or 'none'})")
    variants = set.intersection(*(set(by_pattern[p]) for p in mix))
    return {v: sum(share * by_pattern[p][v] for p, share in mix.items()) for v in sorted(variants)}


# -- Pareto front ----------------------------------------------------------------
def pareto_front(points: list[dict], axes=PARETO_AXES) -> list[dict]:
    """Mark each point ``on_front`` (no other point is <= on every axis and < on one) and name
    who dominates it. Axes missing (None) on any point are left out of the comparison for all
    points, and the axes used are listed in each point's ``axes``."""
    used = [a for a in axes if points and all(p.get(a) is not None for p in points)]
    out = []
    for p in points:
        dominated_by = [q["variant"] for q in points if q is not p
                        and all(q[a] <= p[a] for a in used) and any(q[a] < p[a] for a in used)]
        out.append({**p, "on_front": not dominated_by, "dominated_by": dominated_by, "axes": used})
    return out


def _variant_axes(variant: str, read_s: float, variants: dict[str, dict], peak_rss: float | None) -> dict:
    """The variant's point: size is what must stay stored to read it, conversion time that of every
    variant made for it (references over a paged copy: the copy's too)."""
    convert = 0.0 if variant == ORIGINAL or (variants.get(variant) or {}).get("variant_kind") == "original" else None
    if convert is None:
        times = [(variants.get(name) or {}).get("convert_s") for name in budget.making_order(variant, variants)]
        convert = None if any(t is None for t in times) else float(sum(times))
    return {"variant": variant, "read_s": read_s, "size_bytes": budget.storage_bytes(variant, variants),
            "convert_s": convert, "peak_rss_mb": peak_rss}


# -- the decision ------------------------------------------------------------------
def decide(records: list[dict], *, mix: dict[str, float] | None = None,
           variants: dict[str, dict] | None = None, prices: dict | None = None,
           cost_months: int = COST_MONTHS, reads_per_month: int = READS_PER_MONTH) -> dict:
    """The decision for ONE dataset's result records; see the module docstring.

    ``variants`` maps a variant name to its VARIANT item (``size_bytes``,
    ``convert_s``, ``platform``: what the convert step records); without it the
    Pareto front compares read time and peak memory only, and no cost can be
    weighed. ``prices``: ``cost.load_prices()``'s (default: the dated file).
    """
    datasets = sorted({r.get("dataset") for r in records if r.get("kind", "RESULT") == "RESULT"})
    if len(datasets) > 1:
        raise UserError(f"decide() takes one dataset's records; got {len(datasets)}: {', '.join(map(str, datasets))}")
    if mix is not None:
        mix = normalise_mix(dict(mix))
    variants = variants or {}
    medians = median_times(records)
    repetitions = walls_by_key(records)
    rss = median_field(records, "peak_rss_mb")
    best = best_readers(medians)
    costs, costs_note = _layout_costs(records, variants, prices)
    budgets = budget.budget_rows(variants)
    yardstick = {"months": cost_months, "reads_per_month": reads_per_month}
    platforms: dict[str, dict] = {}
    for platform in sorted({k[0] for k in best}):
        by_pattern = times_by_pattern(best, platform)
        patterns = {}
        for pattern, walls in sorted(by_pattern.items()):
            entry = pattern_winners(walls)
            entry["best_reader"] = best[(platform, pattern, entry["best_variant"])][1]
            readers: dict[str, dict[str, float]] = defaultdict(dict)
            for (plat, pat, variant, reader), wall in medians.items():
                if plat == platform and pat == pattern:
                    readers[reader][variant] = wall
            entry["by_reader"] = {reader: pattern_winners(w) for reader, w in sorted(readers.items())}
            patterns[pattern] = entry
        result = {"patterns": patterns, "balanced_product": balanced_product(by_pattern),
                  "min_worst_slowdown": min_worst_slowdown(by_pattern), "mix_choice": None}
        if mix:
            weighted = mix_times(by_pattern, mix)
            if weighted:
                choice = min(weighted, key=weighted.get)
                result["mix_choice"] = {"variant": choice, "mix_wall_s": weighted[choice],
                                        "wall_s_by_variant": weighted}
            read_time = weighted
            read_time_kind = "mix-weighted mean of best-reader median wall s"
        else:
            common = set.intersection(*(set(w) for w in by_pattern.values())) if by_pattern else set()
            read_time = {v: statistics.median(by_pattern[p][v] for p in by_pattern) for v in sorted(common)}
            read_time_kind = "median over patterns of best-reader median wall s"
        points = []
        for variant, read_s in read_time.items():
            peaks = [rss.get((platform, p, variant, best[(platform, p, variant)][1])) for p in by_pattern
                     if (platform, p, variant) in best]
            peaks = [x for x in peaks if x is not None]
            points.append(_variant_axes(variant, read_s, variants, max(peaks) if peaks else None))
        front = pareto_front(points)
        result["pareto"] = {"read_time": read_time_kind, "points": front,
                            "front": [p["variant"] for p in front if p["on_front"]],
                            "axes": front[0]["axes"] if front else []}
        result["costs"] = (costs or {}).get(platform, {})
        result["choice"] = choose(platform, result, mix, best, repetitions, yardstick=yardstick)
        result["sentence"] = recommendation_sentence(platform, result, mix, budgets)
        platforms[platform] = result
    primary = _primary_platform(platforms)
    return {
        "dataset": datasets[0] if datasets else None,
        "mix": mix,
        "results_counted": len(good_results(records)),
        "results_excluded": sum(1 for r in records if wrong_values(r) or (
            r.get("kind", "RESULT") == "RESULT" and r.get("status", "ok") != "ok")),
        "platforms": platforms,
        "primary_platform": primary,
        "sentence": platforms[primary]["sentence"] if primary else "No result checked out: nothing to recommend.",
        "cost_yardstick": yardstick,
        "costs_note": costs_note,
        "size_budget": budgets,
        "paged_reader_effect": paged_reader_effect(records, variants),
    }


def _primary_platform(platforms: dict) -> str | None:
    """The platform the headline sentence speaks for: the first Lambda one, else the first."""
    if not platforms:
        return None
    lambdas = [p for p in platforms if "lambda" in p]
    return (lambdas or sorted(platforms))[0]


def _candidate(result: dict, mix: dict | None) -> tuple[str, str, list[str]] | None:
    """(variant, why, patterns it was chosen on) by the rule that applies: mix, balanced, worst slowdown."""
    patterns = result["patterns"]
    if mix and result.get("mix_choice"):
        choice = result["mix_choice"]
        shares = ", ".join(f"{p} {share:.0%}" for p, share in mix.items())
        return (choice["variant"], f"it is fastest for the workload ({shares}) at {choice['mix_wall_s']:.3f} s "
                                   "per access on average", list(mix))
    if result.get("balanced_product"):
        b = result["balanced_product"]
        return (b["variant"], f"it balances time series ({b['timeseries_wall_s']:.3f} s) and maps "
                              f"({b['map_wall_s']:.3f} s) best (smallest product, as Nguyen et al. choose)",
                list(b["patterns"]))
    if result.get("min_worst_slowdown"):
        w = result["min_worst_slowdown"]
        return (w["variant"], f"it is never more than {w['worst_slowdown']:.1f}x slower than the best variant of "
                              "any pattern", sorted(patterns))
    return None


def _layout_costs(records: list[dict], variants: dict[str, dict],
                  prices: dict | None) -> tuple[dict | None, str | None]:
    """``cost.layout_costs`` and None, or None and why the costs cannot be computed (the decision goes on
    without weighing them: a price file or a platform name the summary step cannot price is no reason to
    give no recommendation)."""
    if not variants:
        return None, "no VARIANT items: conversion and storage costs unknown"
    try:
        return cost.layout_costs(records, variants, prices), None
    except UserError as error:
        return None, f"costs not weighed: {error}"


def workload_cost(row: dict | None, patterns: list[str], mix: dict | None, yardstick: dict) -> float | None:
    """$ of conversion once + ``months`` of storage and of the S3 requests of ``reads_per_month`` reads
    (shared over ``patterns`` by the mix, else equally); None when a part is unknown."""
    if not row or row.get("conversion_usd") is None or row.get("storage_usd_per_month") is None:
        return None
    per_1000 = [row["requests_usd_per_1000"].get(p) for p in patterns]
    if not patterns or any(v is None for v in per_1000):
        return None
    shares = [mix[p] for p in patterns] if mix else [1 / len(patterns)] * len(patterns)
    requests = sum(share * v for share, v in zip(shares, per_1000)) * yardstick["reads_per_month"] / cost.ACCESSES
    return row["conversion_usd"] + yardstick["months"] * (row["storage_usd_per_month"] + requests)


def _comparisons(platform: str, variant: str, against: str, patterns: list[str], best: dict, walls: dict) -> dict:
    """pattern -> compare(variant's best-reader repetitions, ``against``'s) where both were measured."""
    out = {}
    for pattern in patterns:
        mine, theirs = best.get((platform, pattern, variant)), best.get((platform, pattern, against))
        if mine and theirs:
            out[pattern] = compare(walls[(platform, pattern, variant, mine[1])],
                                   walls[(platform, pattern, against, theirs[1])])
    return out


# "As fast" for a cheaper variant to replace the chosen one: measurably faster, or no measurable
# difference with a ratio of medians within 1 + r. An interval that straddles 1 around a ratio of 1.3
# (3 repetitions give 0.7..1.4) is undecided, not equal: letting it decide made two runs of the same
# demo recommend different layouts (measured: paged vs Icechunk-virtual at 1.07-1.34x flipped on it).
EQUIVALENCE_RESOLUTION = 0.1


def as_fast(comparison: dict, resolution: float = EQUIVALENCE_RESOLUTION) -> bool:
    if comparison["verdict"] == "faster":
        return True
    return comparison["verdict"] == "no measurable difference" and comparison["ratio"] <= 1 + resolution


def measurably_better(platform: str, variant: str, on: list[str], result: dict, best: dict, walls: dict) -> str | None:
    """A variant on the Pareto front that reads measurably faster than ``variant`` (by more than the
    resolution) on some pattern of ``on`` and not measurably slower on any (the one faster on most patterns, then by name): the rules that pick
    a candidate work on medians, so two close variants can swap between runs; this turns to the one the
    intervals say is better."""
    found = []
    for point in result.get("pareto", {}).get("points", []):
        other = point["variant"]
        if other in (variant, ORIGINAL) or not point["on_front"]:
            continue
        against = _comparisons(platform, other, variant, on, best, walls)
        if len(against) < len(on) or any(c["verdict"] in ("slower", "too few repetitions to tell")
                                          for c in against.values()):
            continue
        # faster beyond the resolution: the whole interval below 1/(1+r) (a "faster" at 0.97 is noise
        # that three repetitions happened to separate; measured: it swapped Icechunk-virtual for
        # kerchunk-over-paged in one demo run of four)
        faster = sum(c["verdict"] == "faster" and c["interval"][1] < 1 / (1 + EQUIVALENCE_RESOLUTION)
                     for c in against.values())
        if faster:
            found.append((-faster, other))
    return min(found)[1] if found else None


def unseparated(platform: str, variant: str, on: list[str], result: dict, best: dict, walls: dict) -> dict:
    """Variants on the Pareto front the evidence cannot tell from ``variant`` on the patterns of ``on``: measured
    on all of them and measurably slower than ``variant`` on none. The choice between them is not a finding; a
    run with more repetitions may name another (variant -> its comparisons with ``variant``)."""
    rivals = {}
    for point in result.get("pareto", {}).get("points", []):
        other = point["variant"]
        if other in (variant, ORIGINAL) or not point["on_front"]:
            continue
        against = _comparisons(platform, other, variant, on, best, walls)
        if len(against) == len(on) and not any(c["verdict"] == "slower" for c in against.values()):
            rivals[other] = against
    return rivals


def cheaper_equivalent(platform: str, variant: str, on: list[str], result: dict, mix: dict | None, best: dict,
                       walls: dict, yardstick: dict) -> dict | None:
    """The cheapest variant that reads no measurably slower than ``variant`` on every pattern of ``on``,
    measurably faster than the original on one of them, on the Pareto front, and cheaper
    (``workload_cost``); None when there is none or the costs are unknown."""
    costs = result.get("costs") or {}
    mine = workload_cost(costs.get(variant), on, mix, yardstick)
    if mine is None:
        return None
    found = None
    for point in result.get("pareto", {}).get("points", []):
        other = point["variant"]
        if other in (variant, ORIGINAL) or not point["on_front"]:
            continue
        theirs = workload_cost(costs.get(other), on, mix, yardstick)
        if theirs is None or theirs >= mine or (found and theirs >= found["cost"]):
            continue
        against_choice = _comparisons(platform, other, variant, on, best, walls)
        if len(against_choice) < len(on) or not all(as_fast(c) for c in against_choice.values()):
            continue
        against_original = _comparisons(platform, other, ORIGINAL, on, best, walls)
        if not any(c["verdict"] == "faster" for c in against_original.values()):
            continue
        found = {"variant": other, "cost": theirs, "against_choice": against_choice,
                 "against_original": against_original}
    if found:
        found["instead_of"] = variant
        found["instead_of_cost"] = mine
    return found


def choose(platform: str, result: dict, mix: dict | None, best: dict, walls: dict,
           yardstick: dict | None = None) -> dict | None:
    """The variant to keep on ``platform``, never a dominated one; the original when no pattern it was
    chosen on is measurably faster than the original's; a cheaper variant that reads as fast where
    there is one (``cheaper_equivalent``)."""
    yardstick = yardstick or {"months": COST_MONTHS, "reads_per_month": READS_PER_MONTH}
    candidate = _candidate(result, mix)
    if candidate is None:
        return None
    variant, why, on = candidate
    points = {p["variant"]: p for p in result.get("pareto", {}).get("points", [])}
    replaced = None
    while variant in points and points[variant]["dominated_by"]:
        # a variant at least as good on every axis exists: take the fastest of those that are on the front
        better = [points[v] for v in points[variant]["dominated_by"]]
        on_front = [p for p in better if p["on_front"]] or better
        replaced = replaced or variant
        variant = min(on_front, key=lambda p: (p["read_s"], p["variant"]))["variant"]
        why = (f"{replaced} was chosen first ({why}), but {variant} is at least as good on every axis of "
               f"{', '.join(points[replaced]['axes'])}")
    seen = {variant}
    while variant != ORIGINAL:
        better = measurably_better(platform, variant, on, result, best, walls)
        if better is None or better in seen:
            break
        seen.add(better)
        why = f"it reads measurably faster than {variant} (chosen first: {why}) and no slower"
        variant = better
    comparison = _comparisons(platform, variant, ORIGINAL, on, best, walls) if variant != ORIGINAL else {}
    verdicts = {c["verdict"] for c in comparison.values()}
    costs = result.get("costs") or {}
    if bool(comparison) and "faster" not in verdicts:
        return {"variant": ORIGINAL, "why": "no variant reads measurably faster than the original on the patterns "
                "it was chosen for, and the original needs no conversion and no extra storage",
                "candidate": variant, "comparison": comparison, "no_measurable_difference": True,
                "cost": {"candidate": costs.get(variant), "original": costs.get(ORIGINAL)}, "on": on}
    cheaper = cheaper_equivalent(platform, variant, on, result, mix, best, walls, yardstick) \
        if variant != ORIGINAL else None
    if cheaper:
        first = variant
        variant = cheaper["variant"]
        why = f"it reads as fast as {first} (chosen first: {why}) and costs less"
        comparison = cheaper["against_original"]
    return {"variant": variant, "why": why, "candidate": variant, "comparison": comparison,
            "no_measurable_difference": False, "replaced_dominated": replaced, "on": on,
            "cheaper_than": cheaper, "cost": {"kept": costs.get(variant)}, "yardstick": yardstick,
            "unseparated": unseparated(platform, variant, on, result, best, walls)}


def usd(value: float | None) -> str:
    """Dollars to two significant digits, never in e-notation: $0.000078, $0.0036, $0.51, $12.40."""
    if value is None:
        return "$?"
    if value == 0:
        return "$0"
    if abs(value) >= 1:
        return f"${value:,.2f}"
    return f"${value:.{max(2, 1 - math.floor(math.log10(abs(value))))}f}"


def _interval_text(c: dict, whose: str) -> str:
    if c["interval"] is None:
        return (f"{c['ratio']:.2f}x {whose} time ({c['verdict']}: {min(c['repetitions'])} repetition(s), "
                f"{MIN_REPETITIONS} needed)")
    low, high = c["interval"]
    return f"{c['ratio']:.2f}x {whose} time (95% interval {low:.2f}-{high:.2f}: {c['verdict']})"


def _comparison_text(comparison: dict, whose: str = "the original's") -> str:
    return "; ".join(f"{pattern} {_interval_text(c, whose)}" for pattern, c in comparison.items())


def _original_kept_cost_text(choice: dict) -> str:
    """What keeping the original saves: the candidate's conversion $ and its storage $ beyond the original's."""
    row = (choice.get("cost") or {}).get("candidate")
    original = (choice.get("cost") or {}).get("original") or {}
    if not row or row.get("conversion_usd") is None:
        return ""
    extra = None
    if row.get("storage_usd_per_month") is not None and original.get("storage_usd_per_month") is not None:
        extra = row["storage_usd_per_month"] - original["storage_usd_per_month"]
    store = "" if extra is None else (f" and {usd(extra)} a month more in S3" if extra > 0 else
                                      f" ({usd(-extra)} a month less in S3)")
    return f"; making {choice['candidate']} would cost {usd(row['conversion_usd'])} once{store}"


def recommendation_sentence(platform: str, result: dict, mix: dict | None, budgets: list[dict] | None = None) -> str:
    """The recommendation in one plain sentence (it may run to a few clauses; never a line break)."""
    choice = result.get("choice")
    if choice is None:
        return f"On {platform} no variant was measured on every pattern: nothing to recommend."
    measured_against = _comparison_text(choice["comparison"])
    if choice["no_measurable_difference"]:
        return (f"On {platform}, keep the original: {choice['why']} ({choice['candidate']}: "
                f"{measured_against}{_original_kept_cost_text(choice)}).")
    patterns = result["patterns"]
    variant = choice["variant"]
    wins = [p for p, e in patterns.items() if e["best_variant"] == variant]
    tail = f"; it is the fastest for {', '.join(wins)}" if wins else ""
    cheaper = choice.get("cheaper_than")
    if cheaper:
        first = cheaper["instead_of"]
        costs = result.get("costs") or {}
        mine, theirs = costs.get(variant) or {}, costs.get(first) or {}
        yardstick = choice["yardstick"]
        requests = ", ".join(
            f"{p} {usd(mine['requests_usd_per_1000'].get(p))} vs {usd(theirs['requests_usd_per_1000'].get(p))}"
            for p in choice["on"])
        whose = f"{first}'s"
        tail += (f". Against {first}: {_comparison_text(cheaper['against_choice'], whose)}. "
                 f"Cost, {variant} vs {first}: {usd(mine.get('conversion_usd'))} vs "
                 f"{usd(theirs.get('conversion_usd'))} to convert, {usd(mine.get('storage_usd_per_month'))} vs "
                 f"{usd(theirs.get('storage_usd_per_month'))} a month in S3, S3 requests per 1,000 reads "
                 f"{requests}: {usd(cheaper['cost'])} vs {usd(cheaper['instead_of_cost'])} over "
                 f"{yardstick['months']} months at {yardstick['reads_per_month']:,} reads a month")
    against = f" Against the original: {measured_against}." if measured_against else ""
    over = next((b for b in budgets or [] if b["variant"] == variant and b["within_budget"] is False), None)
    flag = f" Size budget: {variant} adds {budget.budget_text(over)}." if over else ""
    return f"On {platform}, keep {variant}: {choice['why']}{tail}.{against}{flag}{_unseparated_text(choice)}"


def _unseparated_text(choice: dict) -> str:
    """Says so when the evidence cannot separate the kept variant from others, and what would."""
    rivals = choice.get("unseparated") or {}
    if not rivals:
        return ""
    variant = choice["variant"]
    whose = f"{variant}'s"
    listed = "; ".join(f"{other} ({_comparison_text(c, whose)})" for other, c in sorted(rivals.items()))
    return (f" The evidence cannot separate {variant} from {', '.join(sorted(rivals))} on {', '.join(choice['on'])}: "
            f"{listed}. More repetitions of these variants' cases on those patterns (the plan's max_repetitions) "
            f"would tell whether one reads faster; until then another run may keep any of them.")


# -- the seeds' effect --------------------------------------------------------------
BASELINE = f"original + {DEFAULT_READER}'s"


def paged_variants(variants: dict[str, dict], records: list[dict]) -> list[str]:
    """Paged HDF5 copies: by their VARIANT item's kind, else (results without items) by name."""
    names = {r["variant"] for r in records if r.get("variant")} | set(variants)
    return sorted(n for n in names if budget.variant_kind(n, variants.get(n)) in budget.PAGED_KINDS)


def paged_reader_effect(records: list[dict], variants: dict[str, dict] | None = None) -> dict[str, list[dict]]:
    """platform -> one row per paged variant x pattern: the paged copy read with the aligned reader against
    the original read with h5py's defaults (Lopez et al.'s comparison), ratio of median times and its
    interval (``compare``), whether or not either is the recommended pair."""
    variants = variants or {}
    walls = walls_by_key(records)
    out: dict[str, list[dict]] = defaultdict(list)
    for paged in paged_variants(variants, records):
        for (platform, pattern, variant, reader), mine in sorted(walls.items()):
            if variant != paged or reader != ALIGNED_READER:
                continue
            base = walls.get((platform, pattern, ORIGINAL, DEFAULT_READER))
            if not base:
                continue
            out[platform].append({"pattern": pattern, "variant": paged, "reader": ALIGNED_READER,
                                  "original_reader": DEFAULT_READER, "median_s": statistics.median(mine),
                                  "original_median_s": statistics.median(base), **compare(mine, base)})
    return dict(out)


def paged_reader_effect_text(rows: list[dict]) -> str:
    """``paged-8MiB with h5py-s3fs-aligned vs the original with h5py-s3fs-default: beam-read 0.62x ...``"""
    by_variant: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_variant[row["variant"]].append(row)
    parts = []
    for variant, group in by_variant.items():
        measured_text = "; ".join(f"{r['pattern']} {_interval_text(r, BASELINE)}" for r in group)
        parts.append(f"{variant} read with {ALIGNED_READER} against the original read with {DEFAULT_READER} "
                     f"(Lopez et al.): {measured_text}")
    return ". ".join(parts)
