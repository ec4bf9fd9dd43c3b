"""RSS of the local cloud per benchmark case: one product studied ROUNDS times, the cloud's RSS after each.

    python benchmarks/bench_cloud_memory.py PRODUCT_FILE [--repetitions 1] [--rounds 3]

Each round uploads a copy of the file under a new name and runs the whole pipeline on it (LocalPipeline:
upload, deliver, wait) with a plan of the original only, the four HDF5 readers, every pattern, one
platform, ``--repetitions`` repetitions. The cloud keeps each round's upload (the file's size). Set
``LAYOUTLAB_CLOUD_TRACEMALLOC=DIR`` to have a tracemalloc snapshot written after each round.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

from layoutlab import settings
from layoutlab.local.cloud import start_local_cloud
from layoutlab.local.pipeline import LocalPipeline


def plan(repetitions: int) -> dict:
    return {"name": "memory", "variants": [{"kind": "original"}],
            "patterns": {"grid": ["timeseries-point", "map-timestep", "timeseries-region-mean", "map-time-mean"],
                         "granule": ["granule-open-list", "beam-read", "beam-subset"]},
            "readers": {"hdf5": ["h5py-s3fs-default", "h5py-s3fs-aligned", "xarray-h5netcdf", "h5coro"], "zarr": []},
            "platforms": ["local-lambda"], "repetitions": repetitions, "max_concurrency": 1}


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("product", type=Path)
    parser.add_argument("--repetitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cloud = start_local_cloud()
    try:
        pipeline = LocalPipeline(cloud)
        pipeline.setup()
        pipeline.put_plan("memory", plan(args.repetitions))
        print(f"load {os.getloadavg()[0]:.1f}; cloud RSS at start {rss_mib(cloud.pid):.1f} MiB", flush=True)
        with tempfile.TemporaryDirectory() as work:
            for round_number in range(args.rounds):
                copy = Path(work) / f"r{round_number}-{args.product.name}"
                shutil.copy(args.product, copy)
                started = time.monotonic()
                outcomes = pipeline.deliver(pipeline.upload(copy, plan="memory"))
                final = pipeline.wait([o for o in outcomes if o["status"] == "started"], timeout=3600)
                cases = sum(len(pipeline.store.items(dataset=o["dataset_id"], kind="RESULT"))
                            for o in outcomes if o.get("dataset_id"))
                print(f"round {round_number}: {final} {cases} cases in {time.monotonic() - started:.0f} s; "
                      f"cloud RSS {rss_mib(cloud.pid):.1f} MiB; load {os.getloadavg()[0]:.1f}", flush=True)
                if settings.value("LAYOUTLAB_CLOUD_TRACEMALLOC"):
                    os.kill(cloud.pid, signal.SIGUSR1)
    finally:
        cloud.stop()


if __name__ == "__main__":
    main()
