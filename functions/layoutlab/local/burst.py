"""A burst of uploads of several products on the local cloud: the load test of issue 35.

``run_burst`` writes ``per_product`` small GEOS-like granules for each product, uploads them under
``incoming/<product>/`` (any S3 client: boto3 here), delivers every upload's EventBridge event to ingest
at once from a pool of threads (as the rule would), and waits for every execution. What it returns is
what the test and ``benchmarks/bench_product_burst.py`` check and report: each execution's end, how many
started, each product's item, the wall time, the throughput and the local cloud server's peak memory.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident memory (VmHWM), MiB; None where /proc does not say."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run_burst(pipeline, work: Path, products: list[str], per_product: int, plan: dict, *, threads: int = 8,
              timeout: float = 3600, shape=(6, 19, 36)) -> dict:
    from layoutlab.products import state
    from layoutlab.samples import geos

    pipeline.put_plan(plan["name"], plan)
    sample = geos.write_geos(work / "granule.nc", shape=shape)  # one file: each upload is its own object
    keys = [f"incoming/{product}/g{i:05d}.nc" for i in range(per_product) for product in products]
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        events = list(pool.map(lambda key: pipeline.upload(sample, key=key, plan=plan["name"]), keys))
        outcomes = [o for found in pool.map(pipeline.deliver, events) for o in found]
    uploaded_s = time.perf_counter() - started
    final = pipeline.wait([o for o in outcomes if o["status"] == "started"], timeout=timeout)
    wall_s = time.perf_counter() - started
    executions = pipeline.executions()
    return {
        "granules": len(keys), "products": {p: state.get_product(pipeline.store, p) for p in products},
        "outcomes": outcomes, "final": final, "executions": len(executions),
        "upload_and_ingest_s": uploaded_s, "wall_s": wall_s, "granules_per_s": len(keys) / wall_s,
        "granule_bytes": sample.stat().st_size, "cloud_peak_rss_mb": peak_rss_mb(pipeline.cloud.pid),
    }
