"""A burst of granules of three products through the local pipeline (issue 35): each product studied once
(its first granule), every other granule converted with the product's decision; wall time, throughput,
the local cloud server's peak memory; every upload must end SUCCEEDED, none started twice.

Starts its own local cloud (0 ms latency, no bandwidth cap) with the deployed route (S3 -> EventBridge rule ->
SQS -> ingest in batches), writes one tiny GEOS-like granule and uploads it under ``incoming/<product>/g<n>.nc``
N times per product at once from a pool of threads; nothing is delivered by hand. Each product runs at most
``--bound`` executions at once (plan field products.max_concurrent_executions): the rest wait in the queue.
Granules started before their product's decision wait in the Plan state's retry.

    .venv/bin/python benchmarks/bench_product_burst.py                      # 1,000 granules
    .venv/bin/python benchmarks/bench_product_burst.py --granules 30 --json /tmp/burst.json

Writes a JSON report (default benchmarks/results/bench_product_burst.json); exits 1 when any upload did
not end SUCCEEDED, a product was studied more than once, or a product ran more executions at once than its
bound.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from layoutlab.local.burst import run_burst  # noqa: E402
from layoutlab.local.cloud import start_local_cloud  # noqa: E402
from layoutlab.local.pipeline import LocalPipeline  # noqa: E402
from layoutlab.results.record import host_info  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PRODUCTS = ["ALPHA", "BETA", "GAMMA"]
PLAN = {
    "name": "burst",
    "variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "1MiB"}],
    "patterns": {"grid": ["map-timestep"], "granule": []},
    "readers": {"hdf5": ["h5py-s3fs-aligned"]},
    "platforms": ["local-lambda"],
    "repetitions": 1,
    "products": {"study_granules": 1, "check_every": 100, "max_concurrent_executions": 3},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--granules", type=int, default=1000, help="granules in all, over three products (default 1000)")
    parser.add_argument("--threads", type=int, default=8, help="uploads and event deliveries at once (default 8)")
    parser.add_argument("--bound", type=int, default=PLAN["products"]["max_concurrent_executions"],
                        help="executions one product may run at once (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds to wait for the executions")
    parser.add_argument("--json", type=Path, default=RESULTS / "bench_product_burst.json", help="the report")
    args = parser.parse_args(argv)
    if args.granules < len(PRODUCTS):
        parser.error(f"--granules must be at least {len(PRODUCTS)}")
    per_product = args.granules // len(PRODUCTS)
    with tempfile.TemporaryDirectory(prefix="layoutlab-burst-") as work:
        work = Path(work)
        load_before = os.getloadavg()[0]
        cloud = start_local_cloud(work / "cloud.json", latency_ms=0, bandwidth_mbps=0, log_path=work / "cloud.log")
        try:
            pipeline = LocalPipeline(cloud)
            pipeline.setup(s3_events=True)
            plan = {**PLAN, "products": {**PLAN["products"], "max_concurrent_executions": args.bound}}
            burst = run_burst(pipeline, work, PRODUCTS, per_product, plan, threads=args.threads, timeout=args.timeout)
        finally:
            cloud.stop()
    ends = {}
    for status in burst["final"].values():
        ends[status] = ends.get(status, 0) + 1
    studies = {name: p["study_count"] for name, p in burst["products"].items()}
    ok = ends == {"SUCCEEDED": burst["granules"]} and burst["executions"] == burst["granules"] \
        and len(set(burst["execution_names"])) == burst["granules"] and all(n == 1 for n in studies.values()) \
        and all(peak <= args.bound for peak in burst["peak_executions"].values())
    out = {
        "benchmark": "bench_product_burst",
        "command": "benchmarks/bench_product_burst.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": host_info(),
        "loadavg_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "granules": burst["granules"], "granule_bytes": burst["granule_bytes"], "executions": burst["executions"],
        "ends": ends, "studies": studies,
        "production_granules": {n: p["production_granules"] for n, p in burst["products"].items()},
        "bound": args.bound, "peak_executions": burst["peak_executions"], "queues_after": burst["queues_after"],
        "wall_s": burst["wall_s"], "upload_s": burst["upload_s"], "upload_and_ingest_s": burst["upload_and_ingest_s"],
        "granules_per_s": burst["granules_per_s"], "cloud_peak_rss_mb": burst["cloud_peak_rss_mb"], "ok": ok,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2, default=str))
    print(json.dumps(out, indent=2, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
