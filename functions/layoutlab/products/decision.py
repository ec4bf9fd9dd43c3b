"""A product's decision, from the SUMMARY items of its studied granules.

Each studied granule's summary has already made one dataset's decision (``report/decision.py``,
``report/choice.py``: the variant kept per platform, with its comparisons against the original). The
product keeps the variant most of its granules chose on the primary platform (a tie goes to the one
whose ratio against the original is lower across granules), and says how sure that is across granules:

* per granule, the chosen variant's *ratio* of read time against the original: the geometric mean over
  the patterns both were measured on of (variant's best-reader median wall s / original's);
* the *interval* across granules: the lowest and highest of those ratios (three granules give no more
  than their range; it is what a later drift check is compared with);
* per granule, the size ratio (variant's bytes / original's);
* the recipe of a granule that chose it (``report/recipe.py``).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

from layoutlab.report.decision import ORIGINAL, _primary_platform


def granule_ratio(summary: dict, platform: str, variant: str) -> float | None:
    """Geometric mean over patterns of ``variant``'s wall / the original's, on ``platform`` (None: no common
    pattern)."""
    if variant == ORIGINAL:
        return 1.0
    patterns = ((summary.get("platforms") or {}).get(platform) or {}).get("patterns") or {}
    logs = []
    for entry in patterns.values():
        walls = entry.get("wall_s_by_variant") or {}
        mine, original = walls.get(variant), walls.get(ORIGINAL)
        if mine and original and mine > 0 and original > 0:
            logs.append(math.log(mine / original))
    return math.exp(statistics.fmean(logs)) if logs else None


def size_ratio(summary: dict, variant: str) -> float | None:
    variants = summary.get("variants") or {}
    mine, original = (variants.get(variant) or {}).get("size_bytes"), (variants.get(ORIGINAL) or {}).get("size_bytes")
    return mine / original if mine and original else None


def primary_platform(summaries: list[dict]) -> str | None:
    platforms = {p: True for s in summaries for p in (s.get("choice") or {})}
    return _primary_platform(platforms)


def measured_variants(summaries: list[dict]) -> set[str]:
    return {v for s in summaries for p in (s.get("platforms") or {}).values()
            for entry in (p.get("patterns") or {}).values() for v in (entry.get("wall_s_by_variant") or {})}


def evidence(summaries: list[dict], variant: str, platform: str | None) -> dict:
    """Per-granule ratios of ``variant`` against the original, their interval, sizes."""
    per_granule = []
    for summary in summaries:
        ratio = granule_ratio(summary, platform, variant) if platform else None
        per_granule.append({"dataset": summary.get("dataset"), "ratio": ratio, "size_ratio": size_ratio(summary, variant),
                            "chose": ((summary.get("choice") or {}).get(platform) or {}).get("variant")})
    ratios = [g["ratio"] for g in per_granule if g["ratio"] is not None]
    return {"per_granule": per_granule,
            "interval": [min(ratios), max(ratios)] if ratios else None,
            "median_ratio": statistics.median(ratios) if ratios else None}


def product_decision(summaries: list[dict]) -> dict:
    """The product's decision from its studied granules' SUMMARY items (see the module docstring)."""
    platform = primary_platform(summaries)
    votes = Counter(((s.get("choice") or {}).get(platform) or {}).get("variant") for s in summaries)
    votes.pop(None, None)
    if not votes:
        return {"variant": None, "platform": platform, "votes": {}, "granules": [s.get("dataset") for s in summaries],
                "why": "no studied granule chose a variant (no result checked out)", "interval": None,
                "per_granule": [], "recipe": None}
    top = max(votes.values())
    tied = sorted(v for v, n in votes.items() if n == top)

    def median_ratio(variant):
        value = evidence(summaries, variant, platform)["median_ratio"]
        return value if value is not None else math.inf

    chosen = min(tied, key=lambda v: (median_ratio(v), v))
    found = evidence(summaries, chosen, platform)
    recipe = next((((s.get("recipe") or {}).get(platform) or {}) for s in summaries
                   if ((s.get("choice") or {}).get(platform) or {}).get("variant") == chosen), {}) or None
    why = (f"{votes[chosen]} of {len(summaries)} studied granules chose {chosen} on {platform}"
           + (f" (tied with {', '.join(v for v in tied if v != chosen)}; lower ratio against the original)"
              if len(tied) > 1 else ""))
    if found["interval"]:
        low, high = found["interval"]
        why += f"; read time {low:.2f}-{high:.2f}x the original's across granules"
    return {"variant": chosen, "platform": platform, "votes": dict(votes),
            "granules": [s.get("dataset") for s in summaries], "why": why, **found,
            "recipe": (recipe or {}).get("text") if recipe else None}


def drift(decision: dict, ratio: float | None, tolerance: float) -> str | None:
    """Why a drift check's ratio is outside the decision's interval widened by ``tolerance``, or None."""
    interval = (decision or {}).get("interval")
    if ratio is None or not interval:
        return None
    low, high = interval
    if ratio > high * (1 + tolerance):
        return (f"{decision['variant']} read {ratio:.2f}x the original's, above the decided interval "
                f"{low:.2f}-{high:.2f} (+{tolerance:.0%})")
    if ratio < low / (1 + tolerance):
        return (f"{decision['variant']} read {ratio:.2f}x the original's, below the decided interval "
                f"{low:.2f}-{high:.2f} (-{tolerance:.0%}): the granules changed")
    return None
