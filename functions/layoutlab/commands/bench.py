"""``layoutlab bench``: cold single-core access benchmarks on the (local) cloud."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from layoutlab.errors import UserError

EPILOG = """\
examples:
  layoutlab bench sample.nc --pattern timeseries-point --reader h5py-s3fs-default
  layoutlab bench sample.nc --pattern map-timestep --reader h5py-s3fs-aligned --repeat 5 --json
  layoutlab bench store.zarr --pattern map-timestep --reader zarr-obstore --latency-ms 30
  layoutlab bench atl03.h5 --pattern beam-subset --reader h5py-s3fs-aligned --param lat_min=-59.9
  layoutlab bench s3://bucket/key.h5 --pattern granule-open-list --reader h5py-s3fs-default
  layoutlab bench --matrix plan.json --output results.jsonl

A local TARGET (file or Zarr directory) is uploaded to the local cloud first. The
local cloud of 'layoutlab local up' is used when it runs; otherwise one is started
for this command and stopped after it. Each repetition runs in a fresh process
pinned to one core with the platform's memory limit.

PLAN.json: {"cases": [{"target": ..., "pattern": ..., "reader": ..., "params": {...},
"repeat": 3, "platform": "local-lambda", "latency_ms": 25, ...}, ...]} (or a bare list).

patterns: timeseries-point, map-timestep, timeseries-region-mean, map-time-mean,
  granule-open-list, beam-read, beam-subset, full-read-throughput, slab-read
readers: h5py-s3fs-default, h5py-s3fs-aligned, h5py-ros3, xarray-h5netcdf, h5coro
  (HDF5 / NetCDF-4); zarr-obstore, zarr-obstore-nocoalesce, zarr-fsspec, xarray-zarr (Zarr);
  kerchunk-fsspec (kerchunk references); icechunk, xarray-icechunk (Icechunk repositories).
  Each is described in docs/bench-and-readers.md.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench", help="measure an access pattern with a reader, cold and single-core",
        description="Run access-pattern benchmarks against a file or store in the local cloud (or s3://). "
                    "Each result record (see functions/layoutlab/results/schema.json) has timings split "
                    "open/select/load, CPU, peak RSS, requests and bytes, and whether the values match the source.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", nargs="?", help="local file/Zarr directory or s3:// URL (e.g. sample.nc)")
    parser.add_argument("--pattern", "-p", help="access pattern (e.g. map-timestep)")
    parser.add_argument("--reader", "-r", help="reader (e.g. h5py-s3fs-aligned)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="pattern parameter, repeatable (e.g. --param lat=40.0 --param lon=-83.0)")
    parser.add_argument("--reader-option", action="append", default=[], metavar="KEY=VALUE",
                        help="reader option, repeatable (e.g. --reader-option page_size=4194304)")
    parser.add_argument("--latency-ms", type=float, default=None,
                        help="emulated first-byte latency per request (default: the local cloud's, 25)")
    parser.add_argument("--bandwidth-mbps", type=float, default=None,
                        help="emulated per-request bandwidth in Mbit/s, 0 = uncapped (default: the local cloud's, 720)")
    parser.add_argument("--repeat", type=int, default=1, help="repetitions, each in a fresh process (e.g. 5)")
    parser.add_argument("--platform", default="local-lambda",
                        help="local-lambda (1769 MB) | local-fargate (2048 MB) | lambda-<MB> | fargate-<vcpu>-<MB>")
    parser.add_argument("--dataset", help="dataset name to record (default: the target's file name)")
    parser.add_argument("--variant", help="variant name to record (e.g. paged-8MiB; default original)")
    parser.add_argument("--matrix", type=Path, metavar="PLAN.json", help="run every case of a plan sequentially")
    parser.add_argument("--output", "-o", type=Path, help="append JSON lines here (--matrix; default stdout)")
    parser.add_argument("--json", action="store_true", help="print the records as a JSON list")
    parser.set_defaults(func=run)


def _parse_kv(items: list[str], what: str) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{what} {item!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _load_plan(path: Path) -> list[dict]:
    try:
        plan = json.loads(path.read_text())
    except OSError as error:
        raise UserError(f"{path}: cannot read ({error.strerror})") from error
    except ValueError as error:
        raise UserError(f"{path}: not JSON ({error})") from error
    cases = plan.get("cases") if isinstance(plan, dict) else plan
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise UserError(f"{path}: expected a list of cases or {{\"cases\": [...]}}")
    expanded = []
    for case in cases:
        case = dict(case)
        repeat = int(case.pop("repeat", 1))
        for rep in range(repeat):
            expanded.append({**case, "repetition": rep})
    return expanded


def _resolve_targets(cases: list[dict], cloud) -> None:
    from layoutlab import storage
    from layoutlab.bench.runner import upload_target

    uploaded: dict[str, str] = {}
    for case in cases:
        target = str(case.get("target", ""))
        if not target:
            raise UserError("a case has no target")
        if storage.is_s3_url(target):
            continue
        if target not in uploaded:
            if not Path(target).exists():
                uploaded[target] = None
            else:
                uploaded[target] = upload_target(target, cloud)
        case.setdefault("dataset", Path(target).name)
        # a missing local file stays as it is: run_case gives it an error record naming it
        case["target"] = uploaded[target] or target


def run(args) -> int:
    from layoutlab.bench.runner import run_cases
    from layoutlab.local.cloud import LocalCloud, start_local_cloud, use_local_credentials

    if args.matrix:
        if args.target:
            raise UserError("give either TARGET or --matrix PLAN.json, not both")
        cases = _load_plan(args.matrix)
    else:
        if not (args.target and args.pattern and args.reader):
            raise UserError("TARGET, --pattern and --reader are required (or --matrix PLAN.json)")
        if args.repeat < 1:
            raise UserError("--repeat must be >= 1")
        base = {"target": args.target, "pattern": args.pattern, "reader": args.reader,
                "params": _parse_kv(args.param, "--param"),
                "reader_options": _parse_kv(args.reader_option, "--reader-option"),
                "platform": args.platform}
        for key in ("latency_ms", "bandwidth_mbps", "dataset", "variant"):
            if getattr(args, key) is not None:
                base[key] = getattr(args, key)
        cases = [{**base, "repetition": rep} for rep in range(args.repeat)]

    use_local_credentials()
    cloud = LocalCloud.from_state()
    started = None
    if cloud is None:
        started = cloud = start_local_cloud()
    out = open(args.output, "a") if args.output else None
    try:
        _resolve_targets(cases, cloud)

        def emit(record):
            if args.matrix:
                print(json.dumps(record), file=out or sys.stdout, flush=True)

        records = run_cases(cases, cloud=cloud, progress=sys.stderr.isatty() or bool(args.matrix), on_record=emit)
    finally:
        if out:
            out.close()
        if started:
            started.stop()
    if args.matrix:
        pass
    elif args.json:
        print(json.dumps(records, indent=2))
    else:
        _print_table(records)
    return 0 if all(r["status"] == "ok" for r in records) else 1


def _print_table(records: list[dict]) -> None:
    print(f"{'rep':>3} {'status':6} {'wall_s':>8} {'open':>7} {'select':>7} {'load':>7} {'req':>5} "
          f"{'MB moved':>9} {'overread':>8} {'RSS MB':>7} {'check':>5}")
    for r in records:
        if r["status"] != "ok":
            print(f"{r['repetition']:>3} error  {r['error']}")
            continue
        moved = r["bytes_transferred"]
        print(f"{r['repetition']:>3} {'ok':6} {r['wall_s']:8.3f} {r['open_s']:7.3f} {r['select_s']:7.3f} "
              f"{r['load_s']:7.3f} {r['requests'] if r['requests'] is not None else '-':>5} "
              f"{moved / 1e6 if moved is not None else float('nan'):9.2f} "
              f"{r['overread_ratio'] if r['overread_ratio'] is not None else float('nan'):8.2f} "
              f"{r['peak_rss_mb']:7.0f} {str(r['checksum_ok']):>5}")
    ok = [r for r in records if r["status"] == "ok"]
    if ok:
        r = ok[0]
        print(f"{r['pattern']} / {r['reader']} on {r['target']} ({r['platform']}, latency {r['latency_ms']} ms, "
              f"bandwidth {r['bandwidth_mbps']} Mbit/s)")
