"""Rechunk throughput and peak memory: layoutlab vs rechunker vs xarray+dask ``to_zarr``.

Same GEOS-like source (NetCDF-4, 1 x lat x lon chunks, zlib), same targets, same
compressor (Blosc/Zstd level 3 + shuffle), same memory bound, one core each
(every run is a fresh process pinned with ``os.sched_setaffinity``), side by side
in one invocation. Throughput is MiB of *uncompressed* data variable per second
of wall time, from opening the source to a published store (consolidated
metadata included). Peak RSS is the process's VmHWM. Every output is checked
against the generator's values (a time series and a map) before it counts.

rechunker lives in its own venv (``--rechunker-python``, created by
``make bench-rechunk-venv``) because it is a separate tool with its own
dependency pins; it runs there as a subprocess of this script.

    .venv/bin/python benchmarks/bench_rechunk.py                     # ~2 GB source, three targets, three tools
    .venv/bin/python benchmarks/bench_rechunk.py --shape 240,181,288 --tools layoutlab --targets balanced
    .venv/bin/python benchmarks/bench_rechunk.py --seed-grid         # + the whole seed grid at demo scale

Writes a table to stdout and JSON to ``--json`` (default benchmarks/results/rechunk.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
MiB = 2**20

# --- what runs inside each pinned child process --------------------------------------
# Each child: pin to one core, import, time the job, check values, print one JSON line.

CHILD_COMMON = textwrap.dedent(
    """
    import json, os, sys, time
    os.sched_setaffinity(0, {core})
    import numpy as np
    args = json.loads(sys.argv[1])

    def hwm():
        return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))

    def check(read_array):
        # The variable's values at a point through time and a whole map, vs the generator.
        from layoutlab_geos_values import expected
        series, first_map = read_array()
        exp_series, exp_map = expected(args)
        np.testing.assert_array_equal(series, exp_series)
        np.testing.assert_array_equal(first_map, exp_map)
    """
)

# The generator's values, importable in the rechunker venv too (it has no layoutlab):
# this file is written next to the child scripts and only imports numpy.
GEOS_VALUES_SHIM = textwrap.dedent(
    """
    import importlib.util, sys, numpy as np
    CHECK_STEPS = 128
    def expected(args):
        spec = importlib.util.spec_from_file_location("geos_sample", args["geos_module"])
        geos = importlib.util.module_from_spec(spec)
        sys.modules["geos_sample"] = geos  # dataclasses look their module up
        spec.loader.exec_module(geos)
        grid = geos.GeosGrid(tuple(args["shape"]))
        t, la, lo = args["shape"]
        # A time series at one point over the first CHECK_STEPS steps, and the first map:
        # regenerating the whole series would cost more than the rechunk itself.
        series = geos.geos_values(grid, 0, min(t, CHECK_STEPS))[:, la // 3, lo // 2]
        return series, geos.geos_values(grid, 0, 1)[0]
    """
)

READ_BACK = textwrap.dedent(
    """
    def read_back(dst, var):
        import zarr
        arr = zarr.open_group(dst, mode="r")[var]
        t, la, lo = arr.shape
        return arr[:128, la // 3, lo // 2], arr[0]
    """
)

CHILD_LAYOUTLAB = CHILD_COMMON + READ_BACK + textwrap.dedent(
    """
    from layoutlab.convert.rechunk_zarr import rechunk
    start = time.perf_counter()
    result = rechunk(args["src"], args["dst"], chunks=args["chunks"], max_mem=args["max_mem"],
                     compressor="blosc-zstd:3", progress=False)
    seconds = time.perf_counter() - start
    peak = hwm()  # before the value check, which allocates arrays of its own
    check(lambda: read_back(args["dst"], args["var"]))
    print(json.dumps({"seconds": seconds, "peak_rss": peak, "units": result["units"], "stages": result["stages"]}))
    """
)

CHILD_XARRAY_DASK = CHILD_COMMON + READ_BACK + textwrap.dedent(
    """
    import dask, xarray as xr, zarr
    from zarr.codecs import BloscCodec
    # dask's rechunk keeps its intermediate blocks under array.chunk-size: the closest
    # thing xarray+dask has to a memory bound. Synchronous scheduler: one core.
    dask.config.set({"array.chunk-size": args["max_mem"], "scheduler": "synchronous"})
    start = time.perf_counter()
    ds = xr.open_dataset(args["src"], engine="h5netcdf", chunks={})
    var = args["var"]
    ds[var] = ds[var].chunk(args["chunks"])
    encoding = {var: {"chunks": tuple(args["chunks"][d] for d in ds[var].dims),
                      "compressors": (BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"),)}}
    ds.to_zarr(args["dst"], mode="w", zarr_format=3, consolidated=True, encoding=encoding)
    seconds = time.perf_counter() - start
    peak = hwm()
    check(lambda: read_back(args["dst"], var))
    print(json.dumps({"seconds": seconds, "peak_rss": peak}))
    """
)

CHILD_RECHUNKER = CHILD_COMMON + READ_BACK + textwrap.dedent(
    """
    import dask, xarray as xr, zarr, rechunker
    from numcodecs import Blosc
    # rechunker 0.5.x requires zarr < 3: its venv has zarr 2 and writes a Zarr v2 store.
    dask.config.set({"scheduler": "synchronous"})
    start = time.perf_counter()
    ds = xr.open_dataset(args["src"], engine="h5netcdf", chunks={})  # dask chunks = the file's chunks
    var = args["var"]
    target_chunks = {var: args["chunks"]}
    for name in ds.coords:
        target_chunks[name] = {d: ds.sizes[d] for d in ds[name].dims}
    plan = rechunker.rechunk(
        ds, target_chunks, args["max_mem"], args["dst"], temp_store=args["tmp"],
        target_options={var: {"compressor": Blosc(cname="zstd", clevel=3, shuffle=Blosc.SHUFFLE)}},
    )
    plan.execute()
    zarr.consolidate_metadata(args["dst"])
    seconds = time.perf_counter() - start
    peak = hwm()
    check(lambda: read_back(args["dst"], var))
    print(json.dumps({"seconds": seconds, "peak_rss": peak, "rechunker": rechunker.__version__, "zarr": zarr.__version__}))
    """
)

CHILDREN = {"layoutlab": CHILD_LAYOUTLAB, "rechunker": CHILD_RECHUNKER, "xarray-dask": CHILD_XARRAY_DASK}


def targets_for(shape) -> dict[str, dict[str, int]]:
    """Time-series-optimal, map-optimal and balanced targets (Nguyen et al.'s shapes, clipped)."""
    t, la, lo = shape
    return {
        "time-series": {"time": t, "lat": min(la, 10), "lon": min(lo, 10)},
        "map": {"time": 1, "lat": la, "lon": lo},
        "balanced": {"time": min(t, 120), "lat": min(la, 50), "lon": min(lo, 100)},
    }


def run_child(tool, python, core, args, workdir) -> dict:
    script = workdir / f"child_{tool}.py"
    script.write_text(CHILDREN[tool].replace("{core}", str({core})))
    (workdir / "layoutlab_geos_values.py").write_text(GEOS_VALUES_SHIM)
    env = dict(os.environ, PYTHONPATH=str(workdir))
    started = time.perf_counter()
    done = subprocess.run([python, str(script), json.dumps(args)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1], "stderr_tail": done.stderr[-2000:]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_seconds"] = wall
    return result


def store_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def ensure_source(workdir: Path, shape) -> Path:
    from layoutlab.samples.geos import write_geos

    path = workdir / f"geos-{'x'.join(map(str, shape))}.nc"
    if not path.exists():
        print(f"writing {path} ...", file=sys.stderr)
        write_geos(path, shape=shape)
    return path


def seed_grid_total(workdir: Path, core: int, max_mem: str) -> dict:
    """Time to produce every store of the seed grid at the demo shape, one core, one process."""
    from layoutlab.convert.rechunk_plan import seed_grid
    from layoutlab.samples.geos import DEFAULT_SHAPE

    src = ensure_source(workdir, DEFAULT_SHAPE)
    script = textwrap.dedent(
        f"""
        import json, os, shutil, sys, time
        os.sched_setaffinity(0, {{{core}}})
        from layoutlab.convert.rechunk_plan import seed_grid
        from layoutlab.convert.rechunk_zarr import rechunk
        rows = []
        for t, la, lo in seed_grid({tuple(DEFAULT_SHAPE)}):
            dst = "{workdir}/seed/{{}}x{{}}x{{}}.zarr".format(t, la, lo)
            start = time.perf_counter()
            r = rechunk("{src}", dst, chunks={{"time": t, "lat": la, "lon": lo}}, max_mem="{max_mem}", progress=False)
            seconds = time.perf_counter() - start
            size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(dst) for f in fs)
            files = sum(len(fs) for _, _, fs in os.walk(dst))
            rows.append({{"chunks": [t, la, lo], "seconds": seconds, "stored_bytes": size, "files": files}})
            shutil.rmtree(dst)
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        print(json.dumps(rows))
        """
    )
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "shape": list(DEFAULT_SHAPE),
        "stores": len(rows),
        "total_seconds": round(time.perf_counter() - started, 2),
        "sum_of_rechunk_seconds": round(sum(r["seconds"] for r in rows), 2),
        "slowest": max(rows, key=lambda r: r["seconds"]),
        "rows": rows,
        "grid_points_expected": len(seed_grid(DEFAULT_SHAPE)),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="2016,361,720", help="source shape time,lat,lon (default ~2.1 GB float32)")
    parser.add_argument("--workdir", default="/tmp/zarr/bench", help="where sources and outputs go (deleted after each run)")
    parser.add_argument("--max-mem", default="512MiB", help="memory bound given to every tool (default 512MiB)")
    parser.add_argument("--tools", default="layoutlab,rechunker,xarray-dask")
    parser.add_argument("--targets", default="time-series,map,balanced")
    parser.add_argument("--core", type=int, default=None, help="CPU to pin every run to (default: the last one)")
    parser.add_argument("--rechunker-python", default="/tmp/zarr/rechunker-venv/bin/python")
    parser.add_argument("--seed-grid", action="store_true", help="also time the whole seed grid at the demo shape")
    parser.add_argument("--json", default=str(HERE / "results" / "rechunk.json"))
    args = parser.parse_args(argv)

    from layoutlab.convert.rechunk_zarr import parse_size
    from layoutlab.samples.geos import VARIABLE, parse_shape

    shape = parse_shape(args.shape)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    core = args.core if args.core is not None else max(os.sched_getaffinity(0))
    max_mem = parse_size(args.max_mem)
    src = ensure_source(workdir, shape)
    data_bytes = shape[0] * shape[1] * shape[2] * 4
    pythons = {"layoutlab": sys.executable, "xarray-dask": sys.executable, "rechunker": args.rechunker_python}
    geos_module = str(Path(__import__("layoutlab.samples.geos", fromlist=["x"]).__file__))

    rows = []
    for target_name in args.targets.split(","):
        chunks = targets_for(shape)[target_name]
        for tool in args.tools.split(","):
            dst = workdir / f"out-{tool}-{target_name}.zarr"
            tmp = workdir / f"tmp-{tool}-{target_name}.zarr"
            for path in (dst, tmp):
                shutil.rmtree(path, ignore_errors=True)
            child_args = {
                "src": str(src), "dst": str(dst), "tmp": str(tmp), "chunks": chunks, "max_mem": max_mem,
                "var": VARIABLE, "shape": list(shape), "geos_module": geos_module,
            }
            load = os.getloadavg()[0]
            result = run_child(tool, pythons[tool], core, child_args, workdir)
            row = {"tool": tool, "target": target_name, "chunks": chunks, "load_1min": round(load, 2), **result}
            if "error" not in result:
                row["mib_per_s"] = round(data_bytes / MiB / result["seconds"], 2)
                row["peak_rss_mib"] = round(result["peak_rss"] / MiB, 1)
                row["stored_mib"] = round(store_bytes(dst) / MiB, 1)
            rows.append(row)
            for path in (dst, tmp):
                shutil.rmtree(path, ignore_errors=True)
            print(json.dumps(row), file=sys.stderr, flush=True)

    print(f"\nrechunk {src.name}: {data_bytes / MiB:.0f} MiB float32, bound {args.max_mem}, one core (cpu {core}), "
          f"Blosc/Zstd-3")
    print(f"{'target':<12} {'tool':<12} {'MiB/s':>8} {'seconds':>9} {'peak RSS MiB':>13} {'stored MiB':>11}  vs rechunker")
    for row in rows:
        ref = next((r for r in rows if r["tool"] == "rechunker" and r["target"] == row["target"] and "mib_per_s" in r), None)
        if "error" in row:
            print(f"{row['target']:<12} {row['tool']:<12} FAILED: {row['error'][:80]}")
            continue
        ratio = f"{row['mib_per_s'] / ref['mib_per_s']:.2f}x" if ref else "-"
        print(f"{row['target']:<12} {row['tool']:<12} {row['mib_per_s']:>8.1f} {row['seconds']:>9.1f} "
              f"{row['peak_rss_mib']:>13.0f} {row['stored_mib']:>11.0f}  {ratio}")

    report = {
        "benchmark": "rechunk",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_at_end": os.getloadavg()},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "shape": list(shape), "data_bytes": data_bytes, "max_mem": max_mem, "core": core,
        "rows": rows,
    }
    if args.seed_grid:
        report["seed_grid"] = seed_grid_total(workdir, core, args.max_mem)
        sg = report["seed_grid"]
        print(f"\nseed grid at {sg['shape']}: {sg['stores']} stores in {sg['total_seconds']:.0f} s "
              f"(slowest {sg['slowest']['chunks']}: {sg['slowest']['seconds']:.1f} s)")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
