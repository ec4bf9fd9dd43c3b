"""What running the units of a two-stage rechunk out of order costs: time, duplicated work, memory.

A stage-1 unit that finds a stage-0 unit it reads not done runs that unit itself
(``rechunk_zarr._catch_up``). This script measures, on one GEOS-like source and
side by side in one invocation:

- ``in-order``: one fresh process runs every unit in plan order (stage 0 first);
- ``reversed``: one fresh process runs them in reverse order (every stage-1 unit
  before any stage-0 unit: the first one catches up on all of stage 0);
- ``parallel-in-order`` / ``parallel-reversed``: ``--workers`` fresh processes
  (a multiprocessing pool, one unit per task) over the same two orders, where two
  workers can catch up on the same stage-0 unit at once (duplicated work).

For each: wall time, CPU time summed over the processes, how many stage-0 unit
runs there were (vs the number of stage-0 units: the duplicates), peak RSS (VmHWM)
of the process that held the most, and whether the published store is
byte-identical to the in-order one. The memory baseline is the VmHWM of the same
worker running the units of a tiny plan (imports and codec contexts, no data).

    .venv/bin/python benchmarks/bench_unit_order.py                       # ~300 MB source
    .venv/bin/python benchmarks/bench_unit_order.py --shape 96,181,360 --max-mem 6MiB --workers 4

Writes a table to stdout and JSON to ``--json`` (default benchmarks/results/unit-order.json).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import platform
import shutil
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
MiB = 2**20


def _hwm() -> int:
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))


def _init_worker(cores):
    os.sched_setaffinity(0, cores)
    import layoutlab.convert.rechunk_zarr  # noqa: F401  (imports before the clock starts)


def _run_units(args):
    """Run ``ids`` of the plan stored in ``dst`` in this process; CPU seconds, runs and VmHWM."""
    dst, ids = args
    from layoutlab.convert import rechunk_zarr as rz

    plan = rz.load_plan(dst)
    cpu = time.process_time()
    runs = []
    for k in ids:
        result = rz.run_unit(plan, k)
        runs += result["ran_earlier"] + ([] if result["skipped"] else [k])
    return {"cpu": time.process_time() - cpu, "runs": runs, "hwm": _hwm(), "pid": os.getpid()}


def _baseline(dst):
    """VmHWM of a worker that ran the units of a tiny plan: imports and codec contexts, no data."""
    from layoutlab.convert import rechunk_zarr as rz

    return _run_units((dst, range(len(rz.load_plan(dst)["units"]))))["hwm"]


def _store_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def run_case(name, src, dst, options, order, workers, cores):
    from layoutlab.convert import rechunk_zarr as rz

    plan = rz.plan_rechunk(src, dst, overwrite=True, **options)
    ids = [u["id"] for u in plan["units"]]
    if order == "reversed":
        ids.reverse()
    stage0 = {u["id"] for u in plan["units"] if u["stage"] == 0}
    context = multiprocessing.get_context("spawn")
    start = time.perf_counter()
    with context.Pool(workers, initializer=_init_worker, initargs=(cores,)) as pool:
        if workers == 1:
            results = pool.map(_run_units, [(dst, ids)])
        else:
            results = pool.map(_run_units, [(dst, [k]) for k in ids], chunksize=1)
    rz.finalize(plan)
    wall = time.perf_counter() - start
    runs = [k for r in results for k in r["runs"]]
    return {
        "case": name,
        "workers": workers,
        "order": order,
        "units": len(plan["units"]),
        "stage0_units": len(stage0),
        "stage0_runs": sum(k in stage0 for k in runs),
        "stage1_runs": sum(k not in stage0 for k in runs),
        "wall_s": round(wall, 2),
        "cpu_s": round(sum(r["cpu"] for r in results), 2),
        "peak_rss": max(r["hwm"] for r in results),
        "store_sha256": _store_digest(Path(dst)),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--shape", default="720,361,288", help="GEOS-like T,LAT,LON (default ~300 MB of float32)")
    parser.add_argument("--chunks", default="time=720,lat=10,lon=10", help="target chunks (default: time series)")
    parser.add_argument("--max-mem", default="64MiB", help="memory bound per unit (default 64MiB)")
    parser.add_argument("--workers", type=int, default=4, help="processes of the parallel cases (default 4)")
    parser.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    parser.add_argument("--json", default=str(HERE / "results" / "unit-order.json"))
    args = parser.parse_args(argv)

    from layoutlab.convert import rechunk_zarr as rz
    from layoutlab.samples.geos import write_geos

    shape = tuple(int(n) for n in args.shape.split(","))
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-unit-order-"))
    work.mkdir(parents=True, exist_ok=True)
    src = work / "geos.nc"
    if not src.exists():
        print(f"writing {src} {shape} ...", flush=True)
        write_geos(src, shape=shape)
    tiny = write_geos(work / "tiny.nc", shape=(2, 3, 4))
    options = {"chunks": rz.parse_dim_spec(args.chunks), "max_mem": args.max_mem}
    plan = rz.plan_rechunk(str(src), str(work / "probe.zarr"), prepare=False, **options)
    if plan["stages"] != 2:
        raise SystemExit(f"the plan for {args.chunks} under {args.max_mem} has {plan['stages']} stage(s); "
                         "choose a smaller --max-mem or more elongated --chunks")
    cores = set(sorted(os.sched_getaffinity(0))[-1:])  # sequential cases: one core
    all_cores = set(os.sched_getaffinity(0))
    context = multiprocessing.get_context("spawn")
    rz.plan_rechunk(str(tiny), str(work / "tiny.zarr"), overwrite=True, chunks={"time": 2, "lat": 1, "lon": 1})
    with context.Pool(1, initializer=_init_worker, initargs=(cores,)) as pool:
        baseline = pool.map(_baseline, [str(work / "tiny.zarr")])[0]
    rows = []
    for name, order, workers, use in (
        ("in-order", "in-order", 1, cores),
        ("reversed", "reversed", 1, cores),
        ("parallel-in-order", "in-order", args.workers, all_cores),
        ("parallel-reversed", "reversed", args.workers, all_cores),
    ):
        dst = work / f"{name}.zarr"
        print(f"{name} ...", flush=True)
        rows.append(run_case(name, str(src), str(dst), options, order, workers, use))
        if name != "in-order":
            shutil.rmtree(dst)
    reference = rows[0]
    max_mem = rz.parse_size(args.max_mem)
    print(f"\nsource {shape} float32 = {shape[0] * shape[1] * shape[2] * 4 / MiB:.0f} MiB, target {args.chunks}, "
          f"--max-mem {args.max_mem}, {reference['units']} units ({reference['stage0_units']} of stage 0); "
          f"baseline (units of a tiny plan) {baseline / MiB:.0f} MiB")
    print(f"{'case':<20}{'wall s':>8}{'cpu s':>8}{'x in-order cpu':>16}{'stage-0 runs':>14}{'peak RSS MiB':>14}"
          f"{'over baseline':>15}{'same bytes':>12}")
    for row in rows:
        row["cpu_vs_in_order"] = round(row["cpu_s"] / reference["cpu_s"], 3)
        row["peak_over_baseline"] = row["peak_rss"] - baseline
        row["same_store"] = row["store_sha256"] == reference["store_sha256"]
        print(f"{row['case']:<20}{row['wall_s']:>8.1f}{row['cpu_s']:>8.1f}{row['cpu_vs_in_order']:>16.3f}"
              f"{row['stage0_runs']:>8}/{row['stage0_units']:<5}{row['peak_rss'] / MiB:>14.0f}"
              f"{row['peak_over_baseline'] / MiB:>15.1f}{str(row['same_store']):>12}")
    print(f"bound: --max-mem {max_mem / MiB:.0f} MiB + fixed {rz.FIXED_WORKING_MEMORY / MiB:.0f} MiB over the baseline")
    out = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "shape": shape, "chunks": args.chunks, "max_mem": max_mem, "baseline_rss": baseline,
        "fixed_working_memory": rz.FIXED_WORKING_MEMORY, "rows": rows,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1))
    if not args.work:
        shutil.rmtree(work)
    if not all(row["same_store"] for row in rows):
        raise SystemExit("stores differ between orders")


if __name__ == "__main__":
    main()
