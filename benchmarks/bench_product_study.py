"""The default plan's study of real products in the local cloud, one product after the other (issue 34).

Each FILE is dropped into a local cloud of its own (started by this script: the emulated S3 latency and
bandwidth of `layoutlab local up`) with the plan layoutlab runs when an upload names none
(``layoutlab/pipeline/default_plan.json``: every variant kind, every reader, both platforms, 3 to 7
repetitions), and the study runs to its end: plan -> convert -> every bench case -> summarize. Per product
it records what the docs' table gives: status, role, the variables read, the pattern families, the
variants, the cases run, the values check, the recommendation (its choice per pattern) and the study's
time (the RUN item's started -> finished), with the machine's load before and after.

    python benchmarks/bench_product_study.py /path/to/shared/corpus/products/TEMPO_*.nc4 \
        --json benchmarks/results/bench_product_study.json

A product that does not end SUCCEEDED is reported as such (its FAILURE items' reasons) and the script
goes on to the next; the exit status is 1 if any did not succeed.

    python benchmarks/bench_product_study.py --table benchmarks/results/bench_product_study.json

prints the docs' table (docs/pipeline-and-plans.md) from such a JSON file, one row per study.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layoutlab.local.cloud import start_local_cloud  # noqa: E402
from layoutlab.local.pipeline import LocalPipeline  # noqa: E402
from layoutlab.pipeline import plan as plans  # noqa: E402
from layoutlab.report.study import study_row  # noqa: E402
from layoutlab.results.record import host_info  # noqa: E402


def study(path: Path, workdir: Path, timeout: float) -> dict:
    plan = plans.default_plan()
    cloud = start_local_cloud(log_path=workdir / f"{path.name}.local-cloud.log")
    started = time.perf_counter()
    try:
        pipeline = LocalPipeline(cloud)
        pipeline.setup(s3_events=True)
        pipeline.put_plan(plan["name"], plan)
        outcome = pipeline.ingested(pipeline.upload(path, plan=plan["name"]))
        if outcome["status"] != "started":
            return {"file": path.name, "status": outcome["status"], "reason": outcome.get("reason")}
        pipeline.wait([outcome], timeout=timeout)
        items = pipeline.store.items(dataset=outcome["dataset_id"])
        return {**study_row(items, path.name), "wall_s": round(time.perf_counter() - started, 1)}
    finally:
        cloud.stop()


def _short(name: str, width: int = 40) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


def table(rows: list[dict]) -> str:
    """The docs' table: one markdown row per study."""
    lines = ["| file | role | variables read | families | variants measured | cases ok | values | choice "
             "(lambda / fargate) | study time | load before -> after |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        names = sorted({v for joined in (row.get("variables") or {}).values() for v in joined.split(", ")})
        choice = row.get("choice") or {}
        lambdas = [c for p, c in choice.items() if "lambda" in p]
        fargates = [c for p, c in choice.items() if "fargate" in p]
        seconds = row.get("seconds")
        lines.append("| " + " | ".join([
            f"`{_short(row['file'])}`", str(row.get("role")), ", ".join(f"`{n}`" for n in names),
            ", ".join(f for f in row.get("families", []) if f != "open-list"),
            f"{len(row.get('variants', []))}: " + ", ".join(row.get("variants", [])),
            f"{row.get('cases_ok')} of {row.get('cases')}" + (f" ({len(row['failures'])} FAILURE)"
                                                               if row.get("failures") else ""),
            str(row.get("values_check") or "").split(" (not ranked)")[0],
            f"{'/'.join(lambdas) or '-'} / {'/'.join(fargates) or '-'}",
            f"{row.get('status')} in {seconds / 60:.1f} min" if seconds else str(row.get("status")),
            f"{(row.get('load_before') or ['?'])[0]} -> {((row.get('host') or {}).get('loadavg') or ['?'])[0]}",
        ]) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=Path, help="HDF5 / NetCDF-4 products to study")
    parser.add_argument("--table", type=Path, help="print the docs' table from this JSON file of studies, and stop")
    parser.add_argument("--json", type=Path, help="append each product's row to this JSON file (a list)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for one study (default 3600)")
    args = parser.parse_args(argv)
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return 0
    if not args.files:
        parser.error("name the products to study (or --table FILE)")
    missing = [str(path) for path in args.files if not path.is_file()]
    if missing:  # before any local cloud starts: a study of the others would run for an hour first
        parser.error(f"no such file: {', '.join(missing)}")
    rows = json.loads(args.json.read_text()) if args.json and args.json.exists() else []
    failed = 0
    with tempfile.TemporaryDirectory(prefix="layoutlab-study-") as tmp:
        for path in args.files:
            before = host_info()["loadavg"]
            row = study(path, Path(tmp), args.timeout)
            row.update({"load_before": before, "host": host_info(),
                        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                        "command": " ".join([os.path.basename(sys.argv[0]), str(path)])})
            failed += row.get("status") != "SUCCEEDED"
            print(json.dumps(row, default=str), flush=True)
            rows.append(row)
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
