"""The read-time model: non-negative fit, chunk geometry, held-out error, predictions, and `estimate`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from layoutlab import cli
from layoutlab.report.model import chunk_geometry, fit_nonnegative, predict_counts, predict_grid

SHAPE = (48, 20, 30)
RATIO = 0.5  # stored / raw bytes
OVERHEAD_REQUESTS, OVERHEAD_BYTES = 2, 1000
TRUE = {"intercept": 0.1, "requests": 0.01, "mib": 0.02, "mpoints": 0.0}
SELECTIONS = {"timeseries-point": {"lat_index": 5, "lon_index": 7}, "map-timestep": {"time_index": 24},
              "timeseries-region-mean": {"lat_slice": [4, 8], "lon_slice": [10, 14]},
              "map-time-mean": {"time_slice": [0, 6]}}
REGIONS = {"timeseries-point": [(0, 48), (5, 6), (7, 8)], "map-timestep": [(24, 25), (0, 20), (0, 30)],
           "timeseries-region-mean": [(0, 48), (4, 8), (10, 14)], "map-time-mean": [(0, 6), (0, 20), (0, 30)]}
MEASURED = {"zarr-48x2x3": (48, 2, 3), "zarr-1x20x30": (1, 20, 30), "zarr-12x10x10": (12, 10, 10),
            "zarr-6x5x15": (6, 5, 15)}


def synthetic(platform="lambda-1769"):
    """Results whose times follow TRUE exactly, with counts from the chunk geometry."""
    records, variants = [], {}
    for name, chunks in MEASURED.items():
        variants[name] = {"kind": "VARIANT", "dataset": "d", "variant": name, "format": "zarr",
                          "size_bytes": int(math.prod(SHAPE) * 4 * RATIO), "spec": {"chunks": dict(zip(("time", "lat", "lon"), chunks))}}
        for pattern, region in REGIONS.items():
            c = predict_counts(SHAPE, chunks, 4, region, RATIO, OVERHEAD_REQUESTS, OVERHEAD_BYTES)
            wall = (TRUE["intercept"] + TRUE["requests"] * c["requests"] + TRUE["mib"] * c["bytes"] / 2**20)
            for rep in range(2):
                records.append({"kind": "RESULT", "dataset": "d", "variant": name, "pattern": pattern,
                                "reader": "zarr-obstore", "platform": platform, "repetition": rep,
                                "wall_s": wall, "checksum_ok": True, "requests": int(c["requests"]),
                                "bytes_transferred": int(round(c["bytes"])), "points": c["points"],
                                "selection": SELECTIONS[pattern], "pattern_params": {"variable": "BCEXTTAU"},
                                "platform_profile": {"kind": "lambda", "memory_mb": 1769, "vcpu": 1.0}})
    return records, variants


def test_fit_nonnegative_recovers_coefficients_and_never_goes_negative():
    rng = np.random.default_rng(0)
    X = np.column_stack([np.ones(50), rng.uniform(1, 100, 50), rng.uniform(0, 10, 50)])
    assert fit_nonnegative(X, X @ np.array([0.5, 0.02, 1.5])) == pytest.approx([0.5, 0.02, 1.5])
    y = X @ np.array([0.5, -0.02, 1.5])  # a column that "saves" time gets 0, the others refit
    coef = fit_nonnegative(X, y)
    assert coef[1] == 0 and (coef >= 0).all()
    assert np.linalg.norm(X @ coef - y) < np.linalg.norm(X @ np.clip(np.linalg.lstsq(X, y, rcond=None)[0], 0, None) - y)


def test_chunk_geometry_counts_edge_chunks_by_their_real_size():
    # 10 steps in chunks of 4: steps 8..9 sit in the last chunk, which holds 2 steps, not 4
    assert chunk_geometry((10,), (4,), [(8, 10)]) == {"chunks_touched": 1, "chunk_elements": 2, "points": 2}
    g = chunk_geometry(SHAPE, (24, 5, 10), REGIONS["map-timestep"])
    assert g["chunks_touched"] == 1 * 4 * 3 and g["chunk_elements"] == 24 * 20 * 30


def test_model_recovers_known_coefficients_and_predicts_held_out_variants():
    records, variants = synthetic()
    out = predict_grid(records, variants)
    assert out["shape"] == list(SHAPE)  # told from the points read and the full-map variant
    assert out["compression_ratio"] == pytest.approx(RATIO)
    assert out["overhead"]["requests"] == OVERHEAD_REQUESTS
    assert out["model"]["coef"] == pytest.approx(TRUE, abs=1e-6)
    assert out["holdout"]["median_relative_error"] < 1e-3 and out["holdout"]["meets_goal"]
    assert {c["variant"] for c in out["holdout"]["cases"]} == set(MEASURED)


def test_unmeasured_shape_gets_its_request_count_from_geometry():
    records, variants = synthetic()
    cells = {(c["pattern"], tuple(c["chunks"])): c for c in predict_grid(records, variants, grid=[(24, 5, 10), (48, 2, 3)])["grid_predictions"]}
    unmeasured = cells[("timeseries-point", (24, 5, 10))]
    assert unmeasured["predicted_requests"] == 2 + OVERHEAD_REQUESTS  # 48 steps in chunks of 24
    assert unmeasured["measured_s"] is None
    assert cells[("map-timestep", (24, 5, 10))]["predicted_requests"] == 4 * 3 + OVERHEAD_REQUESTS
    measured = cells[("map-timestep", (48, 2, 3))]
    assert measured["measured_s"] == pytest.approx(measured["predicted_s"])
    assert measured["space_chunk"] == "2x3" and measured["time_chunk"] == 48


def test_recommendation_follows_the_mix_and_says_whether_it_was_measured():
    records, variants = synthetic()
    grid = [(48, 2, 3), (1, 20, 30), (24, 5, 10)]
    series = predict_grid(records, variants, grid=grid, mix={"timeseries-point": 1.0})["recommendation"]
    maps = predict_grid(records, variants, grid=grid, mix={"map-timestep": 1.0})["recommendation"]
    assert series["chunks"] == [48, 2, 3] and series["measured"] and "it was measured" in series["sentence"]
    assert maps["chunks"] == [1, 20, 30]
    balanced = predict_grid(records, variants, grid=[(24, 5, 10), (48, 1, 1), (1, 20, 30)])["recommendation"]
    assert balanced["chunks"] == [24, 5, 10] and not balanced["measured"] and "NOT measured" in balanced["sentence"]


def test_estimate_uses_measured_rates_end_to_end(tmp_path, capsys):
    records, variants = synthetic()
    results = tmp_path / "results.json"
    results.write_text(json.dumps(records + list(variants.values())))
    # a rechunk benchmark whose times are exactly 1/50 s per MiB + 1 ms per chunk written
    shape, rows = [96, 40, 60], []
    for chunks in ((1, 40, 60), (12, 40, 60), (96, 40, 60), (1, 10, 10)):
        n = math.prod(math.ceil(s / c) for s, c in zip(shape, chunks))
        rows.append({"tool": "layoutlab", "chunks": dict(zip(("time", "lat", "lon"), chunks)), "stages": 1,
                     "seconds": math.prod(shape) * 4 / 2**20 / 50 + n * 0.001})
    bench = tmp_path / "rechunk.json"
    bench.write_text(json.dumps({"shape": shape, "date": "2026-11-23", "max_mem": 2**29, "rows": rows}))
    assert cli.main(["estimate", "--shape", "96,40,60", "--results", str(results),
                     "--rechunk-results", str(bench), "--concurrency", "10", "--json"]) == 0
    estimate = json.loads(capsys.readouterr().out)
    assert estimate["rechunk_rate"]["mib_per_s"] == pytest.approx(50, rel=1e-6)
    assert estimate["rechunk_rate"]["s_per_chunk"] == pytest.approx(0.001, rel=1e-6)
    assert estimate["benchmark_cases"] == estimate["grid_shapes"] * 4 * 3
    assert estimate["read_model"]["coef"] == pytest.approx(TRUE, abs=1e-6)
    assert 0 < estimate["convert_wall_s"] <= estimate["sum_single_core_convert_s"]
    assert estimate["usd"]["run_total"] > 0 and estimate["nguyen"]["balanced"]["paper_s"] == pytest.approx(22.44 * 60)
