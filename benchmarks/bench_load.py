"""Load: N uploads at once through the local pipeline; every pipeline completes, no result lost
or duplicated; how long it takes and how much memory the local cloud and the driver use.

Starts its own local cloud (0 ms latency, no bandwidth cap), uploads one tiny
GEOS-like file N times under distinct keys with a one-case plan (the original
variant, timeseries-point, h5py-s3fs-aligned, local-lambda, 1 repetition),
delivers the N events at once (N ingest processes side by side), waits, then
counts RUN/RESULT/SUMMARY items, executions and bench runs (from their metrics).

    .venv/bin/python benchmarks/bench_load.py                  # 50 uploads
    .venv/bin/python benchmarks/bench_load.py --uploads 10 --json /tmp/load.json

Prints progress and a JSON report (default benchmarks/results/bench_load.json);
exits 1 when any pipeline is incomplete.
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

from layoutlab.local.cloud import start_local_cloud  # noqa: E402
from layoutlab.local.load import ONE_CASE_PLAN, run_load  # noqa: E402
from layoutlab.local.pipeline import LocalPipeline  # noqa: E402
from layoutlab.results.record import host_info  # noqa: E402
from layoutlab.samples import geos  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SHAPE = (4, 5, 6)
PLAN = {**ONE_CASE_PLAN, "name": "load"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uploads", type=int, default=50, help="uploads delivered at once (default 50)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the executions")
    parser.add_argument("--json", type=Path, default=RESULTS / "bench_load.json", help="where to write the report")
    args = parser.parse_args(argv)
    if args.uploads < 1:
        parser.error("--uploads must be at least 1")

    with tempfile.TemporaryDirectory(prefix="layoutlab-load-") as work:
        work = Path(work)
        sample = geos.write_geos(work / "tiny.nc", shape=SHAPE)
        sample_bytes = sample.stat().st_size
        load_before = os.getloadavg()[0]
        cloud = start_local_cloud(work / "cloud.json", latency_ms=0, bandwidth_mbps=0, log_path=work / "cloud.log")
        try:
            pipeline = LocalPipeline(cloud)
            pipeline.setup()
            pipeline.put_plan(PLAN["name"], PLAN)
            last = [0.0]

            def progress(done, planned):
                if time.monotonic() - last[0] > 5:
                    last[0] = time.monotonic()
                    print(f"  cases done {done}/{planned}", file=sys.stderr, flush=True)

            print(f"{args.uploads} uploads of {sample.stat().st_size} bytes, plan {PLAN['name']!r}", file=sys.stderr)
            report = run_load(pipeline, sample, args.uploads, PLAN["name"], timeout=args.timeout, progress=progress)
        finally:
            cloud.stop()
    out = {
        "benchmark": "bench_load",
        "command": "benchmarks/bench_load.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": host_info(),
        "sample_bytes": sample_bytes,
        # other work on the machine while it ran (the figures are wall-clock)
        "loadavg_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        **report.to_dict(),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2, default=str))
    print(json.dumps(report.to_dict(), indent=2))
    print(f"wrote {args.json}", file=sys.stderr)
    return 0 if report.complete else 1


if __name__ == "__main__":
    sys.exit(main())
