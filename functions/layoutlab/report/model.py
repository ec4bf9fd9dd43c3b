"""A model of read time from what a read costs, to predict chunk shapes nobody measured.

1. Fit, per reader and platform, from measured results::

       wall_s ~ c0 + c_req * requests + c_mib * MiB transferred + c_pts * Mpoints

   with every coefficient >= 0 (a request, a byte or a value never saves
   time). scipy is not in the venv (and would add ~100 MB to the Lambda
   layer for one function), so ``fit_nonnegative`` is the textbook active-set
   idea done with numpy: least squares, drop the most negative coefficient
   (fix it at 0), refit, until none is negative. For four columns that is at
   most four solves; plain clipping of a least-squares fit would leave the
   other coefficients fitted for a value that was thrown away.
2. Predict requests / bytes / points of a pattern on an UNTESTED chunk shape
   of a grid variable from geometry: the chunks the pattern's region touches
   (from the region recorded in the results, or resolved from the pattern's
   parameters on a GEOS-like grid), each chunk's stored bytes (elements x
   itemsize x the compression ratio measured on the dataset's Zarr variants),
   plus the reader's fixed metadata requests/bytes measured on the variants
   that were run.
3. Check it honestly: leave one variant out, fit on the others, predict the
   left-out variant from geometry alone; report the median relative error.
4. Predict every cell of Nguyen et al.'s seed grid, mark which were measured,
   and recommend the predicted best shape for the workload mix (or the
   balanced product of time-series and map times without a mix).
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict

import numpy as np

from layoutlab.errors import UserError
from layoutlab.report.decision import measured

FEATURES = ("intercept", "requests", "mib", "mpoints")
GRID_PATTERNS = ("timeseries-point", "map-timestep", "timeseries-region-mean", "map-time-mean")
HELD_OUT_GOAL = 0.25  # median relative error we aim for (README reports what we measure)
_ZARR_NAME = re.compile(r"zarr-(\d+)x(\d+)x(\d+)$")


# -- fitting -----------------------------------------------------------------------
def fit_nonnegative(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (active set: see the module docstring)."""
    X = np.asarray(X, dtype="f8")
    y = np.asarray(y, dtype="f8")
    free = list(range(X.shape[1]))
    coef = np.zeros(X.shape[1])
    while free:
        solution, *_ = np.linalg.lstsq(X[:, free], y, rcond=None)
        if (solution >= 0).all():
            coef[:] = 0
            coef[free] = solution
            return coef
        free.pop(int(np.argmin(solution)))
    return coef


def features(requests: float, nbytes: float, points: float) -> list[float]:
    return [1.0, float(requests), float(nbytes) / 2**20, float(points) / 1e6]


def _usable(record: dict) -> bool:
    return (measured(record) and record.get("wall_s") is not None and record.get("requests") is not None
            and record.get("bytes_transferred") is not None and record.get("points") is not None)


def fit_time_model(records: list[dict], exclude_variants=()) -> dict[tuple[str, str], dict]:
    """(reader, platform) -> {"coef": {feature: value}, "n": records used, "rmse_s": fit residual}."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        if _usable(r) and r["variant"] not in exclude_variants:
            groups[(r["reader"], r["platform"])].append(r)
    models = {}
    for key, rows in sorted(groups.items()):
        X = np.array([features(r["requests"], r["bytes_transferred"], r["points"]) for r in rows])
        y = np.array([float(r["wall_s"]) for r in rows])
        coef = fit_nonnegative(X, y)
        residual = y - X @ coef
        models[key] = {"coef": dict(zip(FEATURES, coef.tolist())), "n": len(rows),
                       "rmse_s": float(np.sqrt(np.mean(residual ** 2)))}
    return models


def predict_time(model: dict, requests: float, nbytes: float, points: float) -> float:
    coef = model["coef"]
    return float(sum(coef[name] * x for name, x in zip(FEATURES, features(requests, nbytes, points))))


# -- geometry ------------------------------------------------------------------------
def variant_chunks(name: str, item: dict | None = None) -> tuple[int, int, int] | None:
    """(time, lat, lon) chunks of a Zarr grid variant, from its spec or its name; None otherwise."""
    spec = (item or {}).get("spec") or {}
    chunks = spec.get("chunks")
    if isinstance(chunks, dict) and len(chunks) == 3:
        return tuple(int(v) for v in chunks.values())
    if isinstance(chunks, (list, tuple)) and len(chunks) == 3:
        return tuple(int(v) for v in chunks)
    match = _ZARR_NAME.match(name)
    return tuple(int(g) for g in match.groups()) if match else None


def region_of(pattern: str, selection: dict, shape) -> list[tuple[int, int]]:
    """[start, stop) per dimension of the region a grid pattern reads, from its resolved selection."""
    nt, nlat, nlon = shape
    whole = [(0, nt), (0, nlat), (0, nlon)]
    if pattern == "timeseries-point":
        i, j = int(selection["lat_index"]), int(selection["lon_index"])
        return [whole[0], (i, i + 1), (j, j + 1)]
    if pattern == "map-timestep":
        t = int(selection["time_index"])
        return [(t, t + 1), whole[1], whole[2]]
    if pattern == "timeseries-region-mean":
        return [whole[0], tuple(selection["lat_slice"]), tuple(selection["lon_slice"])]
    if pattern == "map-time-mean":
        return [tuple(selection["time_slice"]), whole[1], whole[2]]
    raise UserError(f"pattern {pattern!r} has no grid geometry; the model covers {', '.join(GRID_PATTERNS)}")


def default_selection(pattern: str, shape, params: dict | None = None) -> dict:
    """What the pattern would select on a GEOS-like grid of ``shape`` (lat -90..90, lon -180..),
    resolved with the pattern's own parameters and coordinate lookups."""
    from layoutlab.bench import patterns as P
    from layoutlab.samples.geos import GeosGrid

    p = P.get_pattern(pattern).params({k: v for k, v in (params or {}).items() if k != "variable"})
    grid = GeosGrid(tuple(int(n) for n in shape))
    if pattern == "timeseries-point":
        return {"lat_index": P._nearest(grid.lat, p["lat"], "lat"), "lon_index": P._nearest(grid.lon, p["lon"], "lon")}
    if pattern == "map-timestep":
        return {"time_index": shape[0] // 2 if p["time_index"] is None else int(p["time_index"])}
    if pattern == "timeseries-region-mean":
        la, lo = P._box(grid.lat, p["lat_min"], p["lat_max"], "lat"), P._box(grid.lon, p["lon_min"], p["lon_max"], "lon")
        return {"lat_slice": [la.start, la.stop], "lon_slice": [lo.start, lo.stop]}
    if pattern == "map-time-mean":
        return {"time_slice": [int(p["time_start"]), int(p["time_start"]) + int(p["hours"])]}
    raise UserError(f"pattern {pattern!r} has no grid geometry; the model covers {', '.join(GRID_PATTERNS)}")


def chunk_geometry(shape, chunks, region) -> dict:
    """Chunks a region touches and the elements those chunks hold (edge chunks are smaller)."""
    touched, elements = 1, 1
    for n, c, (start, stop) in zip(shape, chunks, region):
        c = max(1, min(int(c), int(n)))
        first, last = start // c, (stop - 1) // c
        touched *= last - first + 1
        elements *= sum(min(n, (k + 1) * c) - k * c for k in range(first, last + 1))
    points = math.prod(stop - start for start, stop in region)
    return {"chunks_touched": touched, "chunk_elements": elements, "points": points}


def predict_counts(shape, chunks, itemsize: int, region, compression: float,
                   overhead_requests: float = 0.0, overhead_bytes: float = 0.0) -> dict:
    """requests, bytes_transferred and points of reading ``region`` from a store chunked ``chunks``."""
    g = chunk_geometry(shape, chunks, region)
    return {**g, "requests": g["chunks_touched"] + overhead_requests,
            "bytes": g["chunk_elements"] * itemsize * compression + overhead_bytes}


# -- what the records say about the dataset -----------------------------------------------------
def dataset_shape(records: list[dict], variants: dict[str, dict] | None = None, run: dict | None = None):
    """(time, lat, lon) of the grid variable: the RUN item's ``grid_shape`` when recorded, else
    inferred from the points the patterns read (time steps of a time series; lat x lon of a map,
    split by a measured full-map chunk shape). None when it cannot be told."""
    if run and run.get("grid_shape"):
        return tuple(int(n) for n in run["grid_shape"])
    nt = next((r["points"] for r in records if r.get("pattern") == "timeseries-point" and r.get("points")), None)
    map_points = next((r["points"] for r in records if r.get("pattern") == "map-timestep" and r.get("points")), None)
    if not nt or not map_points:
        return None
    for name, item in (variants or {}).items():
        chunks = variant_chunks(name, item)
        if chunks and chunks[1] * chunks[2] == map_points:
            return (int(nt), chunks[1], chunks[2])
    return None


def compression_ratio(variants: dict[str, dict], shape, itemsize: int, exclude=()) -> float | None:
    """Median stored / raw bytes over the dataset's Zarr grid variants (coordinates included: < 0.1%)."""
    raw = math.prod(shape) * itemsize
    ratios = [item["size_bytes"] / raw for name, item in variants.items()
              if name not in exclude and variant_chunks(name, item) and item.get("size_bytes")]
    return statistics.median(ratios) if ratios else None


def _selections(records: list[dict]) -> dict[str, dict]:
    return {r["pattern"]: r["selection"] for r in records
            if r.get("pattern") in GRID_PATTERNS and isinstance(r.get("selection"), dict) and r["selection"]}


def reader_overheads(records, variants, shape, exclude=()) -> dict[str, dict]:
    """reader -> median (measured - geometric) requests, and (bytes transferred, chunk elements)
    pairs from which ``_overheads`` takes the bytes beyond the chunks: metadata and coordinates."""
    extra_req: dict[str, list[float]] = defaultdict(list)
    extra_bytes: dict[str, list[float]] = defaultdict(list)
    selections = _selections(records)
    for r in records:
        chunks = variant_chunks(r["variant"], (variants or {}).get(r["variant"]))
        if not _usable(r) or not chunks or r["variant"] in exclude or r["pattern"] not in selections:
            continue
        g = chunk_geometry(shape, chunks, region_of(r["pattern"], selections[r["pattern"]], shape))
        extra_req[r["reader"]].append(r["requests"] - g["chunks_touched"])
        extra_bytes[r["reader"]].append((r["bytes_transferred"], g["chunk_elements"]))
    out = {}
    for reader in extra_req:
        out[reader] = {"requests": max(0.0, statistics.median(extra_req[reader])), "pairs": extra_bytes[reader]}
    return out


def _overheads(records, variants, shape, itemsize, compression, exclude=()) -> dict[str, dict]:
    raw = reader_overheads(records, variants, shape, exclude)
    return {reader: {"requests": o["requests"],
                     "bytes": max(0.0, statistics.median(got - elems * itemsize * compression
                                                         for got, elems in o["pairs"]))}
            for reader, o in raw.items()}


def _measured_medians(records, variants) -> dict[tuple, float]:
    """(reader, platform, variant, pattern) -> median wall_s for Zarr grid variants."""
    walls: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        if _usable(r) and r["pattern"] in GRID_PATTERNS and variant_chunks(r["variant"], (variants or {}).get(r["variant"])):
            walls[(r["reader"], r["platform"], r["variant"], r["pattern"])].append(float(r["wall_s"]))
    return {k: statistics.median(v) for k, v in walls.items()}


def holdout_error(records: list[dict], variants: dict[str, dict], shape, itemsize: int = 4) -> dict:
    """Leave one Zarr variant out: fit on the rest, predict it from geometry; relative errors per case."""
    medians = _measured_medians(records, variants)
    zarr_variants = sorted({k[2] for k in medians})
    selections = _selections(records)
    cases = []
    for left_out in zarr_variants:
        models = fit_time_model([r for r in records if variant_chunks(r["variant"], variants.get(r["variant"]))],
                                exclude_variants=(left_out,))
        compression = compression_ratio(variants, shape, itemsize, exclude=(left_out,))
        overheads = _overheads(records, variants, shape, itemsize, compression or 1.0, exclude=(left_out,))
        if compression is None:
            continue
        chunks = variant_chunks(left_out, variants.get(left_out))
        for (reader, platform, variant, pattern), measured in sorted(medians.items()):
            if variant != left_out or (reader, platform) not in models or reader not in overheads:
                continue
            counts = predict_counts(shape, chunks, itemsize, region_of(pattern, selections[pattern], shape),
                                    compression, overheads[reader]["requests"], overheads[reader]["bytes"])
            predicted = predict_time(models[(reader, platform)], counts["requests"], counts["bytes"], counts["points"])
            cases.append({"variant": variant, "pattern": pattern, "reader": reader, "platform": platform,
                          "measured_s": measured, "predicted_s": predicted,
                          "relative_error": abs(predicted - measured) / measured if measured > 0 else None})
    errors = [c["relative_error"] for c in cases if c["relative_error"] is not None]
    by_platform: dict[str, list[float]] = defaultdict(list)
    for c in cases:
        if c["relative_error"] is not None:
            by_platform[c["platform"]].append(c["relative_error"])
    return {"cases": cases, "variants": zarr_variants,
            "median_relative_error_by_platform": {p: statistics.median(e) for p, e in sorted(by_platform.items())},
            "median_relative_error": statistics.median(errors) if errors else None,
            "goal": HELD_OUT_GOAL,
            "meets_goal": (statistics.median(errors) <= HELD_OUT_GOAL) if errors else None}


def _score(times: dict[str, float], mix: dict[str, float] | None) -> float | None:
    if mix:
        if any(p not in times for p in mix):
            return None
        return sum(share * times[p] for p, share in mix.items())
    if "timeseries-point" in times and "map-timestep" in times:
        return times["timeseries-point"] * times["map-timestep"]
    return None


def predict_grid(records: list[dict], variants: dict[str, dict], *, shape=None, itemsize: int = 4,
                 mix: dict[str, float] | None = None, reader: str | None = None, platform: str | None = None,
                 run: dict | None = None, grid: list[tuple[int, int, int]] | None = None,
                 target_shape=None) -> dict:
    """The model for one dataset: fit, held-out error, and predictions over the seed grid.

    Returns plain dicts: ``grid_predictions`` has one cell per (pattern, chunk shape), with
    ``time_chunk``, ``space_chunk`` ("lat x lon"), ``predicted_s`` and ``measured_s`` (None
    when that shape was not run); ``recommendation`` names the predicted best shape for the
    mix (or the balanced product without one) and whether it was measured.
    ``target_shape``: predict for another (bigger) grid of the same kind instead of the
    measured one; the patterns' regions are then resolved on a GEOS-like grid of that
    shape from the recorded ``pattern_params``, and nothing there counts as measured.
    """
    from layoutlab.convert.rechunk_plan import seed_grid

    variants = variants or {}
    shape = tuple(shape) if shape else dataset_shape(records, variants, run)
    if shape is None:
        raise UserError("cannot tell the grid variable's shape from these results (no RUN grid_shape, "
                        "no full-map Zarr variant): pass shape=(time, lat, lon)")
    medians = _measured_medians(records, variants)
    if not medians:
        raise UserError("no Zarr grid variant among these results: the model needs measured chunk shapes")
    models = fit_time_model([r for r in records if variant_chunks(r["variant"], variants.get(r["variant"]))])
    keys = sorted({(k[0], k[1]) for k in medians})
    if platform is None:
        platform = next((p for _, p in keys if "lambda" in p), keys[0][1])
    if reader is None:
        counts = defaultdict(int)
        for k in medians:
            if k[1] == platform:
                counts[k[0]] += 1
        reader = max(sorted(counts), key=counts.get)
    if (reader, platform) not in models:
        raise UserError(f"no measured Zarr results for reader {reader!r} on {platform!r}")
    model = models[(reader, platform)]
    compression = compression_ratio(variants, shape, itemsize)
    if compression is None:
        raise UserError("no Zarr variant with a recorded size_bytes: cannot estimate the compression ratio")
    overhead = _overheads(records, variants, shape, itemsize, compression)[reader]
    selections = _selections(records)
    patterns = [p for p in GRID_PATTERNS if p in selections]
    measured_shape = shape
    if target_shape is not None and tuple(target_shape) != tuple(shape):
        shape = tuple(int(n) for n in target_shape)
        params = {r["pattern"]: r.get("pattern_params") or {} for r in records if r.get("pattern") in patterns}
        selections = {p: default_selection(p, shape, params.get(p)) for p in patterns}
    measured_by_chunks = {}
    for (rd, pl, variant, pattern), wall in medians.items():
        if rd == reader and pl == platform and shape == measured_shape:
            chunks = tuple(min(c, n) for c, n in zip(variant_chunks(variant, variants.get(variant)), shape))
            measured_by_chunks[(chunks, pattern)] = (wall, variant)
    cells, shapes = [], []
    for chunks in grid or seed_grid(shape):
        chunks = tuple(min(int(c), n) for c, n in zip(chunks, shape))
        times = {}
        for pattern in patterns:
            counts = predict_counts(shape, chunks, itemsize, region_of(pattern, selections[pattern], shape),
                                    compression, overhead["requests"], overhead["bytes"])
            predicted = predict_time(model, counts["requests"], counts["bytes"], counts["points"])
            measured = measured_by_chunks.get((chunks, pattern))
            times[pattern] = predicted
            cells.append({"pattern": pattern, "time_chunk": chunks[0], "space_chunk": f"{chunks[1]}x{chunks[2]}",
                          "chunks": list(chunks), "predicted_s": predicted,
                          "predicted_requests": counts["requests"], "predicted_bytes": counts["bytes"],
                          "measured_s": measured[0] if measured else None,
                          "measured_variant": measured[1] if measured else None})
        shapes.append({"chunks": list(chunks), "score": _score(times, mix), "times": times,
                       "chunk_bytes": math.prod(chunks) * itemsize,
                       "measured": any((chunks, p) in measured_by_chunks for p in patterns)})
    ranked = sorted((s for s in shapes if s["score"] is not None), key=lambda s: s["score"])
    best = ranked[0] if ranked else None
    recommendation = None
    if best:
        label = "x".join(map(str, best["chunks"]))
        measure = "mix-weighted time" if mix else "time-series x map time product"
        recommendation = {
            **best, "by": measure,
            "sentence": (f"Predicted best chunk shape for {'the mix' if mix else 'balanced access'}: {label} "
                         f"({best['chunk_bytes'] / 1e6:.2f} MB per chunk, {measure} {best['score']:.3g}); "
                         + ("it was measured." if best["measured"] else
                            "it was NOT measured: rechunk to it and run the benchmark before relying on it.")),
        }
    return {"shape": list(shape), "measured_shape": list(measured_shape), "itemsize": itemsize,
            "reader": reader, "platform": platform, "compression_ratio": compression, "overhead": overhead,
            "models": {f"{r}|{p}": m for (r, p), m in models.items()},
            "model": model, "holdout": holdout_error(records, variants, measured_shape, itemsize),
            "grid_predictions": cells, "shapes": shapes, "recommendation": recommendation}
