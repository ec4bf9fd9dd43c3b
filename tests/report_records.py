"""Hand-built result-table items for the report tests: a gridded dataset (original, paged, three
Zarr chunk shapes; time series and maps; two readers of HDF5; two platforms; three repetitions)
and a granule dataset (original and paged, one pattern). Times follow a simple law of requests
and bytes (so the read-time model can fit them) with the paper's trade-off: long time chunks
win time series, whole-map chunks win maps.

Imported as ``report_records`` (pytest puts tests/ on the path: pyproject's ``pythonpath``).
"""

from __future__ import annotations

from layoutlab.report.model import chunk_geometry

GRID = "geos-test-0001"
GRANULE = "atl03-test-0002"
SHAPE = (48, 20, 30)
ZARR = {"zarr-48x2x3": (48, 2, 3), "zarr-1x20x30": (1, 20, 30), "zarr-12x10x10": (12, 10, 10)}
SELECTIONS = {"timeseries-point": {"lat_index": 5, "lon_index": 7}, "map-timestep": {"time_index": 24}}
REGIONS = {"timeseries-point": [(0, 48), (5, 6), (7, 8)], "map-timestep": [(24, 25), (0, 20), (0, 30)]}
PLATFORMS = {"local-lambda": ({"name": "local-lambda", "kind": "lambda", "memory_mb": 1769, "local": True}, 1.0),
             "local-fargate": ({"name": "local-fargate", "kind": "fargate", "memory_mb": 2048, "vcpu": 1,
                                "local": True}, 1.1)}


def _result(dataset, variant, pattern, reader, platform, rep, *, requests, nbytes, points, selection=None):
    profile, factor = PLATFORMS[platform]
    wall = (0.03 + 0.004 * requests + 0.02 * nbytes / 2**20) * factor * (1 + rep / 50)
    return {"kind": "RESULT", "dataset": dataset, "variant": variant, "pattern": pattern, "reader": reader,
            "platform": platform, "platform_profile": profile, "repetition": rep, "checksum_ok": True,
            "status": "ok", "wall_s": wall, "load_s": wall * 0.6, "requests": requests, "get_requests": requests,
            "head_requests": 0, "bytes_transferred": nbytes, "bytes_needed": points * 4, "points": points,
            "points_per_s": points / wall, "throughput_gbps": points * 4 * 8 / (wall * 0.6) / 1e9,
            "peak_rss_mb": 80 + 2 * nbytes / 2**20, "selection": selection or {}, "latency_ms": 25,
            "bandwidth_mbps": 720, "host": {"machine": "test"}, "created_at": f"2026-11-23T01:0{rep}:00+00:00"}


def grid_items() -> list[dict]:
    items = [{"kind": "RUN", "dataset": GRID, "status": "SUCCEEDED", "grid_shape": list(SHAPE),
              "source": {"key": "incoming/geos-test.nc"}}]
    raw = 48 * 20 * 30 * 4
    items.append({"kind": "VARIANT", "dataset": GRID, "variant": "original", "variant_kind": "original",
                  "format": "hdf5", "size_bytes": raw})
    items.append({"kind": "VARIANT", "dataset": GRID, "variant": "paged-1MiB", "variant_kind": "repack-paged",
                  "format": "hdf5", "size_bytes": int(raw * 1.03), "size_overhead": 0.03, "convert_s": 0.5})
    for name, chunks in ZARR.items():
        items.append({"kind": "VARIANT", "dataset": GRID, "variant": name, "variant_kind": "rechunk-zarr",
                      "format": "zarr", "size_bytes": int(raw * 0.8), "size_overhead": -0.2, "convert_s": 1.0,
                      "spec": {"chunks": dict(zip(("time", "lat", "lon"), chunks))}})
    for platform in PLATFORMS:
        for rep in range(3):
            for pattern, region in REGIONS.items():
                points = chunk_geometry(SHAPE, SHAPE, region)["points"]
                for name, chunks in ZARR.items():
                    g = chunk_geometry(SHAPE, chunks, region)
                    items.append(_result(GRID, name, pattern, "zarr-obstore", platform, rep,
                                         requests=g["chunks_touched"] + 1, nbytes=int(g["chunk_elements"] * 4 * 0.8) + 500,
                                         points=points, selection=SELECTIONS[pattern]))
                for variant, extra in (("original", 0), ("paged-1MiB", 1)):
                    for reader, mult in (("h5py-s3fs-aligned", 1), ("h5py-s3fs-default", 6)):
                        items.append(_result(GRID, variant, pattern, reader, platform, rep,
                                             requests=(8 + extra) * mult, nbytes=raw * mult // 2, points=points,
                                             selection=SELECTIONS[pattern]))
    return items


def granule_items() -> list[dict]:
    items = [{"kind": "RUN", "dataset": GRANULE, "status": "SUCCEEDED", "source": {"key": "incoming/atl03-test.h5"}},
             {"kind": "VARIANT", "dataset": GRANULE, "variant": "original", "variant_kind": "original",
              "format": "hdf5", "size_bytes": 3_000_000},
             {"kind": "VARIANT", "dataset": GRANULE, "variant": "paged-8MiB", "variant_kind": "repack-paged",
              "format": "hdf5", "size_bytes": 3_090_000, "size_overhead": 0.03, "convert_s": 0.7}]
    for platform in PLATFORMS:
        for rep in range(3):
            for variant, requests in (("original", 40), ("paged-8MiB", 4)):
                items.append(_result(GRANULE, variant, "beam-read", "h5py-s3fs-aligned", platform, rep,
                                     requests=requests, nbytes=2_000_000, points=100_000))
    items.append({"kind": "FAILURE", "dataset": GRANULE, "stage": "bench", "detail": "original#beam-subset",
                  "reason": "a <reason> with markup"})
    return items


def all_items() -> list[dict]:
    return grid_items() + granule_items()
