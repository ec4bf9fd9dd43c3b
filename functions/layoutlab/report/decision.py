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
  * *the choice* (``choice.py``): a candidate by the mix, the balanced product
    or the worst slowdown, then rules in order (dominated, measurably better,
    no better than the original, cheaper equivalent), each comparison with a
    95 % bootstrap interval of the ratio of median times; costs
    (``cost.layout_costs``: conversion $ once, storage $ a month, S3 request $
    per 1,000 reads) are weighed over a yardstick of ``COST_MONTHS`` months at
    ``READS_PER_MONTH`` reads a month;
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
# re-exported: ORIGINAL, MIN_REPETITIONS, compare, as_fast and usd are this module's API too
from layoutlab.report.choice import (  # noqa: F401
    MIN_REPETITIONS, ORIGINAL, Evidence, as_fast, candidate, choice_record, choose, compare, interval_text,
    recommendation_sentence, usd)

TIMESERIES_PATTERNS = ("timeseries-point", "timeseries-region-mean")
MAP_PATTERNS = ("map-timestep", "map-time-mean")
SCALING_PATTERN = "slab-read"  # reported by summary.scaling(), per worker count
# Mix weights are shares of the workload: they must sum to 1 within this much
# (rounding in hand-written mixes); within it they are normalised exactly.
MIX_SUM_TOLERANCE = 0.01
PARETO_AXES = ("read_s", "size_bytes", "convert_s", "peak_rss_mb")
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
        evidence = Evidence(platform, best, repetitions, {p["variant"]: p for p in front}, result["costs"], mix,
                            yardstick)
        first = candidate(result, mix)
        result["choice"] = choice_record(evidence, choose(evidence, first)) if first else None
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


# -- the seeds' effect --------------------------------------------------------------
BASELINE = f"original + {DEFAULT_READER}'s"


def paged_variants(variants: dict[str, dict], records: list[dict]) -> list[str]:
    """Paged HDF5 copies: by their VARIANT item's kind, else (results without items) by the kind giving the name."""
    names = {r["variant"] for r in records if r.get("variant")} | set(variants)
    return sorted(n for n in names if budget.is_paged(n, variants.get(n)))


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
        measured_text = "; ".join(f"{r['pattern']} {interval_text(r, BASELINE)}" for r in group)
        parts.append(f"{variant} read with {ALIGNED_READER} against the original read with {DEFAULT_READER} "
                     f"(Lopez et al.): {measured_text}")
    return ". ".join(parts)
