#!/usr/bin/env python
"""layoutlab's DirectChunkCodec vs zarr-python's own codec pipelines, writing and reading one array.

The rechunker (convert/rechunk_zarr.py) encodes whole chunks of unsharded Zarr v3 arrays with
numcodecs directly (``DirectChunkCodec``) because zarr-python's per-chunk async pipeline cost about as
much as the compressor itself. zarr 3.4 ships an opt-in synchronous pipeline (``FusedCodecPipeline``)
meant to remove that cost. This script writes the same array (a GEOS-like float32 field, the
compressor the rechunker uses by default) into a LocalStore by each path and reads it back, in fresh
directories, alternating, ``--repeat`` times; it checks every path stores the same bytes and reads the
same values, and prints median seconds and the ratio to DirectChunkCodec.

    python benchmarks/bench_zarr_codec_path.py --json benchmarks/results/zarr_codec_path.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "functions"))

import zarr  # noqa: E402
from zarr.storage import LocalStore  # noqa: E402

from layoutlab.convert.rechunk_zarr import (  # noqa: E402
    DEFAULT_COMPRESSOR,
    DirectChunkCodec,
    _array_metadata,
    _open_writer,
    compressor_codecs,
)

PIPELINES = {
    "zarr-batched": "zarr.core.codec_pipeline.BatchedCodecPipeline",  # zarr's default
    "zarr-fused": "zarr.core.codec_pipeline.FusedCodecPipeline",  # zarr 3.4's synchronous pipeline (opt-in)
}


def field(shape) -> np.ndarray:
    """A smooth field with noise: compresses like model output (~2-3x with zstd), not like zeros."""
    rng = np.random.default_rng(7)
    t, y, x = (np.arange(n, dtype="f4") for n in shape)
    smooth = np.sin(t[:, None, None] / 9) + np.cos(y[None, :, None] / 31) * np.sin(x[None, None, :] / 47)
    return (smooth + rng.normal(0, 0.01, shape).astype("f4")).astype("f4")


def stored(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "zarr.json"):
        digest.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return digest.hexdigest()


def run(path_name: str, metadata: dict, data: np.ndarray, workdir: Path, concurrency: int) -> dict:
    root = Path(tempfile.mkdtemp(dir=workdir))
    store = LocalStore(root)
    zarr.config.set({"codec_pipeline.path": PIPELINES.get(path_name, PIPELINES["zarr-batched"])})
    started = time.perf_counter()
    if path_name == "direct":
        DirectChunkCodec(metadata).write_region(store, "v", [0] * data.ndim, data, concurrency)
    else:
        _open_writer(store, "v", metadata)[...] = data
    write_seconds = time.perf_counter() - started
    started = time.perf_counter()
    if path_name == "direct":
        back = DirectChunkCodec(metadata).read_region(store, "v", [0] * data.ndim, list(data.shape), concurrency)
    else:
        back = _open_writer(store, "v", metadata)[...]
    read_seconds = time.perf_counter() - started
    result = {"write_seconds": write_seconds, "read_seconds": read_seconds, "stored_sha256": stored(root / "v"),
              "values_equal": bool(np.array_equal(back, data))}
    shutil.rmtree(root)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="120,361,576", help="array shape (default: %(default)s, ~100 MB float32)")
    parser.add_argument("--chunks", default="1,181,144", help="chunk shape (default: %(default)s, ~100 KB chunks)")
    parser.add_argument("--compressor", default=DEFAULT_COMPRESSOR, help="(default: the rechunker's, %(default)s)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=10, help="DirectChunkCodec's writes in flight (zarr's default 10)")
    parser.add_argument("--workdir", default=tempfile.gettempdir())
    parser.add_argument("--json", default="benchmarks/results/zarr_codec_path.json")
    args = parser.parse_args(argv)
    shape = tuple(int(n) for n in args.shape.split(","))
    chunks = tuple(int(n) for n in args.chunks.split(","))
    data = field(shape)
    metadata = _array_metadata("v", shape, data.dtype, chunks, None, compressor_codecs(args.compressor), float("nan"),
                               {}, None)
    assert DirectChunkCodec.supports(metadata), "the compressor is not one DirectChunkCodec handles"
    workdir = Path(args.workdir)
    load = os.getloadavg()
    runs: dict[str, list[dict]] = {name: [] for name in ("direct", *PIPELINES)}
    for repetition in range(args.repeat):
        order = list(runs)
        order = order[repetition % len(order):] + order[:repetition % len(order)]
        for name in order:
            runs[name].append(run(name, metadata, data, workdir, args.concurrency))
    digests = {r["stored_sha256"] for results in runs.values() for r in results}
    rows = {}
    for name, results in runs.items():
        rows[name] = {"median_write_seconds": statistics.median(r["write_seconds"] for r in results),
                      "median_read_seconds": statistics.median(r["read_seconds"] for r in results),
                      "values_equal": all(r["values_equal"] for r in results)}
    for name, row in rows.items():
        row["write_ratio_to_direct"] = row["median_write_seconds"] / rows["direct"]["median_write_seconds"]
        row["read_ratio_to_direct"] = row["median_read_seconds"] / rows["direct"]["median_read_seconds"]
    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}",
        "zarr": zarr.__version__, "load_average_start": load, "load_average_end": os.getloadavg(),
        "shape": shape, "chunks": chunks, "compressor": args.compressor, "array_bytes": data.nbytes,
        "repeat": args.repeat, "same_stored_bytes_on_every_path": len(digests) == 1, "rows": rows,
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
    }
    print(f"{report['date']}  {report['machine']}  zarr {zarr.__version__}  load {load[0]:.2f}")
    print(f"{data.nbytes / 2**20:.0f} MiB {shape} in {chunks} chunks, {args.compressor}; same stored bytes on every "
          f"path: {report['same_stored_bytes_on_every_path']}")
    print(f"{'path':<14}{'write s':>9}{'ratio':>7}{'read s':>9}{'ratio':>7}  values")
    for name, row in rows.items():
        print(f"{name:<14}{row['median_write_seconds']:>9.2f}{row['write_ratio_to_direct']:>7.2f}"
              f"{row['median_read_seconds']:>9.2f}{row['read_ratio_to_direct']:>7.2f}  "
              f"{'equal' if row['values_equal'] else 'DIFFER'}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0 if report["same_stored_bytes_on_every_path"] and all(r["values_equal"] for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
