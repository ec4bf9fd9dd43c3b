#!/usr/bin/env python
"""layoutlab repack vs h5repack -S PAGE -G <same>, side by side in one run.

For each input (a ~1 GB GEOS-like NetCDF-4 and a ~1 GB ATL03-like HDF5 by
default) the tools run as fresh processes, in rotating order, ``--repeat`` times:
h5repack (which checks nothing), ``layoutlab repack`` as users run it (verified: the copy compared
with the input and every input chunk decoded), and the same with ``--no-verify``. For each:
wall time, CPU time (user+sys), output size (overhead against the input) and peak RSS of each
process (from ``wait4``). The ratio is layoutlab / h5repack on the median
times; <= 1.0 means at least as fast. ``--memory-check-gb`` adds the bounded
memory check: repack of a GEOS-like input of that size must stay under 1 GB RSS.

Inputs are generated into ``--workdir`` when missing (and kept with ``--keep``).
Prints a table and writes JSON (``--json``).

    python benchmarks/bench_repack.py --workdir /tmp/hdf5/bench --repeat 3 --memory-check-gb 4
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "functions"))

from layoutlab.convert import fastcopy  # noqa: E402
from layoutlab.convert.repack_hdf5 import parse_size  # noqa: E402
from layoutlab.samples import atl03, geos  # noqa: E402

GEOS_STEP_BYTES = 721 * 1152 * 4  # one full-resolution time step, uncompressed


# The measured process is started by a lean launcher (python -S, ~10 MB), not
# forked from this one: a child's peak RSS includes what it had before exec,
# and this process holds h5py/numpy (~250 MB) after generating the inputs.
LAUNCHER = """
import json, os, sys, time
started = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(json.dumps({"seconds": time.perf_counter() - started, "maxrss_kib": usage.ru_maxrss,
                  "cpu_seconds": usage.ru_utime + usage.ru_stime, "user_seconds": usage.ru_utime,
                  "code": os.waitstatus_to_exitcode(status)}), file=sys.stderr)
"""


def measure(argv: list[str], env: dict | None = None) -> dict:
    """Run ``argv`` as a fresh process; wall seconds and peak RSS (the kernel's rusage of that process and
    of the processes it waited for: --verify's decode check runs in a child)."""
    result = subprocess.run([sys.executable, "-S", "-c", LAUNCHER, *argv], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO / "functions"), **(env or {})})
    lines = result.stderr.strip().splitlines()
    status = json.loads(lines[-1])
    if status["code"] != 0:
        raise RuntimeError(f"{argv[0]} failed ({status['code']}): {chr(10).join(lines[-20:-1])}")
    return {"seconds": status["seconds"], "cpu_seconds": status["cpu_seconds"], "user_seconds": status["user_seconds"],
            "peak_rss_bytes": status["maxrss_kib"] * 1024, "stdout": result.stdout}


def ensure_geos(path: Path, steps: int) -> Path:
    if not path.exists():
        print(f"generating {path} ({steps} x 721 x 1152) ...", flush=True)
        geos.write_geos(path, shape=(steps, 721, 1152))
    return path


def ensure_atl03(path: Path, photons: int) -> Path:
    if not path.exists():
        print(f"generating {path} (6 beams x {photons} photons) ...", flush=True)
        atl03.write_atl03(path, photons=photons)
    return path


def warm(path: Path) -> None:
    """Read the input once so both tools start from the same (warm) page cache."""
    with open(path, "rb") as stream:
        while stream.read(64 << 20):
            pass


# What is measured against ``h5repack -S PAGE -G N`` (unverified: h5repack has no check): layoutlab as a
# user runs it (the CLI's default verifies the copy and decodes every input chunk), the same without the
# check.
TOOLS = {
    "layoutlab": ([], {}),
    "layoutlab_no_verify": (["--no-verify"], {}),
}


def compare(name: str, src: Path, workdir: Path, page_size: int, repeat: int, tools=tuple(TOOLS),
            floor: bool = False) -> dict:
    outputs = {tool: workdir / f"{src.stem}.{tool}.h5" for tool in ("h5repack", *tools)}
    argvs = {"h5repack": (["h5repack", "-S", "PAGE", "-G", str(page_size), str(src), str(outputs["h5repack"])], {})}
    for tool in tools:
        extra, env = TOOLS[tool]
        argvs[tool] = ([sys.executable, "-m", "layoutlab.cli", "repack", str(src), str(outputs[tool]),
                        "--page-size", str(page_size), "--json", *extra], env)
    if floor:
        # The verified copy's floor (issue 37): stock zlib inflating every stored chunk, one process per core;
        # measured in the same rotation, so the floor is of this machine at this moment.
        argvs["inflate_floor"] = ([sys.executable, str(REPO / "benchmarks" / "inflate_floor.py"), str(src), "--json"], {})
    runs = {tool: [] for tool in argvs}
    for repetition in range(repeat):
        # Who runs first rotates too: a run inherits the page-cache and free-memory state the
        # previous one left (1 GB of output freed just before), so a fixed order could favour one.
        order = list(argvs)
        order = order[repetition % len(order):] + order[:repetition % len(order)]
        for tool in order:
            argv, env = argvs[tool]
            for stale in outputs.values():
                stale.unlink(missing_ok=True)
            # Warm before every run, not once: this VM's kernel hands cold page-cache pages
            # back to the host (DAMON reclaim), so an input warmed minutes ago may be on disk again.
            warm(src)
            # Start each run with no dirty pages: otherwise one tool pays for the
            # other's writeback (1 GB outputs exceed the kernel's dirty limits).
            os.sync()
            result = measure(argv, env)
            if tool == "inflate_floor":
                floor_run = json.loads(result.pop("stdout"))
                result["inflate_seconds"], result["chunks_inflated"] = floor_run["inflate_seconds"], floor_run["chunks_inflated"]
                runs[tool].append(result)
                continue
            if tool != "h5repack":
                written = json.loads(result["stdout"])
                result["in_process_seconds"] = written["seconds"]
                result["verified"], result["verify_seconds"] = written["verified"], written["verify_seconds"]
                result["decode_check"], result["notes"] = written["decode_check"], written["notes"]
            result.pop("stdout")
            result["output_bytes"] = outputs[tool].stat().st_size
            runs[tool].append(result)
    input_bytes = src.stat().st_size
    row = {"input": name, "input_bytes": input_bytes, "page_size": page_size, "repeat": repeat, "runs": runs}
    reference = statistics.median(r["seconds"] for r in runs["h5repack"])
    for tool, results in runs.items():
        row[tool] = {
            "median_seconds": statistics.median(r["seconds"] for r in results),
            "min_seconds": min(r["seconds"] for r in results),
            "median_cpu_seconds": statistics.median(r["cpu_seconds"] for r in results),
            "peak_rss_bytes": max(r["peak_rss_bytes"] for r in results),
        }
        if tool == "inflate_floor":
            row[tool]["median_inflate_seconds"] = statistics.median(r["inflate_seconds"] for r in results)
            continue
        row[tool]["output_bytes"] = results[-1]["output_bytes"]
        row[tool]["size_overhead"] = results[-1]["output_bytes"] / input_bytes - 1
        if tool != "h5repack":
            row[tool]["time_ratio"] = row[tool]["median_seconds"] / reference
            # On a shared machine wall times of both tools swing 2-5x from run to run (page-cache and
            # memory-bandwidth contention): best-of-N and CPU time (user+sys) are steadier views.
            row[tool]["best_time_ratio"] = row[tool]["min_seconds"] / row["h5repack"]["min_seconds"]
            row[tool]["cpu_time_ratio"] = row[tool]["median_cpu_seconds"] / row["h5repack"]["median_cpu_seconds"]
    row["time_ratio"] = row[tools[0]]["time_ratio"]
    if floor:
        # The floor: the larger of h5repack's time and the inflating (whole process, start included).
        row["floor_seconds"] = max(reference, row["inflate_floor"]["median_seconds"])
        row["verified_over_floor"] = row["layoutlab"]["median_seconds"] / row["floor_seconds"]
    for stale in outputs.values():
        stale.unlink(missing_ok=True)
    return row


def pipeline_compare(name: str, src: Path, page_size: int, repeat: int) -> dict:
    """The pipeline's convert task (kinds/repack_paged.py) as it runs in the cloud, from download to
    published variant: the upload downloaded to scratch, repacked with --verify (the task always
    verifies), the copy published; against the same task with h5repack (unverified) in place of the
    repack, through the same download and publish. The local cloud (moto on 127.0.0.1, what the local
    pipeline's tasks use, no emulated link: conversions are not what it slows) holds the objects.
    Where each task's time went is kept per run (``phase_seconds``; ours records downloaded, copy written,
    verdict, parts sent, published itself; h5repack's is timed here)."""
    import tempfile

    import boto3

    from layoutlab.kinds import get as kind_named
    from layoutlab.kinds._transfer import download, publish
    from layoutlab.local.cloud import start_local_cloud
    from layoutlab.storage import S3Location

    cloud = start_local_cloud(objects_on_disk_over=64 << 20)
    saved = dict(os.environ)
    try:
        os.environ.update({**cloud.env(), "AWS_ENDPOINT_URL_S3": cloud.moto_endpoint})
        s3 = boto3.client("s3", endpoint_url=cloud.moto_endpoint)
        s3.create_bucket(Bucket="bench")
        source = {"bucket": "bench", "key": f"incoming/{src.name}"}
        s3.upload_file(str(src), source["bucket"], source["key"])
        repack_paged = kind_named("repack-paged")

        def layoutlab_task():
            return repack_paged.convert({"uri": f"s3://bench/targets/{src.stem}-layoutlab.h5",
                                         "page_size": page_size}, dict(source), s3, None)

        def h5repack_task():
            started = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="bench-h5repack-") as scratch:
                local = download(s3, dict(source), scratch)
                downloaded = time.monotonic()
                out = Path(scratch) / "variant.h5"
                subprocess.run(["h5repack", "-S", "PAGE", "-G", str(page_size), str(local), str(out)], check=True)
                written = time.monotonic()
                publish(s3, out, S3Location.parse(f"s3://bench/targets/{src.stem}-h5repack.h5"))
                published = time.monotonic()
            return {"phase_seconds": {"downloaded": round(downloaded - started, 3),
                                      "copy_written": round(written - started, 3),
                                      "published": round(published - started, 3)}}

        tasks = {"h5repack": h5repack_task, "layoutlab": layoutlab_task}
        seconds = {tool: [] for tool in tasks}
        # Where the task's CPU goes: its own (this process's threads, its children: the repack's worker
        # and check, h5repack) and the local cloud's, which serves the download and the upload on the same
        # cores here (S3 does not, in AWS). What neither used of the cores during the task was idle.
        cpu = {tool: {"task": [], "cloud": [], "idle": []} for tool in tasks}
        phases = {tool: [] for tool in tasks}  # where each task's time went (ours records it itself)
        for repetition in range(repeat):
            names = list(tasks)  # (rotated: each task runs first, second... in turn)
            for tool in names[repetition % len(names):] + names[:repetition % len(names)]:
                os.sync()
                task_before, cloud_before = _own_cpu(), _process_tree_cpu(cloud.pid)
                started = time.perf_counter()
                done = tasks[tool]()
                seconds[tool].append(time.perf_counter() - started)
                phases[tool].append(done["phase_seconds"])
                task_cpu, cloud_cpu = _own_cpu() - task_before, _process_tree_cpu(cloud.pid) - cloud_before
                cpu[tool]["task"].append(task_cpu)
                cpu[tool]["cloud"].append(cloud_cpu)
                cpu[tool]["idle"].append(len(os.sched_getaffinity(0)) * seconds[tool][-1] - task_cpu - cloud_cpu)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        cloud.stop()
    medians = {tool: statistics.median(values) for tool, values in seconds.items()}
    cpu_medians = {tool: {part: statistics.median(values) for part, values in parts.items()} for tool, parts in cpu.items()}
    return {"input": name, "input_bytes": src.stat().st_size, "page_size": page_size, "repeat": repeat,
            "seconds": seconds, "median_seconds": medians, "time_ratio": medians["layoutlab"] / medians["h5repack"],
            # each run of ours over h5repack's of the same repetition (the load drifts between repetitions)
            "pairwise_ratio": {tool: statistics.median(ours / theirs for ours, theirs in zip(values, seconds["h5repack"]))
                               for tool, values in seconds.items() if tool != "h5repack"},
            "cpu_seconds": cpu, "median_cpu_seconds": cpu_medians, "phase_seconds": phases}


def _own_cpu() -> float:
    """User + system seconds of this process (every thread) and of the children it has waited for."""
    import resource

    return sum(usage.ru_utime + usage.ru_stime
               for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


def _process_tree_cpu(pid: int) -> float:
    """User + system seconds of ``pid`` and the processes below it (live ones, and the exited ones they
    waited for), by psutil; 0 once ``pid`` is gone."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # (ended meanwhile)
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def memory_check(workdir: Path, gigabytes: float, page_size: int, keep: bool, repeat: int) -> dict:
    """Peak RSS of repacking a GEOS-like input of ``gigabytes`` (bound: 1 GB), and the time ratio
    against h5repack at that size, where the fixed start-up cost weighs less than at 1 GB."""
    steps = int(gigabytes * 1e9 / (GEOS_STEP_BYTES * 0.66)) + 1  # zlib+shuffle keeps ~2/3 of the bytes
    src = ensure_geos(workdir / f"geos-{gigabytes:g}gb.nc", steps)
    timing = compare(f"GEOS-like NetCDF-4, {gigabytes:g} GB", src, workdir, page_size, repeat, tools=("layoutlab",))
    row = {"input_bytes": src.stat().st_size, "seconds": timing["layoutlab"]["median_seconds"],
           "peak_rss_bytes": timing["layoutlab"]["peak_rss_bytes"], "limit_bytes": 1 << 30,
           "ok": timing["layoutlab"]["peak_rss_bytes"] < (1 << 30), "timing": timing}
    if not keep:
        src.unlink(missing_ok=True)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="/tmp/hdf5/bench", help="where inputs and outputs go (default: %(default)s)")
    parser.add_argument("--geos-steps", type=int, default=430,
                        help="full-resolution time steps of the GEOS-like input (430 ~ 1 GB; default: %(default)s)")
    parser.add_argument("--atl03-photons", type=int, default=6_800_000,
                        help="photons per beam of the ATL03-like input (6.8M ~ 1 GB; default: %(default)s)")
    parser.add_argument("--page-size", default="8MiB", help="page size for both tools (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool per input (default: %(default)s)")
    parser.add_argument("--memory-check-gb", type=float, default=0,
                        help="also repack a GEOS-like input of this many GB: peak RSS must stay < 1 GB, and the "
                             "time ratio at that size (--repeat runs each; 0: skip)")
    parser.add_argument("--keep", action="store_true", help="keep generated inputs for the next run")
    parser.add_argument("--pipeline", action="store_true",
                        help="also time the pipeline's convert task (download, verified repack, publish) against "
                             "the same task with h5repack, through the local cloud")
    parser.add_argument("--floor", action="store_true",
                        help="also time the verified copy's floor in the same rotation (benchmarks/inflate_floor.py: "
                             "stock zlib inflating every stored chunk, one process per core) and report the verified "
                             "CLI over max(h5repack, that)")
    parser.add_argument("--json", default="benchmarks/results/bench_repack.json", help="where to write the results")
    args = parser.parse_args(argv)
    if not shutil.which("h5repack"):
        parser.error("h5repack not found: install Debian's hdf5-tools (make sysdeps)")
    from bench_support import fresh_bytecode

    fresh_bytecode()  # (the commands timed start from the modules as they are now, not the compiler)
    page_size = parse_size(args.page_size)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    env_load = os.getloadavg()
    inputs = [
        ("GEOS-like NetCDF-4", ensure_geos(workdir / f"geos-{args.geos_steps}.nc", args.geos_steps)),
        ("ATL03-like HDF5", ensure_atl03(workdir / f"atl03-{args.atl03_photons}.h5", args.atl03_photons)),
    ]
    rows = [compare(name, path, workdir, page_size, args.repeat, floor=args.floor) for name, path in inputs]
    pipeline = [pipeline_compare(name, path, page_size, args.repeat) for name, path in inputs] if args.pipeline else []
    memory = (memory_check(workdir, args.memory_check_gb, page_size, args.keep, args.repeat)
              if args.memory_check_gb else None)
    if not args.keep:
        for _, path in inputs:
            path.unlink(missing_ok=True)
    h5repack_version = subprocess.run(["h5repack", "--version"], capture_output=True, text=True).stdout.strip()
    import h5py

    report = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}",
        "h5py": h5py.version.version, "hdf5_in_h5py": h5py.version.hdf5_version, "h5repack": h5repack_version,
        "c_loops": fastcopy.available(), "c_loops_unavailable_reason": fastcopy.unavailable_reason(),
        "load_average_start": env_load, "load_average_end": os.getloadavg(),
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "rows": rows, "pipeline_rows": pipeline, "memory_check": memory,
    }
    print(f"\n{report['date']}  {report['machine']}  load {env_load[0]:.2f} -> {report['load_average_end'][0]:.2f}"
          f"  C loops: {'yes' if report['c_loops'] else 'no (' + str(report['c_loops_unavailable_reason']) + ')'}")
    print(f"{'input':<22}{'size':>9}  {'tool':<22}{'time s':>8}{'ratio':>7}{'best':>6}{'CPU':>6}{'overhead':>10}{'peak RSS':>10}")
    for row in rows:
        for tool in [t for t in row if t in TOOLS or t == "h5repack"]:
            r = row[tool]
            ratios = (f"{r['time_ratio']:>7.2f}{r['best_time_ratio']:>6.2f}{r['cpu_time_ratio']:>6.2f}"
                      if tool != "h5repack" else " " * 19)
            print(f"{row['input']:<22}{row['input_bytes'] / 1e9:>7.2f}GB  {tool:<22}{r['median_seconds']:>8.2f}"
                  f"{ratios}{r['size_overhead']:>+10.2%}{r['peak_rss_bytes'] / 1e6:>8.0f}MB")
        if "floor_seconds" in row:
            r = row["inflate_floor"]
            print(f"{row['input']:<22}  inflate floor {r['median_seconds']:.2f} s (inflating {r['median_inflate_seconds']:.2f} s); "
                  f"floor = max(h5repack, that) {row['floor_seconds']:.2f} s; verified over the floor "
                  f"{row['verified_over_floor']:.2f}x")
    for row in pipeline:
        print(f"pipeline convert task, {row['input']}: download + repack --verify + publish "
              f"{row['median_seconds']['layoutlab']:.2f} s, with h5repack {row['median_seconds']['h5repack']:.2f} s, "
              f"ratio {row['time_ratio']:.2f} (median of {row['repeat']}); pairwise: "
              + ", ".join(f"{tool} {ratio:.3f}x" for tool, ratio in row["pairwise_ratio"].items()))
        for tool, runs in row["phase_seconds"].items():
            print(f"  {tool} phases (s from the task's start, median): " + ", ".join(
                f"{phase} {statistics.median(run[phase] for run in runs):.2f}" for phase in runs[0]
                if all(phase in run for run in runs)))
        for tool in row["median_cpu_seconds"]:
            part = row["median_cpu_seconds"][tool]
            print(f"  {tool:<10} CPU s: the task {part['task']:.2f}, the local cloud {part['cloud']:.2f}; "
                  f"cores left idle {part['idle']:.2f} core-s")
    if memory:
        timing = memory["timing"]
        print(f"memory check: {memory['input_bytes'] / 1e9:.2f} GB input, peak RSS {memory['peak_rss_bytes'] / 1e6:.0f} MB "
              f"({'OK' if memory['ok'] else 'OVER'} the 1 GB bound), {memory['seconds']:.1f} s; h5repack "
              f"{timing['h5repack']['median_seconds']:.1f} s, ratio {timing['time_ratio']:.2f} "
              f"(median of {timing['repeat']})")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
