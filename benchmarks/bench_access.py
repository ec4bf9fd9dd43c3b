"""Issue 4's acceptance measurements: the benchmark instrument checked against its claims.

Everything runs on the local cloud (moto + S3 proxy, 25 ms first-byte latency and
720 Mbit/s per request unless overridden), each repetition in a fresh process
pinned to one core with the local-lambda memory limit.

1. ATL03-like granule (Lopez et al.): open + list every object and attribute.
   paged 8 MiB (h5repack -S PAGE -G 8388608, the stand-in for the hdf5 area's
   repack) + h5py-s3fs-aligned must need <= 4 requests; the original with
   h5py-s3fs-default >= 25x more.
2. Nguyen et al.'s trade-off on a GEOS-like cube in Zarr v3 (zarr-obstore):
   time-series-optimal (T x 10 x 10) vs map-optimal (1 x LAT x LON) vs balanced:
   each optimum >= 20x slower on the other pattern; balanced within 5x of the
   best on both.
3. The emulator behaves like its settings: for sequential h5py reads (h5py-s3fs-aligned,
   map-time-mean over 24 steps of the NetCDF original with 256 KiB blocks, bandwidth
   uncapped), the time added by
   latency L is requests x L within +-25%.
4. Repeatability: coefficient of variation of wall time over repetitions <= 10%
   (on a quiet machine: the load average is recorded with every run).

    .venv/bin/python benchmarks/bench_access.py                       # realistic sizes (~30 min on a loaded VM)
   .venv/bin/python benchmarks/bench_access.py --skip atl03 --geos-shape 5136,181,288   # Nguyen's time length
    .venv/bin/python benchmarks/bench_access.py --atl03-photons 200000 --geos-shape 240,91,144 --repeat 2

Prints a table and writes JSON (all records + verdicts) to benchmarks/results/bench_access.json.
Generated data lives in --workdir (default /tmp/bench-access) and is kept for reruns;
delete it when done.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_support import log, run_logged  # noqa: E402  (sets the local cloud's dummy AWS credentials)

from layoutlab.bench.runner import upload_target  # noqa: E402
from layoutlab.local.cloud import start_local_cloud  # noqa: E402
from layoutlab.results.record import host_info, library_versions  # noqa: E402


# -- data -----------------------------------------------------------------------
def make_atl03(workdir: Path, photons: int) -> dict[str, Path]:
    from layoutlab.samples.atl03 import write_atl03

    original = workdir / f"atl03-{photons}.h5"
    paged = workdir / f"atl03-{photons}-paged-8MiB.h5"
    if not original.exists():
        log(f"writing ATL03-like granule, {photons} photons/beam")
        write_atl03(original, photons=photons)
    if not paged.exists():
        log("h5repack -S PAGE -G 8388608")
        subprocess.run(["h5repack", "-S", "PAGE", "-G", "8388608", str(original), str(paged)], check=True)
    return {"original": original, "paged-8MiB": paged}


def zarr_layouts(shape):
    t, lat, lon = shape
    return {
        "time-series-optimal": (t, 10, 10),
        "map-optimal": (1, lat, lon),
        # intermediate in every dimension, ~1.6 MB float32 chunks (Nguyen's 120x50x100 is 2.4 MB)
        "balanced": (min(t, 120), -(-lat // 4), -(-lon // 4)),
    }


def make_geos(workdir: Path, shape) -> dict[str, Path]:
    import xarray as xr

    from layoutlab.samples.geos import write_geos

    tag = "x".join(map(str, shape))
    nc = workdir / f"geos-{tag}.nc"
    if not nc.exists():
        log(f"writing GEOS-like NetCDF {shape}")
        write_geos(nc, shape=shape)
    out = {"original": nc}
    layouts = zarr_layouts(shape)
    missing = {name: chunks for name, chunks in layouts.items()
               if not (workdir / f"geos-{tag}-{name}.zarr" / "zarr.json").exists()}
    if missing:
        with xr.open_dataset(nc) as ds:
            ds = ds.load()
            for name, chunks in missing.items():
                log(f"writing Zarr {name} chunks {chunks}")
                ds.to_zarr(workdir / f"geos-{tag}-{name}.zarr", mode="w", zarr_format=3, consolidated=True,
                           encoding={"BCEXTTAU": {"chunks": chunks}})
    for name in layouts:
        out[name] = workdir / f"geos-{tag}-{name}.zarr"
    return out


# -- running --------------------------------------------------------------------
def run(cases, cloud, records):
    out = []
    for case in cases:
        record = run_logged(case, cloud, f"{case.get('variant'):>20} {case['pattern']:>22} {case['reader']:>18} "
                                         f"rep {case['repetition']}")
        out.append(record)
        records.append(record)
    return out


def cases(target, pattern, reader, variant, repeat, **extra):
    return [{"target": target, "pattern": pattern, "reader": reader, "variant": variant, "repetition": r,
             "platform": "local-lambda", **extra} for r in range(repeat)]


def median_wall(records):
    walls = [r["wall_s"] for r in records if r["status"] == "ok"]
    return statistics.median(walls) if walls else float("nan")


def cv(records):
    walls = [r["wall_s"] for r in records if r["status"] == "ok"]
    return statistics.stdev(walls) / statistics.mean(walls) if len(walls) > 1 else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-access"))
    parser.add_argument("--atl03-photons", type=int, default=7_000_000, help="photons per beam (7e6: ~1 GB file)")
    parser.add_argument("--geos-shape", default="2160,181,288", help="time,lat,lon (default 90 days hourly, 1 deg)")
    parser.add_argument("--latency-ms", type=float, default=25.0)
    parser.add_argument("--bandwidth-mbps", type=float, default=720.0)
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per case")
    parser.add_argument("--cv-repeat", type=int, default=5, help="repetitions of the repeatability cases")
    parser.add_argument("--emulator-block", type=int, default=256 * 1024,
                        help="s3fs block size of the emulator check's h5py reader (default 256 KiB)")
    parser.add_argument("--skip", action="append", default=[], choices=["atl03", "tradeoff", "emulator", "cv"])
    parser.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "bench_access.json")
    args = parser.parse_args(argv)
    from layoutlab.samples.geos import parse_shape

    try:
        shape = parse_shape(args.geos_shape)
    except ValueError as error:
        parser.error(f"--geos-shape: {error}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    load_before = os.getloadavg()
    atl03 = make_atl03(args.workdir, args.atl03_photons) if "atl03" not in args.skip else {}
    geos = make_geos(args.workdir, shape)

    records, verdicts, table = [], {}, []
    cloud = start_local_cloud(latency_ms=args.latency_ms, bandwidth_mbps=args.bandwidth_mbps)
    try:
        log("uploading")
        urls = {f"atl03/{k}": upload_target(v, cloud) for k, v in atl03.items()}
        urls.update({f"geos/{k}": upload_target(v, cloud) for k, v in geos.items()})
        net = {"latency_ms": args.latency_ms, "bandwidth_mbps": args.bandwidth_mbps}

        # 1. ATL03 open + list
        if "atl03" not in args.skip:
            paged = run(cases(urls["atl03/paged-8MiB"], "granule-open-list", "h5py-s3fs-aligned", "paged-8MiB",
                              args.repeat, **net), cloud, records)
            original = run(cases(urls["atl03/original"], "granule-open-list", "h5py-s3fs-default", "original",
                                 1, **net), cloud, records)
            extra = run(cases(urls["atl03/original"], "granule-open-list", "h5py-s3fs-aligned", "original", 1, **net)
                        + cases(urls["atl03/paged-8MiB"], "granule-open-list", "h5py-s3fs-default", "paged-8MiB", 1,
                                **net), cloud, records)
            for group in (paged, original, extra[:1], extra[1:]):
                r = group[0]
                table.append(("atl03 open+list", r["variant"], r["reader"], median_wall(group), r["requests"],
                              r["bytes_transferred"], cv(group)))
            paged_req = max(r["requests"] for r in paged)
            orig_req = original[0]["requests"]
            verdicts["atl03_paged_aligned_requests"] = paged_req
            verdicts["atl03_original_default_requests"] = orig_req
            verdicts["atl03_request_ratio"] = orig_req / paged_req
            verdicts["atl03_met"] = paged_req <= 4 and orig_req >= 25 * paged_req

        # 2. Nguyen trade-off
        if "tradeoff" not in args.skip:
            walls = {}
            for layout in zarr_layouts(shape):
                for pattern in ("map-timestep", "timeseries-point"):
                    group = run(cases(urls[f"geos/{layout}"], pattern, "zarr-obstore",
                                      f"zarr-{'x'.join(map(str, zarr_layouts(shape)[layout]))}", args.repeat, **net),
                                cloud, records)
                    walls[(layout, pattern)] = median_wall(group)
                    r = group[0]
                    table.append((pattern, layout, "zarr-obstore", walls[(layout, pattern)], r["requests"],
                                  r["bytes_transferred"], cv(group)))
            ts_opt, map_opt, bal = "time-series-optimal", "map-optimal", "balanced"
            best_map = min(walls[(l, "map-timestep")] for l in zarr_layouts(shape))
            best_ts = min(walls[(l, "timeseries-point")] for l in zarr_layouts(shape))
            verdicts.update({
                "map_timestep_ts_opt_over_map_opt": walls[(ts_opt, "map-timestep")] / walls[(map_opt, "map-timestep")],
                "timeseries_map_opt_over_ts_opt": walls[(map_opt, "timeseries-point")]
                / walls[(ts_opt, "timeseries-point")],
                "balanced_map_over_best": walls[(bal, "map-timestep")] / best_map,
                "balanced_timeseries_over_best": walls[(bal, "timeseries-point")] / best_ts,
            })
            verdicts["tradeoff_met"] = (verdicts["map_timestep_ts_opt_over_map_opt"] >= 20
                                        and verdicts["timeseries_map_opt_over_ts_opt"] >= 20
                                        and verdicts["balanced_map_over_best"] <= 5
                                        and verdicts["balanced_timeseries_over_best"] <= 5)

        # 3. emulator: added time = requests x latency for sequential h5py reads. A pattern with many
        # small reads and little CPU (24 time steps, 256 KiB blocks) so that latency, not
        # decompression, is what changes between the two settings.
        if "emulator" not in args.skip:
            groups = {}
            emulator_case = {"params": {"hours": 24}, "reader_options": {"page_size": args.emulator_block}}
            for latency in (0.0, args.latency_ms):
                groups[latency] = run(cases(urls["geos/original"], "map-time-mean", "h5py-s3fs-aligned",
                                            "original", args.cv_repeat, latency_ms=latency, bandwidth_mbps=0,
                                            **emulator_case), cloud, records)
                r = groups[latency][0]
                table.append((f"map-time-mean 24h @{latency:g} ms", "original", "h5py-s3fs-aligned",
                              median_wall(groups[latency]), r["requests"], r["bytes_transferred"], cv(groups[latency])))
            added = median_wall(groups[args.latency_ms]) - median_wall(groups[0.0])
            requests = statistics.median(r["requests"] for r in groups[args.latency_ms])
            expected = requests * args.latency_ms / 1000
            verdicts.update({"emulator_requests": requests, "emulator_added_s": added,
                             "emulator_expected_s": expected, "emulator_ratio": added / expected})
            verdicts["emulator_met"] = abs(added / expected - 1) <= 0.25

        # 4. repeatability
        if "cv" not in args.skip:
            cv_groups = {
                "zarr-obstore map-timestep balanced": run(cases(urls["geos/balanced"], "map-timestep", "zarr-obstore",
                                                                "zarr-balanced", args.cv_repeat, **net), cloud, records),
                "h5py-s3fs-aligned map-time-mean original": run(cases(urls["geos/original"], "map-time-mean",
                                                                      "h5py-s3fs-aligned", "original", args.cv_repeat,
                                                                      **net), cloud, records),
            }
            verdicts["cv"] = {name: cv(group) for name, group in cv_groups.items()}
            for name, group in cv_groups.items():
                r = group[0]
                table.append((f"repeat x{len(group)}", name.split()[-1], r["reader"], median_wall(group),
                              r["requests"], r["bytes_transferred"], cv(group)))
            verdicts["cv_met"] = all(v <= 0.10 for v in verdicts["cv"].values())
    finally:
        cloud.stop()

    load_after = os.getloadavg()
    bad = [r for r in records if r["status"] != "ok" or r["checksum_ok"] is False]
    print(f"\nbench_access: {len(records)} runs, {time.time() - started:.0f} s, load average before "
          f"{load_before[0]:.2f} after {load_after[0]:.2f} on {os.cpu_count()} cores; "
          f"latency {args.latency_ms:g} ms, bandwidth {args.bandwidth_mbps:g} Mbit/s")
    print(f"{'case':32} {'variant':22} {'reader':18} {'median s':>9} {'requests':>8} {'MB moved':>9} {'CV':>6}")
    for case, variant, reader, wall, req, moved, c in table:
        print(f"{case:32} {variant:22} {reader:18} {wall:9.3f} {req:>8} {moved / 1e6:9.1f} {c:6.1%}")
    print("\nverdicts:")
    for key, value in verdicts.items():
        print(f"  {key}: {value if not isinstance(value, float) else round(value, 3)}")
    print(f"runs with errors or wrong values: {len(bad)}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "benchmark": "bench_access", "command": " ".join(["benchmarks/bench_access.py"] + (argv or sys.argv[1:])),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_before": load_before,
        "load_after": load_after, "host": host_info(), "versions": library_versions(),
        "settings": {"atl03_photons": args.atl03_photons, "geos_shape": shape, "latency_ms": args.latency_ms,
                     "bandwidth_mbps": args.bandwidth_mbps, "repeat": args.repeat, "cv_repeat": args.cv_repeat,
                     "zarr_layouts": {k: list(v) for k, v in zarr_layouts(shape).items()},
                     "file_sizes": {str(p): (sum(f.stat().st_size for f in p.rglob('*') if f.is_file())
                                             if p.is_dir() else p.stat().st_size)
                                    for p in list(atl03.values()) + list(geos.values())}},
        "verdicts": verdicts, "table": table, "records": records,
    }, indent=1, default=str))
    print(f"wrote {args.json}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
