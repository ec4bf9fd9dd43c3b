"""The plan step's requests and bytes: what reading an upload's metadata and coordinates costs (issue 34).

Uploads an HDF5 file (default: a ~1 GB ATL03-like sample written here with ``layoutlab sample atl03``'s
writer) to the local cloud, then runs the plan step's reading of it (``pipeline/planning._facts_and_reads``:
the dataset's facts, the structure or the granule's beams, h5coro's probe) through a client of the local
S3 proxy of its own, at the proxy's default latency. Prints the requests and bytes counted at the plan
step's own s3fs client (what the RUN item's ``plan_io`` records) and at the proxy, and their share of the file.

    .venv/bin/python benchmarks/bench_plan_io.py                      # ~1 GB ATL03-like sample
    .venv/bin/python benchmarks/bench_plan_io.py --file granule.h5    # any HDF5 / NetCDF-4 file
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "functions"))

# write_atl03's output measured: 30.95 MB for 210,000 photons per beam (bench_nsidc_table.py)
BYTES_PER_PHOTON = 30.95e6 / 210_000


def measure(path: Path, plan_name: str = "default") -> dict:
    from layoutlab.bench.runner import upload_target
    from layoutlab.local.cloud import start_local_cloud
    from layoutlab.pipeline import plan as plans
    from layoutlab.pipeline import planning

    cloud = start_local_cloud(objects_on_disk_over=256 * 2**20, timeout=300)  # (a loaded machine starts it slowly)
    try:
        for key, value in cloud.env().items():
            os.environ[key] = value
        url = upload_target(path, cloud, prefix="plan-io")
        client = cloud.new_client(name="plan-step")
        os.environ["AWS_ENDPOINT_URL_S3"] = os.environ["AWS_ENDPOINT_URL"] = client["endpoint"]
        started = time.perf_counter()
        facts, plan_io = planning._facts_and_reads(url, plans.merge_plan(None) if plan_name == "default" else
                                                   plans.merge_plan(json.loads(Path(plan_name).read_text())))
        seconds = time.perf_counter() - started
        proxy = cloud.close_client(client["id"])
    finally:
        cloud.stop()
    size = path.stat().st_size
    return {"file": str(path), "file_bytes": size, "kind": facts.kind, "role": facts.role,
            "reader_refusals": [list(r) for r in facts.reader_refusals],
            "plan_io": plan_io, "proxy": {"requests": proxy["requests"], "bytes": proxy["bytes_out"]},
            "share_of_file": plan_io["bytes"] / size, "seconds": round(seconds, 2),
            "latency_ms": proxy.get("latency_ms")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, help="an HDF5 file (default: write a ~1 GB ATL03-like sample)")
    parser.add_argument("--size-gb", type=float, default=1.0, help="size of the generated sample (default 1)")
    parser.add_argument("--plan", default="default", help="default, or a plan JSON file")
    args = parser.parse_args(argv)
    path = args.file
    if path is None:
        from layoutlab.samples.atl03 import write_atl03

        path = Path(tempfile.mkdtemp(prefix="plan-io-")) / "atl03-like.h5"
        write_atl03(path, photons=round(args.size_gb * 1e9 / BYTES_PER_PHOTON))
    print(json.dumps(measure(path, args.plan), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
