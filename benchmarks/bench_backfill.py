"""Backfill of an archive on the local cloud (issue 35): N listed objects converted with a decided product's
layout by the backfill state machine (one Distributed Map over the item pages), in batches; wall time,
throughput, and the local cloud server's memory as the backfill goes (is it bounded, or does it grow with N?).

Starts its own local cloud (0 ms latency, no bandwidth cap; objects over ``--on-disk-over`` bytes kept in
temporary files, so the cloud's memory does not hold the converted archive), writes one tiny GEOS-like
granule and puts it N times under ``s3://layoutlab-local-archive/bench/`` from a pool of threads, decides
the product by hand (``--variant``, as ``layoutlab product decide`` does), then runs what
``layoutlab backfill s3://layoutlab-local-archive/bench/ --product BENCH --batch B`` runs, sampling the cloud's
resident memory every few seconds.

    .venv/bin/python benchmarks/bench_backfill.py                       # 10,000 objects, batches of 10
    .venv/bin/python benchmarks/bench_backfill.py --objects 200 --json /tmp/backfill.json

Writes a JSON report (default benchmarks/results/bench_backfill.json); exits 1 when the backfill did not
succeed or any object was not converted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from layoutlab.local import backfill  # noqa: E402
from layoutlab.local.burst import peak_rss_mb, rss_mb  # noqa: E402
from layoutlab.local.cloud import start_local_cloud  # noqa: E402
from layoutlab.local.pipeline import LocalPipeline  # noqa: E402
from layoutlab.products import flow, state  # noqa: E402
from layoutlab.results.record import host_info  # noqa: E402
from layoutlab.samples import geos  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ARCHIVE, PREFIX, PRODUCT = "layoutlab-local-archive", "bench/", "BENCH"
PLAN = {
    "name": "backfill",
    "variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "64KiB"}],
    "patterns": {"grid": ["map-timestep"], "granule": []},
    "readers": {"hdf5": ["h5py-s3fs-aligned"]},
    "platforms": ["local-lambda"],
    "repetitions": 1,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=10_000, help="objects under the prefix (default 10000)")
    parser.add_argument("--batch", type=int, default=10, help="granules per child execution (default 10)")
    parser.add_argument("--page-items", type=int, default=1000, help="items per page of the item list (default 1000)")
    parser.add_argument("--variant", default="paged-64KiB", help="the product's decided variant (default paged-64KiB)")
    parser.add_argument("--threads", type=int, default=8, help="uploads at once (default 8)")
    parser.add_argument("--on-disk-over", type=int, default=64 * 1024,
                        help="objects over this many bytes live in temporary files, not the cloud's memory")
    parser.add_argument("--timeout", type=float, default=6 * 3600, help="seconds to wait for the backfill")
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds between memory samples")
    parser.add_argument("--json", type=Path, default=RESULTS / "bench_backfill.json", help="the report")
    args = parser.parse_args(argv)
    if args.objects < 1 or args.batch < 1:
        parser.error("--objects and --batch must be at least 1")
    with tempfile.TemporaryDirectory(prefix="layoutlab-backfill-") as work:
        work = Path(work)
        load_before = os.getloadavg()[0]
        cloud = start_local_cloud(work / "cloud.json", latency_ms=0, bandwidth_mbps=0, log_path=work / "cloud.log",
                                  objects_on_disk_over=args.on_disk_over)
        samples: list[tuple[float, int, float]] = []  # (seconds since the backfill started, granules done, RSS MiB)
        try:
            pipeline = LocalPipeline(cloud)
            pipeline.setup()
            pipeline.s3.create_bucket(Bucket=ARCHIVE)
            sample = geos.write_geos(work / "granule.nc", shape=(4, 5, 6))
            body = sample.read_bytes()
            started = time.perf_counter()
            with ThreadPoolExecutor(args.threads) as pool:
                list(pool.map(lambda i: pipeline.s3.put_object(Bucket=ARCHIVE, Key=f"{PREFIX}g{i:06d}.nc", Body=body),
                              range(args.objects)))
            upload_s = time.perf_counter() - started
            print(f"{args.objects} objects of {len(body)} bytes put in {upload_s:.1f} s", flush=True)
            store = pipeline.store
            state.ensure_product(store, PRODUCT, signature=None, named_by="uploader",
                                 settings=state.ProductSettings(), plan=PLAN)
            flow.decide_by_person(store, PRODUCT, args.variant, by="bench_backfill", reason="backfill benchmark")
            rss_before = rss_mb(cloud.pid)

            started = time.perf_counter()
            begun = backfill.start_backfill(pipeline.s3, pipeline.sfn, ARCHIVE, PREFIX, PRODUCT,
                                            page_items=args.page_items, batch=args.batch)
            planned_s = time.perf_counter() - started
            print(f"item list: {begun['items']} objects in {begun['pages']} pages, {begun['batches']} batches "
                  f"({planned_s:.1f} s); backfill started", flush=True)
            stop = threading.Event()

            def sample_memory():
                while not stop.wait(args.sample_every):
                    done = int(state.get_product(store, PRODUCT)["production_granules"])
                    samples.append((round(time.perf_counter() - started, 1), done, rss_mb(cloud.pid)))
                    print(f"  {samples[-1][0]:8.0f} s  {done:6d} granules  cloud RSS {samples[-1][2]:.0f} MiB",
                          flush=True)

            sampler = threading.Thread(target=sample_memory, daemon=True)
            sampler.start()
            described = backfill.wait(pipeline.sfn, begun["execution_arn"], timeout=args.timeout)
            wall_s = time.perf_counter() - started
            stop.set()
            sampler.join()
            product = state.get_product(store, PRODUCT)
            statuses: dict[str, int] = {}
            for granule in state.granules(store, PRODUCT):
                statuses[granule["status"]] = statuses.get(granule["status"], 0) + 1
            cloud_peak = peak_rss_mb(cloud.pid)
            rss_after = rss_mb(cloud.pid)
        finally:
            cloud.stop()
    converted = statuses.get("CONVERTED", 0)
    ok = described["status"] == "SUCCEEDED" and converted == args.objects
    # memory against progress: the RSS at a tenth of the granules and at the end (growth per 1,000 granules)
    tenth = next((s for s in samples if s[1] >= args.objects / 10), None)
    last = samples[-1] if samples else None
    growth = None
    if tenth and last and last[1] > tenth[1]:
        growth = round((last[2] - tenth[2]) / (last[1] - tenth[1]) * 1000, 1)
    out = {
        "benchmark": "bench_backfill",
        "command": "benchmarks/bench_backfill.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": host_info(),
        "loadavg_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "objects": args.objects, "object_bytes": len(body), "batch": args.batch, "pages": begun["pages"],
        "batches": begun["batches"], "variant": args.variant, "status": described["status"],
        "granules_by_status": statuses, "production_granules": int(product["production_granules"]),
        "bytes_in": int(product["bytes_in"]), "bytes_out": int(product["bytes_out"]),
        "upload_s": round(upload_s, 1), "item_list_s": round(planned_s, 1), "wall_s": round(wall_s, 1),
        "granules_per_s": round(args.objects / wall_s, 3),
        "cloud_rss_mb_before": rss_before, "cloud_rss_mb_after": rss_after, "cloud_peak_rss_mb": cloud_peak,
        "cloud_rss_growth_mb_per_1000_granules": growth, "memory_samples": samples, "ok": ok,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2, default=str))
    print(json.dumps({k: v for k, v in out.items() if k != "memory_samples"}, indent=2, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
