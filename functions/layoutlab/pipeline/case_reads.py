"""Bytes a benchmark case must read, from the shapes the file declares, against ``max_case_read_bytes``.

A case reads what its pattern selects: a whole time series, a whole map, ``hours`` maps, a slab of rows,
the whole variable, a whole beam. The plan's ceilings bound how many cases run (``max_cases``), but a
case's own cost is the file's: a few kilobytes declaring a (10^5, 10^3, 10^4) grid made a
``full-read-throughput`` case of 4 TB, bounded only by the case timeout x the cases. The plan step knows
the declared shapes (``facts``) and refuses such a plan before anything runs, naming the pattern, the
estimate and the ceiling, like the other ceilings (``layoutlab/ceilings.py``).

Patterns whose selection is known only from coordinate values (``timeseries-region-mean``'s box) are
not estimated: their box is a user's region, bounded by the grid, and a box covering the grid is what
``full-read-throughput`` reads, which is estimated.
"""

from __future__ import annotations

import json
import math

from layoutlab.ceilings import Ceilings
from layoutlab.ceilings import over as ceiling_over


def _rows(params: dict, rows: int) -> int:
    """Rows one ``slab-read`` worker reads (the rule of bench/patterns.py's SlabRead)."""
    workers = max(1, int(params.get("workers") or 1))
    if params.get("scaling") == "weak":
        return min(rows, int(params.get("rows_per_worker") or max(1, rows // 16)))
    return math.ceil(rows / workers)


def declared_read_bytes(pattern: str, params: dict, facts) -> tuple[int, str] | None:
    """(bytes, how they were counted) that one case of ``pattern`` reads (uncompressed, from the declared
    shapes), or None when the plan step cannot know (another variable, a box of coordinates)."""
    if pattern == "granule-open-list":
        return 0, "metadata only"
    if getattr(facts, "family_cases", ()):  # a family case: its bytes counted at plan time from the declared shapes
        from layoutlab.pipeline.plan import family_labels

        for case in family_labels(facts.family_cases):
            if case["label"] == pattern:
                return case["read_bytes"], f"{case['variable']} (declared shape)"
        return None
    variable = params.get("variable")
    if facts.kind == "grid" and facts.grid_shape:
        if variable not in (None, facts.variable):
            return None
        t, y, x = facts.grid_shape
        grid = f"the declared {t}x{y}x{x} grid of {facts.itemsize}-byte items"
        item = facts.itemsize
        if pattern == "timeseries-point":
            return t * item, f"one time series of {grid}"
        if pattern == "map-timestep":
            return y * x * item, f"one map of {grid}"
        if pattern == "map-time-mean":
            hours = max(1, int(params.get("hours") or 1))
            return min(hours, t) * y * x * item, f"{min(hours, t)} maps of {grid}"
        if pattern == "full-read-throughput":
            return t * y * x * item, f"all of {grid}"
        if pattern == "slab-read":
            rows = _rows(params, t)
            return rows * y * x * item, f"{rows} time steps of {grid}"
        return None
    if facts.kind == "granule" and facts.beam_bytes:
        if pattern in ("beam-read", "beam-subset") and variable not in (None, "h_ph"):
            return None
        if pattern == "beam-read":
            return facts.beam_bytes, "a beam's declared heights/h_ph"
        if pattern == "beam-subset":  # (lat_ph whole, then a run of h_ph: at most all of it)
            return facts.beam_bytes + facts.beam_lat_bytes, "a beam's declared heights/lat_ph and heights/h_ph"
        if variable is None and pattern == "full-read-throughput":
            return facts.beam_bytes, "a beam's declared heights/h_ph"
        if variable is None and pattern == "slab-read" and facts.beam_elements:
            rows = _rows(params, facts.beam_elements)
            return rows * (facts.beam_bytes // facts.beam_elements), f"{rows} photons of a beam's declared heights/h_ph"
    return None


def check_case_reads(plan: dict, cases: list[dict], facts, ceilings: Ceilings) -> None:
    """Refuse the plan (``PlanError`` naming the pattern, the estimate and the ceiling) when one of its cases
    would read more than ``max_case_read_bytes`` from the shapes the file declares."""
    from layoutlab.pipeline.plan import PlanError

    seen = set()
    for case in cases:
        key = (case["pattern"], json.dumps(case.get("params") or {}, sort_keys=True, default=str))
        if key in seen:
            continue
        seen.add(key)
        estimate = declared_read_bytes(case["pattern"], case.get("params") or {}, facts)
        if estimate and estimate[0] > ceilings.max_case_read_bytes:
            error = ceiling_over(f"patterns: {case['pattern']}", f"a case reads {estimate[1]}:", estimate[0],
                                 "max_case_read_bytes", ceilings.max_case_read_bytes)
            raise PlanError(f"plan {plan.get('name', '<unnamed>')!r}: {error}")
