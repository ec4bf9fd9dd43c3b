"""Per-dataset summary: which layout wins each access pattern, and which balances them.

Input is the dataset's result records (the bench schema). Repetitions are
reduced to their median; a variant's time for a pattern is that of its best
reader (the layout is judged by the best way to read it; the reader is named);
only cases whose values checked out count. Everything is computed per platform,
because Lambda and Fargate need not agree.

Following Nguyen et al.: the *performance bias* of a pattern is the slowest
variant's time over the fastest's; the *balanced* choice minimises the product
of the time-series and map times; we also give the variant with the smallest
worst-case slowdown over every pattern measured.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

TIMESERIES_PATTERNS = ("timeseries-point", "timeseries-region-mean")
MAP_PATTERNS = ("map-timestep", "map-time-mean")


SCALING_PATTERN = "slab-read"


def _median_times(records: list[dict]) -> dict[tuple, float]:
    """(platform, pattern, variant, reader) -> median wall_s over good repetitions."""
    times: dict[tuple, list[float]] = defaultdict(list)
    for record in records:
        if record.get("kind", "RESULT") != "RESULT" or not record.get("checksum_ok", False):
            continue
        if record.get("pattern") == SCALING_PATTERN:  # reported by scaling(), per worker count
            continue
        wall = record.get("wall_s")
        if wall is None:
            continue
        times[(record["platform"], record["pattern"], record["variant"], record["reader"])].append(float(wall))
    return {key: statistics.median(values) for key, values in times.items()}


def summarize(dataset_id: str, records: list[dict]) -> dict:
    medians = _median_times(records)
    # best reader per (platform, pattern, variant)
    best: dict[tuple, tuple[float, str]] = {}
    for (platform, pattern, variant, reader), wall in medians.items():
        key = (platform, pattern, variant)
        if key not in best or wall < best[key][0]:
            best[key] = (wall, reader)

    platforms: dict[str, dict] = {}
    for platform in sorted({k[0] for k in best}):
        patterns: dict[str, dict] = {}
        by_pattern: dict[str, dict[str, float]] = defaultdict(dict)
        for (plat, pattern, variant), (wall, reader) in best.items():
            if plat == platform:
                by_pattern[pattern][variant] = wall
        for pattern, walls in sorted(by_pattern.items()):
            fastest = min(walls, key=walls.get)
            slowest = max(walls, key=walls.get)
            patterns[pattern] = {
                "best_variant": fastest,
                "best_reader": best[(platform, pattern, fastest)][1],
                "best_wall_s": walls[fastest],
                "worst_variant": slowest,
                "worst_wall_s": walls[slowest],
                "performance_bias": walls[slowest] / walls[fastest] if walls[fastest] > 0 else math.inf,
                "wall_s_by_variant": dict(sorted(walls.items())),
            }
        platforms[platform] = {
            "patterns": patterns,
            "balanced_product": _balanced_product(by_pattern),
            "min_worst_slowdown": _min_worst_slowdown(by_pattern),
        }
    failed = sum(1 for r in records if r.get("kind", "RESULT") == "RESULT" and not r.get("checksum_ok", False))
    return {
        "scaling": scaling(records),
        "dataset": dataset_id,
        "results_counted": sum(1 for r in records if r.get("checksum_ok")),
        "results_excluded": failed,
        "platforms": platforms,
    }


def _balanced_product(by_pattern: dict[str, dict[str, float]]) -> dict | None:
    series = [p for p in TIMESERIES_PATTERNS if p in by_pattern]
    maps = [p for p in MAP_PATTERNS if p in by_pattern]
    if not series or not maps:
        return None
    s, m = series[0], maps[0]
    candidates = set(by_pattern[s]) & set(by_pattern[m])
    if not candidates:
        return None
    choice = min(candidates, key=lambda v: by_pattern[s][v] * by_pattern[m][v])
    return {"variant": choice, "patterns": [s, m],
            "timeseries_wall_s": by_pattern[s][choice], "map_wall_s": by_pattern[m][choice]}


def _min_worst_slowdown(by_pattern: dict[str, dict[str, float]]) -> dict | None:
    if not by_pattern:
        return None
    variants = set.intersection(*(set(w) for w in by_pattern.values()))
    if not variants:
        return None
    fastest = {p: min(w.values()) for p, w in by_pattern.items()}

    def worst(variant: str) -> float:
        return max(by_pattern[p][variant] / fastest[p] for p in by_pattern if fastest[p] > 0)

    choice = min(variants, key=worst)
    return {"variant": choice, "worst_slowdown": worst(choice)}


def scaling(records: list[dict]) -> dict:
    """Xu et al.'s scaling study: aggregate throughput of N concurrent slab reads against N.

    For each (platform, variant, mode, N) and repetition, the N workers' bytes
    over the slowest worker's load time (they start together when the Map's
    concurrency allows it), then the median over repetitions. Efficiency is the
    aggregate over N times the one-worker throughput of the same study.
    """
    groups: dict[tuple, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("pattern") != SCALING_PATTERN or not r.get("checksum_ok"):
            continue
        params = r.get("pattern_params") or {}
        key = (r["platform"], r["variant"], params.get("scaling", "strong"), int(params.get("workers", 1)))
        groups[key][int(r.get("repetition", 0))].append(r)
    out: dict = {}
    for (platform, variant, mode, n), by_rep in sorted(groups.items()):
        rates = []
        for workers in by_rep.values():
            if len(workers) != n:
                continue  # an incomplete study (a worker failed) says nothing about N
            slowest = max(float(w.get("load_s") or w.get("wall_s") or 0) for w in workers)
            moved = sum(int(w.get("bytes_needed") or 0) for w in workers)
            if slowest > 0:
                rates.append(moved / slowest / 2**20)
        if rates:
            out.setdefault(platform, {}).setdefault(variant, {}).setdefault(mode, []).append(
                {"workers": n, "aggregate_mib_s": statistics.median(rates)})
    for variants in out.values():
        for modes in variants.values():
            for points in modes.values():
                base = next((p["aggregate_mib_s"] for p in points if p["workers"] == 1), None)
                for p in points:
                    p["efficiency"] = p["aggregate_mib_s"] / (base * p["workers"]) if base else None
    return out
