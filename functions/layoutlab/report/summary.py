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


def _median_times(records: list[dict]) -> dict[tuple, float]:
    """(platform, pattern, variant, reader) -> median wall_s over good repetitions."""
    times: dict[tuple, list[float]] = defaultdict(list)
    for record in records:
        if record.get("kind", "RESULT") != "RESULT" or not record.get("checksum_ok", False):
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
