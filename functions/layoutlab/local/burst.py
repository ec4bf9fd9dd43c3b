"""A burst of uploads of several products on the local cloud: the load test of issue 35.

``run_burst`` writes ``per_product`` small GEOS-like granules for each product and uploads them under
``incoming/<product>/`` at once from a pool of threads (any S3 client: boto3 here). Nothing is delivered by
hand: the uploads reach ingest through the deployed route (S3 → EventBridge rule → SQS → ingest in batches,
``LocalPipeline.setup(s3_events=True)``), where a product over its ``max_concurrent_executions`` waits in the
queue. ``run_burst`` waits until every upload has an ingest outcome and every execution has ended. What it
returns is what the test and ``benchmarks/bench_product_burst.py`` check and report: each upload's outcome
and each execution's end, how many executions exist, each product's item and the most executions it held at
once, what is left in the queues, the wall time, the throughput and the local cloud server's peak memory.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident memory (VmHWM), MiB; None where /proc does not say."""
    return rss_mb(pid, "VmHWM")


def rss_mb(pid: int, field: str = "VmRSS") -> float | None:
    """The process's resident memory now (``VmRSS``) or another field of /proc/PID/status in kB, MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def peak_executions(store, product: str) -> int:
    """The most executions ``product`` held slots for at once (its EXECUTION items' intervals)."""
    from layoutlab.products import concurrency

    return concurrency.peak_concurrency([(float(e["acquired"]), float(e["released"]) if "released" in e else None)
                                         for e in concurrency.executions(store, product)])


def run_burst(pipeline, work: Path, products: list[str], per_product: int, plan: dict, *, threads: int = 8,
              timeout: float = 3600, shape=(6, 19, 36)) -> dict:
    from layoutlab.products import state
    from layoutlab.samples import geos

    pipeline.put_plan(plan["name"], plan)
    sample = geos.write_geos(work / "granule.nc", shape=shape)  # one file: each upload is its own object
    keys = [f"incoming/{product}/g{i:05d}.nc" for i in range(per_product) for product in products]
    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(threads) as pool:
        events = list(pool.map(lambda key: pipeline.upload(sample, key=key, plan=plan["name"]), keys))
    uploaded_s = time.perf_counter() - started
    # every upload's ingest outcome, however long its product's bound keeps it in the queue
    outcomes = [pipeline.ingested(event, timeout=max(1.0, deadline - time.monotonic())) for event in events]
    ingested_s = time.perf_counter() - started
    final = pipeline.wait([o for o in outcomes if o["status"] == "started"],
                          timeout=max(1.0, deadline - time.monotonic()))
    wall_s = time.perf_counter() - started
    executions = pipeline.executions()
    return {
        "granules": len(keys), "products": {p: state.get_product(pipeline.store, p) for p in products},
        "outcomes": outcomes, "final": final, "executions": len(executions),
        "execution_names": [e["name"] for e in executions],
        "peak_executions": {p: peak_executions(pipeline.store, p) for p in products},
        "queues_after": pipeline.queued(),
        "upload_s": uploaded_s, "upload_and_ingest_s": ingested_s, "wall_s": wall_s,
        "granules_per_s": len(keys) / wall_s, "granule_bytes": sample.stat().st_size,
        "cloud_peak_rss_mb": peak_rss_mb(pipeline.cloud.pid),
    }
