"""Ranged GETs from a big object: stock moto 5.2.5 vs layoutlab's patched moto, side by side.

Both local clouds run at once (each its own process, pinned to the server
core(s)), hold the same object, and answer the same random 4 KiB ranges; the
client is boto3 with a kept-alive connection. Reads go to moto directly and
through the S3 proxy at 0 ms / no bandwidth cap (what benchmarks use).
Target (issue 4): a 4 KB ranged GET from a 1 GB object takes <= 10 ms with no
emulated latency.

    .venv/bin/python benchmarks/bench_ranged_get.py                 # 1 GiB object, 30 reads each
    .venv/bin/python benchmarks/bench_ranged_get.py --size-mib 300 --reads 10 --json out.json

Prints a table and writes JSON (default benchmarks/results/bench_ranged_get.json).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402

from layoutlab.local.cloud import start_local_cloud  # noqa: E402
from layoutlab.results.record import host_info, library_versions  # noqa: E402

BUCKET = "ranged-get-bench"
KEY = "big.bin"
SMALL_KEY = "small.bin"
READ = 4096


def _client(endpoint):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        config=Config(retries={"max_attempts": 1}, read_timeout=600))


def _upload(cloud, size, chunk=64 * 2**20):
    s3 = _client(cloud.moto_endpoint)
    s3.create_bucket(Bucket=BUCKET)
    # deterministic content without holding a second copy: repeat a random 64 MiB block,
    # tagged per block so ranges from different blocks differ
    rng = random.Random(0)
    block = bytearray(rng.randbytes(chunk))
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=KEY)
    parts = []
    for number, offset in enumerate(range(0, size, chunk), start=1):
        block[:8] = offset.to_bytes(8, "little")
        body = bytes(block[: min(chunk, size - offset)])
        etag = s3.upload_part(Bucket=BUCKET, Key=KEY, PartNumber=number, UploadId=upload["UploadId"],
                              Body=body)["ETag"]
        parts.append({"PartNumber": number, "ETag": etag})
    s3.complete_multipart_upload(Bucket=BUCKET, Key=KEY, UploadId=upload["UploadId"],
                                 MultipartUpload={"Parts": parts})
    # the per-request cost of moto's HTTP server itself: the same range from a tiny object
    s3.put_object(Bucket=BUCKET, Key=SMALL_KEY, Body=bytes(block[: 2 * READ]))
    return s3.head_object(Bucket=BUCKET, Key=KEY)["ContentLength"]


def _time_reads(endpoint, offsets, key=KEY):
    s3 = _client(endpoint)
    s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=0-0")["Body"].read()  # connect outside timing
    times, data = [], []
    for offset in offsets:
        t = time.perf_counter()
        body = s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={offset}-{offset + READ - 1}")["Body"].read()
        times.append(time.perf_counter() - t)
        data.append(body)
    return times, data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024, help="object size in MiB (default 1024)")
    parser.add_argument("--reads", type=int, default=30, help="ranged GETs per server (default 30)")
    parser.add_argument("--stock-reads", type=int, default=10, help="ranged GETs against stock moto (slow; default 10)")
    parser.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "bench_ranged_get.json")
    args = parser.parse_args(argv)
    size = args.size_mib * 2**20
    rng = random.Random(42)
    offsets = [rng.randrange(0, size - READ) for _ in range(args.reads)]

    clouds = {}
    try:
        clouds["stock"] = start_local_cloud(latency_ms=0, bandwidth_mbps=0, stock_moto=True)
        clouds["patched"] = start_local_cloud(latency_ms=0, bandwidth_mbps=0)
        for name, cloud in clouds.items():
            t = time.perf_counter()
            _upload(cloud, size)
            print(f"uploaded {args.size_mib} MiB to {name} moto in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        rows = []
        results = {}
        for name, cloud in clouds.items():
            n = args.stock_reads if name == "stock" else args.reads
            for via, endpoint in (("moto", cloud.moto_endpoint), ("proxy 0 ms", cloud.s3_endpoint)):
                times, data = _time_reads(endpoint, offsets[:n])
                results[(name, via)] = data
                rows.append({"server": name, "via": via, "reads": n, "median_ms": statistics.median(times) * 1e3,
                             "p90_ms": sorted(times)[int(0.9 * (n - 1))] * 1e3, "max_ms": max(times) * 1e3})
        for name, cloud in clouds.items():
            times, _ = _time_reads(cloud.moto_endpoint, [READ // 2] * args.reads, key=SMALL_KEY)
            rows.append({"server": name, "via": "moto, 8 KiB object (baseline)", "reads": args.reads,
                         "median_ms": statistics.median(times) * 1e3,
                         "p90_ms": sorted(times)[int(0.9 * (args.reads - 1))] * 1e3, "max_ms": max(times) * 1e3})
        same = all(a == b for a, b in zip(results[("stock", "moto")], results[("patched", "moto")]))
    finally:
        for cloud in clouds.values():
            cloud.stop()

    stock = next(r for r in rows if r["server"] == "stock" and r["via"] == "moto")["median_ms"]
    print(f"\n4 KiB ranged GETs from a {args.size_mib} MiB object (load {os.getloadavg()[0]:.2f})")
    print(f"{'server':8} {'via':31} {'reads':>5} {'median ms':>10} {'p90 ms':>8} {'max ms':>8} {'speed-up':>9}")
    for r in rows:
        print(f"{r['server']:8} {r['via']:31} {r['reads']:>5} {r['median_ms']:10.2f} {r['p90_ms']:8.2f} "
              f"{r['max_ms']:8.2f} {stock / r['median_ms']:8.1f}x")
    patched = next(r for r in rows if r["server"] == "patched" and r["via"] == "moto")
    verdict = patched["median_ms"] <= 10
    print(f"same bytes from both servers: {same}; patched median <= 10 ms: {verdict} "
          f"(moto's own per-request cost, 8 KiB object: "
          f"{next(r for r in rows if r['server'] == 'patched' and 'baseline' in r['via'])['median_ms']:.2f} ms)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "benchmark": "bench_ranged_get", "command": " ".join([Path(sys.argv[0]).name] + (argv or sys.argv[1:])),
        "size_bytes": size, "read_bytes": READ, "rows": rows, "same_bytes": same, "target_ms": 10,
        "target_met": verdict, "host": host_info(), "versions": library_versions(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }, indent=2))
    print(f"wrote {args.json}")
    return 0 if verdict and same else 1


if __name__ == "__main__":
    sys.exit(main())
