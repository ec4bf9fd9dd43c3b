"""Grid layouts of 2026 and zarr's shard coalescing (issue 16, "Measured" bullet 2).

A GEOS-like NetCDF-4 grid (``layoutlab.samples.geos``, ``--shape`` time,lat,lon) converted into:

  zarr-<chunks>             native Zarr v3 (layoutlab rechunk), Nguyen's balanced chunks (~4 MiB), no shards
  zarr-sharded-<inner>      Zarr v3 with shards the size of those chunks, each split into inner chunks
                            (``--shard-split``, repeatable; default 8,2,2 and 32,2,2: a point's time series
                            needs 8 or 32 inner chunks of each shard, a quarter of them); read by
                            zarr-obstore with zarr's shard coalescing on (its defaults: 1 MiB gap, 16 MiB
                            cap) and off (zarr-obstore-nocoalesce: one GET per inner chunk). (A split along
                            time only would make a point need every inner chunk: zarr then reads the whole
                            shard in one GET either way.)
  icechunk-<chunks>         native Icechunk, the balanced chunks, no shards
  kerchunk-original         kerchunk references over the NetCDF-4 itself (no chunk copied)

read with the four grid patterns (timeseries-point, map-timestep, timeseries-region-mean,
map-time-mean), each case cold (a fresh process) on one core, ``--repeat`` times, through the local
cloud's S3 proxy with its emulated in-region latency (as bench_access.py). Every value read is checked
against the generator. Goal: sharded point and time-series reads with coalescing >= 4x faster than
without; where not, the requests and bytes of both say why. Conversion seconds and bytes of every
variant are recorded. Results go to ``--json`` (default benchmarks/results/grid_shards.json).

    .venv/bin/python benchmarks/bench_grid_shards.py                        # 2160,181,288 (90 days hourly, 1 deg)
    .venv/bin/python benchmarks/bench_grid_shards.py --shape 48,19,36 --repeat 1 --json /tmp/smoke.json

The grid is generated at nice 19; conversions run at the script's priority and are timed. Generated
files go to ``--workdir`` and are deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_support import (  # noqa: E402
    add_run_options,
    ensure_bucket,
    floors,
    git_commit,
    log,
    machine,
    moto_client,
    niced,
    prefix_bytes,
    run_repetitions,
    straight_to_moto,
    summarize,
)

PATTERNS = ("timeseries-point", "map-timestep", "timeseries-region-mean", "map-time-mean")
# the reads the coalescing goal is about: one point's, or one small box's, whole time series
COALESCING_GOAL_PATTERNS = ("timeseries-point", "timeseries-region-mean")
COALESCING_GOAL = 4.0
DIMS = ("time", "lat", "lon")


def parse_triple(text: str, what: str) -> tuple[int, int, int]:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"{what}: expected three positive integers (time,lat,lon), got {text!r}")
    return tuple(int(p) for p in parts)


def layouts(shape, splits) -> dict:
    """Native chunks (Nguyen's balanced preset, as the default plan) and, per split, the sharded layout
    whose shards are (about) those chunks, each split ``split`` ways into inner chunks."""
    from layoutlab.pipeline.plan import chunk_preset

    native = chunk_preset("balanced", shape)
    sharded = []
    for split in splits:
        # a shard must hold whole inner chunks and not outgrow the array (zarr checks both)
        inner = tuple(max(1, c // s) for c, s in zip(native, split))
        shards = tuple(min(i * s, n) // i * i for i, s, n in zip(inner, split, shape))
        if any(s["inner"] == inner for s in sharded):
            continue
        sharded.append({"split": split, "inner": inner, "shards": shards,
                        "name": f"zarr-sharded-{'x'.join(map(str, inner))}"})
    return {"native": native, "sharded": sharded}


def generate_grid(path: str, shape) -> dict:
    from layoutlab.samples.geos import write_geos

    started = time.perf_counter()
    write_geos(path, shape=shape)
    return {"seconds": time.perf_counter() - started, "bytes": os.path.getsize(path)}


def convert(nc: Path, url_nc: str, bucket: str, cloud, s3, plan: dict) -> tuple[dict, dict, dict]:
    """Every variant, timed, written straight to the local cloud; returns (urls, conversions, names)."""
    from layoutlab.convert import virtual
    from layoutlab.convert.icechunk_store import write_icechunk_native
    from layoutlab.convert.rechunk_zarr import rechunk

    label = "x".join(map(str, plan["native"]))
    native = dict(zip(DIMS, plan["native"]))
    names = {"native": f"zarr-{label}", "icechunk": f"icechunk-{label}", "kerchunk": "kerchunk-original"}
    urls = {names["native"]: f"s3://{bucket}/variants/{names['native']}.zarr",
            names["icechunk"]: f"s3://{bucket}/variants/{names['icechunk']}.icechunk",
            names["kerchunk"]: f"s3://{bucket}/variants/{nc.stem}.json"}
    jobs = {names["native"]: ("layoutlab rechunk (Zarr v3, blosc-zstd:3)", f"chunks {native}",
                              lambda: rechunk(str(nc), urls[names["native"]], progress=False, chunks=native,
                                              overwrite=True))}
    for sharded in plan["sharded"]:
        name, inner, shards = sharded["name"], dict(zip(DIMS, sharded["inner"])), dict(zip(DIMS, sharded["shards"]))
        urls[name] = f"s3://{bucket}/variants/{name}.zarr"
        jobs[name] = ("layoutlab rechunk (Zarr v3 sharding codec, blosc-zstd:3)",
                      f"inner chunks {inner}, shards {shards}",
                      lambda name=name, inner=inner, shards=shards: rechunk(str(nc), urls[name], progress=False,
                                                                            chunks=inner, shards=shards,
                                                                            overwrite=True))
    jobs[names["icechunk"]] = ("layoutlab icechunk_store.write_icechunk_native", f"chunks {native}",
                               lambda: write_icechunk_native(str(nc), urls[names["icechunk"]], native, None))
    jobs[names["kerchunk"]] = ("VirtualiZarr HDF parser -> kerchunk JSON (Zarr v3 keys)", "the NetCDF-4's own chunks",
                               lambda: virtual.write_kerchunk(virtual.build_layout(str(nc), url_nc),
                                                              urls[names["kerchunk"]], s3))
    conversions = {}
    with straight_to_moto(cloud):
        for name, (how, layout, job) in jobs.items():
            log(f"converting {name}: {layout}")
            started = time.perf_counter()
            job()
            seconds = time.perf_counter() - started
            conversions[name] = {"seconds": seconds, "bytes": prefix_bytes(s3, urls[name]), "how": how,
                                 "layout": layout}
            if name == names["kerchunk"]:
                conversions[name]["note"] = "references only; the chunks are the NetCDF-4's own bytes"
    return urls, conversions, names


def coalescing_entry(on: dict, off: dict, goal: bool, latency_ms: float) -> dict:
    """Coalescing on vs off for one sharded store and pattern, and what the counts say about it."""
    if not (on.get("ok_runs") and off.get("ok_runs")):
        return {"speedup": None, "reason": "a case failed", "goal": goal}
    speedup = off["median_wall_s"] / on["median_wall_s"]
    fixed = (on["open_s"] or 0) + (on["select_s"] or 0)  # opening the store, reading lat/lon: not shard reads
    entry = {"speedup": speedup, "on_s": on["median_wall_s"], "off_s": off["median_wall_s"],
             "load_speedup": (off["load_s"] / on["load_s"]) if on.get("load_s") else None,
             "on_load_s": on["load_s"], "off_load_s": off["load_s"], "on_fixed_s": fixed,
             "bound_if_load_free": off["median_wall_s"] / fixed if fixed else None,
             "requests_on": on["requests"], "requests_off": off["requests"],
             "bytes_on": on["bytes_transferred"], "bytes_off": off["bytes_transferred"], "goal": goal}
    if goal:
        entry["met"] = speedup >= COALESCING_GOAL
    concurrency = (on.get("reader_settings") or {}).get("concurrency") or 1
    saved = (off["requests"] or 0) - (on["requests"] or 0)
    entry["reason"] = (
        f"coalescing sent {on['requests']} requests instead of {off['requests']} (by phase: "
        f"{on['requests_by_phase']} vs {off['requests_by_phase']}) and moved {on['bytes_transferred'] / 1e6:.2f} MB "
        f"instead of {off['bytes_transferred'] / 1e6:.2f} MB; zarr keeps up to {concurrency} requests in flight, "
        f"so the {saved} saved requests are worth ~{saved * latency_ms / 1000 / concurrency:.2f} s of "
        f"{latency_ms:g} ms first bytes; load phase {off['load_s']:.3f} s -> {on['load_s']:.3f} s; opening the "
        f"store and reading lat/lon take {fixed:.3f} s of the {on['median_wall_s']:.3f} s either way, so even a "
        f"free load would make it at most {entry['bound_if_load_free'] or 0:.1f}x faster")
    return entry


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="2160,181,288", help="time,lat,lon (default 90 days hourly, 1 deg)")
    parser.add_argument("--shard-split", action="append",
                        help="inner chunks per shard along time,lat,lon (shard = the native chunk); repeatable "
                             "(default: 8,2,2 and 32,2,2)")
    add_run_options(parser, "/tmp/bench-grid-shards", "grid_shards.json", "NetCDF-4")
    args = parser.parse_args(argv)
    from layoutlab.samples.geos import parse_shape

    try:
        shape = parse_shape(args.shape)
    except ValueError as error:
        parser.error(f"--shape: {error}")
    try:
        splits = [parse_triple(text, "--shard-split") for text in (args.shard_split or ["8,2,2", "32,2,2"])]
    except ValueError as error:
        parser.error(str(error))
    if shape[1] < 2 or shape[2] < 2:
        parser.error(f"--shape {args.shape}: lat and lon need at least 2 points each")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    args.workdir.mkdir(parents=True, exist_ok=True)
    plan = layouts(shape, splits)

    from layoutlab.bench.runner import BENCH_BUCKET, upload_target
    from layoutlab.local.cloud import start_local_cloud
    from layoutlab.results.record import library_versions

    started, load_before = time.time(), os.getloadavg()
    nc = args.workdir / f"geos-{'x'.join(map(str, shape))}.nc"
    generated = None
    if not nc.exists():
        log(f"writing GEOS-like NetCDF-4 {shape} (nice 19)")
        generated = niced(generate_grid, str(nc), shape)
    nc_bytes = nc.stat().st_size
    net = {"latency_ms": args.latency_ms, "bandwidth_mbps": args.bandwidth_mbps}
    cloud = start_local_cloud(latency_ms=args.latency_ms, bandwidth_mbps=args.bandwidth_mbps)
    try:
        s3 = moto_client(cloud)
        ensure_bucket(s3, BENCH_BUCKET)
        url_nc = upload_target(nc, cloud)
        urls, conversions, names = convert(nc, url_nc, BENCH_BUCKET, cloud, s3, plan)
        readers = [(names["native"], "zarr-obstore")]
        for sharded in plan["sharded"]:
            readers += [(sharded["name"], "zarr-obstore"), (sharded["name"], "zarr-obstore-nocoalesce")]
        readers += [(names["icechunk"], "icechunk"), (names["kerchunk"], "kerchunk-fsspec")]
        rows = [{"key": f"{variant}|{reader}|{pattern}", "variant": variant, "reader": reader, "pattern": pattern,
                 "target": urls[variant]} for pattern in PATTERNS for variant, reader in readers]
        log(f"{len(rows)} cases x {args.repeat} cold repetitions")
        records = run_repetitions(rows, args.repeat, cloud, net, "geos")
    finally:
        cloud.stop()
    summaries = {row["key"]: {"variant": row["variant"], "reader": row["reader"], "pattern": row["pattern"],
                              **summarize(records[row["key"]])} for row in rows}
    for summary in summaries.values():
        summary["why"] = floors(summary, args.latency_ms, args.bandwidth_mbps) if summary.get("ok_runs") else None

    # coalescing: the same sharded store and pattern, coalescing on vs off
    coalescing = {}
    for sharded in plan["sharded"]:
        name = sharded["name"]
        coalescing[name] = {pattern: coalescing_entry(summaries[f"{name}|zarr-obstore|{pattern}"],
                                                      summaries[f"{name}|zarr-obstore-nocoalesce|{pattern}"],
                                                      pattern in COALESCING_GOAL_PATTERNS, args.latency_ms)
                            for pattern in PATTERNS}
    goal_entries = [entry for by_pattern in coalescing.values() for entry in by_pattern.values()
                    if entry["goal"] and entry.get("speedup") is not None]
    values_ok = all(s.get("values_ok") for s in summaries.values())

    load_after = os.getloadavg()
    print(f"\n== GEOS-like grid {shape} (NetCDF-4 {nc_bytes / 1e6:.1f} MB), latency {args.latency_ms:g} ms, "
          f"{args.bandwidth_mbps:g} Mbit/s per request; native chunks {plan['native']}; sharded: "
          + "; ".join(f"inner {s['inner']} in shards {s['shards']}" for s in plan["sharded"]))
    print(f"{'variant':28} {'MB stored':>9} {'convert s':>9}")
    print(f"{'original NetCDF-4':28} {nc_bytes / 1e6:9.1f} {'—':>9}")
    for name, c in conversions.items():
        print(f"{name:28} {c['bytes'] / 1e6:9.1f} {c['seconds']:9.2f}")
    print(f"\n{'pattern':24} {'variant':26} {'reader':24} {'median s':>9} {'requests':>8} {'MB moved':>9} "
          f"{'over-read':>9} {'values':>6}")
    for row in rows:
        s = summaries[row["key"]]
        if not s.get("ok_runs"):
            print(f"{row['pattern']:24} {row['variant']:26} {row['reader']:24} failed: "
                  f"{'; '.join(s.get('errors') or [])[:160]}")
            continue
        print(f"{row['pattern']:24} {row['variant']:26} {row['reader']:24} {s['median_wall_s']:9.3f} "
              f"{s['requests']:>8} {(s['bytes_transferred'] or 0) / 1e6:9.2f} {s['overread_ratio'] or 0:9.1f} "
              f"{'ok' if s['values_ok'] else 'BAD':>6}")
    for name, by_pattern in coalescing.items():
        print(f"\ncoalescing on vs off, {name}:")
        for pattern, entry in by_pattern.items():
            if entry.get("speedup") is None:
                print(f"  {pattern:24} {entry['reason']}")
                continue
            goal = (f"; goal >= {COALESCING_GOAL:g}x: {'met' if entry['met'] else 'NOT met'}" if entry["goal"] else "")
            print(f"  {pattern:24} {entry['speedup']:.2f}x ({entry['off_s']:.3f} s -> {entry['on_s']:.3f} s; "
                  f"load phase {entry['load_speedup'] or 0:.2f}x){goal}")
            print(f"  {'':24} {entry['reason']}")
    print(f"every value checked against the generator: {'yes' if values_ok else 'NO'}")
    print(f"\nbench_grid_shards: {time.time() - started:.0f} s, load average before {load_before[0]:.2f} after "
          f"{load_after[0]:.2f} on {os.cpu_count()} cores")

    if not args.keep:
        nc.unlink(missing_ok=True)
    command = " ".join([".venv/bin/python benchmarks/bench_grid_shards.py"] + list(argv if argv is not None
                                                                                 else sys.argv[1:]))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "benchmark": "bench_grid_shards", "issue": 16, "command": command, "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": round(time.time() - started),
        "machine": machine(), "load_before": load_before, "load_after": load_after, "versions": library_versions(),
        "settings": {"shape": shape, "native_chunks": list(plan["native"]), "sharded": plan["sharded"],
                     "repeat": args.repeat, **net, "platform": "local-lambda", "smoke": args.repeat < 3},
        "source": {"bytes": nc_bytes, "generated": generated, "url": url_nc},
        "conversions": conversions,
        "cases": [{"key": row["key"], **summaries[row["key"]]} for row in rows],
        "coalescing": coalescing,
        "verdict": {"coalescing_goal": COALESCING_GOAL, "coalescing_goal_patterns": list(COALESCING_GOAL_PATTERNS),
                    "coalescing_met": bool(goal_entries) and all(e["met"] for e in goal_entries),
                    "values_ok": values_ok},
        "records": [r for rs in records.values() for r in rs],
    }, indent=1, default=str))
    print(f"wrote {args.json}")
    return 0 if values_ok else 1


if __name__ == "__main__":
    sys.exit(main())
