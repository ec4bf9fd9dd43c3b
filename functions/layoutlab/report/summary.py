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

Beside them, from the decision (``decision.decide``): each variant's costs
(conversion $ once, storage $ a month, $ per 1,000 reads of each pattern),
each variant's size overhead against the size budget, the choice and the cost
that decided it, and the seeds' effect (the original with h5py's defaults
against a paged copy with the aligned reader) with its interval.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

# The measures live in decision.py (the report and `layoutlab report` use the same ones).
from layoutlab.report.decision import SCALING_PATTERN, decide, measured, wrong_values


def summarize(dataset_id: str, records: list[dict], decided: dict | None = None) -> dict:
    """The dataset's summary; ``decided`` is ``decision.decide(records, ...)`` when the caller has it."""
    decided = decided if decided is not None else decide(records)
    platforms = {
        platform: {
            "patterns": {pattern: {k: v for k, v in entry.items() if k != "by_reader"}
                         for pattern, entry in result["patterns"].items()},
            "balanced_product": result["balanced_product"],
            "min_worst_slowdown": result["min_worst_slowdown"],
        }
        for platform, result in decided["platforms"].items()
    }
    choices = {}
    for platform, result in decided["platforms"].items():
        choice = result.get("choice") or {}
        cheaper = choice.get("cheaper_than") or {}
        choices[platform] = {
            "variant": choice.get("variant"), "candidate": choice.get("candidate"), "why": choice.get("why"),
            "no_measurable_difference": choice.get("no_measurable_difference"),
            "comparison": choice.get("comparison"),
            "cheaper_than": ({"instead_of": cheaper["instead_of"], "cost_usd": cheaper["cost"],
                              "instead_of_cost_usd": cheaper["instead_of_cost"],
                              "against_choice": cheaper["against_choice"]} if cheaper else None),
        }
    failed = sum(1 for r in records if wrong_values(r) or (r.get("kind", "RESULT") == "RESULT" and r.get("status", "ok") != "ok"))
    return {
        "scaling": scaling(records),
        "dataset": dataset_id,
        "results_counted": sum(1 for r in records if measured(r)),
        "results_excluded": failed,
        "platforms": platforms,
        "choice": choices,
        "costs": {platform: result.get("costs") or {} for platform, result in decided["platforms"].items()},
        "cost_yardstick": decided.get("cost_yardstick"),
        "costs_note": decided.get("costs_note"),
        "size_budget": decided.get("size_budget") or [],
        "paged_reader_effect": decided.get("paged_reader_effect") or {},
    }


def scaling(records: list[dict]) -> dict:
    """Xu et al.'s scaling study: aggregate throughput of N concurrent slab reads against N.

    For each (platform, variant, mode, N) and repetition, the N workers' bytes
    over the slowest worker's load time (they start together when the Map's
    concurrency allows it), then the median over repetitions. Efficiency is the
    aggregate over N times the one-worker throughput of the same study.
    """
    groups: dict[tuple, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.get("pattern") != SCALING_PATTERN or not measured(r):
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
