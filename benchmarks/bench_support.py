"""What the access benchmarks (bench_access.py, bench_nsidc_table.py, bench_grid_shards.py) share:
logging, niced data generation, cold cases on the local cloud, conversions timed straight into it,
and the summary of a row.

Every case runs through ``run_logged``: ``run_case_isolated`` (a fresh process pinned to one core
with the local-lambda memory limit) against the local cloud's S3 proxy with its latency model
(first-byte latency per request, bandwidth per request), one log line per case.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from multiprocessing import get_context

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


def add_run_options(parser, workdir: str, results: str, kept: str) -> None:
    """The options both issue-16 benchmarks take: repetitions, the emulated network, where data goes."""
    parser.add_argument("--repeat", type=int, default=3, help="cold repetitions per case (default 3)")
    parser.add_argument("--latency-ms", type=float, default=25.0, help="first-byte latency per request")
    parser.add_argument("--bandwidth-mbps", type=float, default=720.0, help="bandwidth per request")
    parser.add_argument("--workdir", type=Path, default=Path(workdir))
    parser.add_argument("--keep", action="store_true", help=f"keep the generated {kept} in --workdir")
    parser.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / results)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def niced(function, *args, **kwargs):
    """``function(*args, **kwargs)`` in a forked child at nice 19: generating data must not take
    the core from a measurement running elsewhere on the machine. Call it before any thread starts."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("fork"), initializer=os.nice,
                             initargs=(19,)) as pool:
        return pool.submit(function, *args, **kwargs).result()


def memory_available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def machine() -> dict:
    try:
        uname = subprocess.run(["uname", "-a"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        uname = " ".join(platform.uname())
    return {"uname": uname, "nproc": os.cpu_count(),
            "memory_available_gb": round((memory_available_bytes() or 0) / 1e9, 1)}


@contextlib.contextmanager
def straight_to_moto(cloud):
    """Writers in this process talk to moto itself (no emulated latency): conversions and uploads
    are not what is measured, and the proxy would count them."""
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")}
    os.environ["AWS_ENDPOINT_URL_S3"] = os.environ["AWS_ENDPOINT_URL"] = cloud.moto_endpoint
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def moto_client(cloud):
    import boto3

    return boto3.client("s3", endpoint_url=cloud.moto_endpoint, region_name=os.environ["AWS_DEFAULT_REGION"])


def ensure_bucket(s3, bucket: str) -> None:
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass


def prefix_bytes(s3, url: str) -> int:
    """Bytes stored under ``url`` (one object, or every object of a store's prefix)."""
    from layoutlab.storage import S3Location

    loc = S3Location.parse(url)
    total = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=loc.bucket, Prefix=loc.key):
        total += sum(o["Size"] for o in page.get("Contents", []))
    return total


def run_logged(case: dict, cloud, label: str) -> dict:
    """One case, cold in a fresh single-core process; logs its outcome under ``label``."""
    from layoutlab.bench.runner import run_case_isolated

    record = run_case_isolated(case, cloud)
    if record["status"] != "ok":
        log(f"ERROR {label}: {record.get('error')}")
    else:
        log(f"{label}: {record['wall_s']:.3f} s, {record['requests']} requests, "
            f"{(record['bytes_transferred'] or 0) / 1e6:.1f} MB, "
            f"values {'ok' if record['checksum_ok'] else record['checksum_ok']}")
    return record


def run_repetitions(rows: list[dict], repeat: int, cloud, net: dict, label: str) -> dict[str, list[dict]]:
    """Every row ``repeat`` times, repetitions as the outer loop (a row's runs are spread over the
    run, not back to back); each case cold in a fresh single-core process. Returns row key -> records."""
    out: dict[str, list[dict]] = {row["key"]: [] for row in rows}
    for repetition in range(repeat):
        for row in rows:
            case = {"target": row["target"], "pattern": row["pattern"], "reader": row["reader"],
                    "variant": row["variant"], "params": row.get("params") or {},
                    "reader_options": row.get("reader_options") or {}, "repetition": repetition,
                    "platform": "local-lambda", "dataset": label, **net}
            out[row["key"]].append(run_logged(case, cloud, f"{label} {row['key']:>34} rep {repetition}"))
    return out


def phase_requests(record: dict) -> str:
    phases = record.get("phases") or {}
    return ", ".join(f"{name} {p.get('requests')}" for name, p in phases.items() if p.get("requests") is not None)


def summarize(records: list[dict]) -> dict:
    """Median wall time and the counts of the median run (requests/bytes do not vary between cold runs)."""
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        return {"runs": len(records), "ok_runs": 0, "errors": sorted({str(r.get("error"))[:300] for r in records})}
    walls = sorted(r["wall_s"] for r in ok)
    median = statistics.median(walls)
    middle = min(ok, key=lambda r: abs(r["wall_s"] - median))
    return {
        "runs": len(records), "ok_runs": len(ok), "walls_s": walls, "median_wall_s": median,
        "cv": statistics.stdev(walls) / statistics.mean(walls) if len(walls) > 1 else None,
        "requests": middle.get("requests"), "requests_by_phase": phase_requests(middle),
        "proxy_requests": (middle.get("proxy_counts") or {}).get("requests"),
        "bytes_transferred": middle.get("bytes_transferred"), "bytes_needed": middle.get("bytes_needed"),
        "overread_ratio": middle.get("overread_ratio"), "cpu_s": middle.get("cpu_s"),
        "open_s": middle.get("open_s"), "select_s": middle.get("select_s"), "load_s": middle.get("load_s"),
        "values_ok": all(r.get("checksum_ok") is True for r in ok) and len(ok) == len(records),
        "reader_settings": middle.get("reader_settings"),
        "errors": sorted({str(r.get("error"))[:300] for r in records if r["status"] != "ok"}),
    }


def floors(summary: dict, latency_ms: float, bandwidth_mbps: float) -> str:
    """What the counts alone cost: every request's first-byte latency if sent one after another, and
    the bytes at the per-request bandwidth; beside the process's CPU time (one core)."""
    requests = summary.get("requests") or 0
    moved = summary.get("bytes_transferred") or 0
    transfer = moved * 8 / (bandwidth_mbps * 1e6) if bandwidth_mbps else 0.0
    return (f"open/select/load {summary.get('open_s') or 0:.2f}/{summary.get('select_s') or 0:.2f}/"
            f"{summary.get('load_s') or 0:.2f} s; {requests} requests ({summary.get('requests_by_phase')}): "
            f"{requests * latency_ms / 1000:.2f} s of latency if serial; {moved / 1e6:.1f} MB moved: "
            f"{transfer:.2f} s at {bandwidth_mbps:g} Mbit/s; CPU {summary.get('cpu_s') or 0:.2f} s")


def fresh_bytecode() -> None:
    """layoutlab's modules byte-compiled as they are now, before anything is timed. ``make`` compiles them
    once, but a module edited since has an older cache, and where PYTHONDONTWRITEBYTECODE is set (as in the
    sessions that write this code) every start compiles it again: ``layoutlab repack`` on TEMPO NO2 timed
    0.20-0.26 s with repack_hdf5.py compiled at each start, 0.15-0.19 s from its cache."""
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "functions" / "layoutlab"), quiet=1)


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__)), check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
