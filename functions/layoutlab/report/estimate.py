"""What running the whole pipeline in AWS would take for a dataset: wall time and dollars.

Every rate is measured here, never assumed:
  * rechunk cost per MiB and per chunk written: a non-negative least-squares fit
    (``model.fit_nonnegative``) of seconds ~ a x MiB + b x chunks over the rows of
    ``benchmarks/results/rechunk*.json`` (``bench_rechunk.py``: layoutlab's own rows,
    and the seed-grid rows of ``--seed-grid``) and the kept results' Zarr VARIANT
    items (their ``rechunk.seconds`` and ``rechunk.bytes``);
  * read time of each benchmark case: ``model.predict_grid`` fitted on the kept
    results and asked about the target shape.
The fan-out follows ``pipeline/planning.py``: a single-stage rechunk splits into
the planner's work units (one Lambda each, memory bound = half the function's
memory, as ``pipeline/variants.py`` sets it); a two-stage rechunk too (units of every
stage in the same Map, stage 0 listed first; a stage-1 unit catches up on the stage-0
units it reads, so its critical path is one unit per stage). Only a chunk too big for
half a Lambda's memory runs whole on a Fargate task. Work units of every variant share the concurrency; so do cases.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from layoutlab.convert.rechunk_plan import PlanError
from layoutlab.errors import UserError
from layoutlab.kinds._transfer import RECHUNK_MEMORY_SHARE  # the share of a platform's memory a rechunk gets

REPO_RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"
NGUYEN = {  # Nguyen et al. 2023, one node, GEOS-FP 5136 x 721 x 1152 (seeds/nguyen2023-zarr-chunking.txt)
    "balanced_chunks": (48, 100, 100), "balanced_minutes": 22.44,
    "fastest_chunks": (5136, 100, 100), "fastest_minutes": 6.66,
    "slowest_chunks": (6, 50, 10), "slowest_hours": 46.516,
}
LAMBDA_TIMEOUT_S = 900


def rechunk_observations(paths: list[Path], kept_items: list[dict] | None = None) -> list[dict]:
    """(MiB, chunks written, seconds) rows of measured rechunks, with where each came from."""
    rows = []
    for path in paths:
        data = json.loads(path.read_text())
        shape = data.get("shape")
        itemsize = 4
        max_mem = int(data.get("max_mem") or 512 * 2**20)
        for row in data.get("rows", []):
            if row.get("tool") != "layoutlab" or not row.get("seconds") or not shape:
                continue
            chunks = [row["chunks"][k] for k in ("time", "lat", "lon")]
            rows.append(_observation(shape, chunks, itemsize, row["seconds"], f"{path.name} ({data.get('date', '?')})",
                                     row.get("stages") or _stages(shape, itemsize, chunks, max_mem)))
        grid = data.get("seed_grid") or {}
        for row in grid.get("rows", []):
            rows.append(_observation(grid["shape"], row["chunks"], itemsize, row["seconds"],
                                     f"{path.name} seed grid ({data.get('date', '?')})",
                                     _stages(grid["shape"], itemsize, row["chunks"], max_mem)))
    from layoutlab.report.model import variant_chunks

    for item in kept_items or []:
        rechunk = item.get("rechunk") or {}
        chunks = variant_chunks(item.get("variant", ""), item)
        if item.get("kind") == "VARIANT" and chunks and rechunk.get("seconds") and item.get("grid_shape"):
            rows.append(_observation(item["grid_shape"], chunks, 4, rechunk["seconds"], f"kept result {item['variant']}",
                                     int(rechunk.get("stages") or 1)))
    return rows


def _stages(shape, itemsize, chunks, max_mem) -> int:
    """Stages the planner chose for a measured rechunk (bench_rechunk.py's source is (1, lat, lon)-chunked)."""
    from layoutlab.convert.rechunk_plan import ArraySpec, plan_array

    chunks = [min(int(c), int(n)) for c, n in zip(chunks, shape)]
    try:
        return len(plan_array(ArraySpec("data", tuple(shape), itemsize, (1, shape[1], shape[2]), tuple(chunks)),
                              max_mem, source_concurrency=1).stages)
    except PlanError:
        return 1


def _observation(shape, chunks, itemsize, seconds, source, stages: int = 1) -> dict:
    chunks = [min(int(c), int(n)) for c, n in zip(chunks, shape)]
    mib = math.prod(shape) * itemsize / 2**20
    return {"mib": mib, "chunks_written": math.prod(math.ceil(n / c) for n, c in zip(shape, chunks)),
            "extra_stage_mib": mib * (max(1, stages) - 1),
            "seconds": float(seconds), "shape": list(shape), "chunks": chunks, "stages": stages, "source": source}


def fit_rechunk_rate(observations: list[dict]) -> dict:
    """seconds ~ a x MiB + b x chunks + c x MiB through an intermediate (a, b, c >= 0):
    MiB/s = 1/a, s per chunk written = b, and c the extra s per MiB of a two-stage plan."""
    from layoutlab.report.model import fit_nonnegative

    if len(observations) < 2:
        raise UserError("no measured rechunk rate: run 'python benchmarks/bench_rechunk.py --seed-grid' "
                        "(writes benchmarks/results/rechunk.json) or keep results of a run with Zarr variants")
    X = np.array([[o["mib"], o["chunks_written"], o.get("extra_stage_mib", 0.0)] for o in observations])
    y = np.array([o["seconds"] for o in observations])
    a, b, c = fit_nonnegative(X, y)
    if a <= 0:
        raise UserError("the measured rechunks do not determine a per-MiB cost; measure bigger sources "
                        "('python benchmarks/bench_rechunk.py')")
    predicted = X @ np.array([a, b, c])
    errors = np.abs(predicted - y) / y
    return {"s_per_mib": float(a), "mib_per_s": float(1 / a), "s_per_chunk": float(b),
            "s_per_extra_stage_mib": float(c),
            "observations": len(observations), "median_relative_error": float(np.median(errors)),
            "sources": sorted({o["source"] for o in observations})}


def rechunk_seconds(rate: dict, mib: float, chunks: float, stages: int = 1) -> float:
    return (rate["s_per_mib"] * mib + rate["s_per_chunk"] * chunks
            + rate.get("s_per_extra_stage_mib", 0.0) * mib * (max(1, stages) - 1))


def plan_conversion(shape, itemsize: int, chunks, memory_mb: int) -> dict:
    """Stages and work units of rechunking a (1, lat, lon)-chunked source to ``chunks``."""
    from layoutlab.convert.rechunk_plan import ArraySpec, plan_array

    spec = ArraySpec("data", tuple(shape), itemsize, (1, shape[1], shape[2]), tuple(chunks))
    plan = plan_array(spec, int(memory_mb * 2**20 * RECHUNK_MEMORY_SHARE), source_concurrency=1)
    return {"stages": len(plan.stages), "units": len(plan.units),
            "unit_shape": list(plan.stages[0].unit_shape) if plan.stages else None}


def estimate_pipeline(shape, itemsize: int, grid: list, *, platform: str, concurrency: int,
                      records: list[dict], variants: dict, rate: dict, prices: dict,
                      repetitions: int, convert_fargate: str = "fargate-1-4096") -> dict:
    """Wall time and $ for converting ``grid`` chunk shapes of ``shape`` and benchmarking each."""
    from layoutlab.platforms import platform_profile
    from layoutlab.report import cost
    from layoutlab.report.model import predict_grid

    bench = platform_profile(platform)
    lam = platform_profile("lambda-1769" if bench.kind != "lambda" else platform)
    far = platform_profile(convert_fargate)
    total_mib = math.prod(shape) * itemsize / 2**20
    model = predict_grid(records, variants, target_shape=shape, itemsize=itemsize, grid=grid)
    compression = model["compression_ratio"]
    variants_out, unit_seconds, fargate_tasks, critical_paths = [], [], [], []
    usd = {"convert_lambda": 0.0, "convert_fargate": 0.0, "convert_s3_put": 0.0, "bench_compute": 0.0,
           "bench_s3_get": 0.0, "storage_per_month": 0.0}
    for chunks in grid:
        chunks = [min(int(c), n) for c, n in zip(chunks, shape)]
        n_chunks = math.prod(math.ceil(n / c) for n, c in zip(shape, chunks))
        try:
            plan = plan_conversion(shape, itemsize, chunks, lam.memory_mb)
        except PlanError:  # one chunk does not fit half a Lambda's memory: the planner sends it to Fargate
            plan = {"stages": None, "units": 0}
        single_core_s = rechunk_seconds(rate, total_mib, n_chunks, plan["stages"] or 1)
        entry = {"chunks": chunks, "chunks_written": n_chunks, "stages": plan["stages"],
                 "single_core_s": single_core_s}
        if plan["stages"] and plan["units"] > 1:
            per_unit = single_core_s / plan["units"]
            unit_seconds += [per_unit] * plan["units"]
            critical_paths.append(per_unit * plan["stages"])
            entry.update(runs_on=f"{plan['units']} Lambda work units"
                         + (f" in {plan['stages']} stages" if plan["stages"] > 1 else ""), unit_s=per_unit,
                         over_lambda_timeout=per_unit > LAMBDA_TIMEOUT_S)
            usd["convert_lambda"] += plan["units"] * (
                cost.lambda_access_usd(per_unit, lam.memory_mb, prices)["compute_usd"]
                + prices["lambda"]["usd_per_million_requests"] / 1e6)
        else:
            fargate_tasks.append(single_core_s)
            entry.update(runs_on=f"one Fargate task ({convert_fargate})")
            usd["convert_fargate"] += cost.fargate_batch_usd(single_core_s, far.vcpu, far.memory_mb, prices, 1)["compute_usd"]
        usd["convert_s3_put"] += n_chunks * prices["s3"]["usd_per_1000_put"] / 1000
        usd["storage_per_month"] += cost.storage_usd_per_month(total_mib * 2**20 * compression, prices)
        variants_out.append(entry)
    # Conversion wall: Lambda units at the concurrency (longest unit at least), Fargate tasks side by side.
    lambda_wall = max(max(critical_paths, default=0.0), sum(unit_seconds) / concurrency)
    fargate_wall = max(max(fargate_tasks, default=0.0), sum(fargate_tasks) / concurrency)
    convert_wall = max(lambda_wall, fargate_wall)
    # Benchmark: every (shape, pattern) cell x repetitions, one process per case.
    cases = [cell for cell in model["grid_predictions"]] * repetitions
    case_seconds = [c["predicted_s"] for c in cases]
    bench_wall = max(max(case_seconds, default=0.0), sum(case_seconds) / concurrency)
    for c in cases:
        if bench.kind == "lambda":
            one = cost.lambda_access_usd(c["predicted_s"], bench.memory_mb, prices)
            usd["bench_compute"] += one["compute_usd"] + one["request_usd"]
        else:  # one task per case: each pays Fargate's one-minute minimum
            usd["bench_compute"] += cost.fargate_batch_usd(c["predicted_s"], bench.vcpu, bench.memory_mb, prices, 1)["compute_usd"]
        usd["bench_s3_get"] += c["predicted_requests"] * prices["s3"]["usd_per_1000_get"] / 1000
    # A reader decodes whole chunks: a chunk whose decoded plus stored copy exceeds the
    # platform's memory cannot be read there (its cases would fail, not be slow).
    too_big = [v["chunks"] for v in variants_out
               if math.prod(v["chunks"]) * itemsize * (1 + compression) > bench.memory_mb * 2**20]
    usd["run_total"] = sum(v for k, v in usd.items() if k != "storage_per_month")
    nguyen = {}
    for label in ("balanced", "fastest", "slowest"):
        chunks = NGUYEN[f"{label}_chunks"]
        match = next((v for v in variants_out if v["chunks"] == [min(c, n) for c, n in zip(chunks, shape)]), None)
        paper_s = NGUYEN.get(f"{label}_minutes", 0) * 60 or NGUYEN.get(f"{label}_hours", 0) * 3600
        nguyen[label] = {"chunks": list(chunks), "paper_s": paper_s,
                         "ours_single_core_s": match["single_core_s"] if match else None,
                         "ours_fanned_out": match["runs_on"] if match else None,
                         "ours_wall_s": (match.get("unit_s") or match["single_core_s"]) if match else None}
    return {"shape": list(shape), "itemsize": itemsize, "grid_shapes": len(grid), "platform": platform,
            "concurrency": concurrency, "repetitions": repetitions, "benchmark_cases": len(cases),
            "rechunk_rate": rate, "compression_ratio": compression,
            "read_model": {"reader": model["reader"], "platform": model["platform"], "coef": model["model"]["coef"],
                           "latency_ms": next((r.get("latency_ms") for r in records if r.get("platform") == model["platform"]), None),
                           "bandwidth_mbps": next((r.get("bandwidth_mbps") for r in records if r.get("platform") == model["platform"]), None),
                           "held_out_by_platform": model["holdout"]["median_relative_error_by_platform"],
                           "held_out_median_relative_error": model["holdout"]["median_relative_error"],
                           "measured_shape": model["measured_shape"]},
            "chunks_over_bench_memory": too_big,
            "convert_wall_s": convert_wall, "bench_wall_s": bench_wall, "total_wall_s": convert_wall + bench_wall,
            "sum_single_core_convert_s": sum(v["single_core_s"] for v in variants_out),
            "usd": usd, "prices": prices.get("name"), "variants": variants_out, "nguyen": nguyen,
            "recommendation": model["recommendation"]}


# --- any file: from its structure model -------------------------------------------------------------

def repack_rate(paths: list[Path]) -> dict:
    """Paged repack seconds per MiB and size overhead, from ``bench_repack.py``'s rows (layoutlab's own copier):
    the median over the measured inputs, with where they came from."""
    rows = []
    for path in paths:
        data = json.loads(path.read_text())
        for row in data.get("rows", []):
            measured = row.get("layoutlab") or {}
            if row.get("input_bytes") and measured.get("median_seconds"):
                rows.append((measured["median_seconds"] / (row["input_bytes"] / 2**20), measured.get("size_overhead", 0.0),
                             f"{path.name} {row.get('input', '?')} ({data.get('date', '?')})"))
    if not rows:
        raise UserError("no measured repack rate: run 'python benchmarks/bench_repack.py --json "
                        "benchmarks/results/bench_repack.json'")
    return {"s_per_mib": float(np.median([r[0] for r in rows])), "size_overhead": float(np.median([r[1] for r in rows])),
            "observations": len(rows), "sources": sorted({r[2] for r in rows})}


def zarr_compression(paths: list[Path]) -> dict:
    """Stored / declared bytes of the Zarr copies ``bench_rechunk.py`` measured (blosc-zstd:3, its GEOS-like data)."""
    ratios, sources = [], set()
    for path in paths:
        data = json.loads(path.read_text())
        for row in data.get("rows", []):
            if row.get("stored_mib") and data.get("data_bytes"):
                ratios.append(row["stored_mib"] * 2**20 / data["data_bytes"])
                sources.add(f"{path.name} ({data.get('date', '?')})")
    if not ratios:
        raise UserError("no measured Zarr size: run 'python benchmarks/bench_rechunk.py' (benchmarks/results/rechunk.json)")
    return {"ratio": float(np.median(ratios)), "observations": len(ratios), "sources": sorted(sources)}


def zarr_chunks(structure, spec: dict) -> tuple[float, int]:
    """(MiB declared, chunk objects written) of a Zarr copy of every numeric array of ``structure``: by the
    spec's ``record_chunk`` (first axis) or its {dimension: size} ``chunks`` (a dimension by its base name, as the
    copy names it; an array's own dimension scale in one chunk, as convert/rechunk_zarr.py writes it)."""
    mib, chunks = 0.0, 0
    by_name = spec.get("chunks") if isinstance(spec.get("chunks"), dict) else {}
    for array in structure.arrays.values():
        if array.outside_file or not array.shape:
            continue
        mib += array.nbytes / 2**20
        if spec.get("record_chunk"):
            sizes = (int(spec["record_chunk"]), *array.shape[1:])
        elif array.dims == (array.path,):
            sizes = array.shape
        else:
            sizes = tuple(int(by_name.get(d.rpartition("/")[2], n)) for d, n in zip(array.dims, array.shape))
        chunks += math.prod(max(1, -(-n // max(1, min(c, n)))) for n, c in zip(array.shape, sizes))
    return mib, chunks
