"""``layoutlab demo``: the whole event-driven pipeline on this machine, no AWS account needed.

Starts the local cloud (moto on 127.0.0.1 + the S3 latency proxy), creates the
buckets, tables and the state machine from the same ASL the CDK app deploys,
uploads each file under ``incoming/``, whose S3 event reaches the ingest function
through the EventBridge rule as in AWS, lets moto's Step Functions run the pipeline (each Lambda
and Fargate task a fresh single-core process with its platform's memory
limit), shows progress, prints the results and writes a report. Everything it
starts it stops; the results are kept on disk for ``layoutlab results``.
"""

from __future__ import annotations

import argparse
import json
import time
from importlib import resources
from pathlib import Path

from layoutlab.errors import UserError

DEFAULT_GEOS_SHAPE = "240,91,144"
# The console output fits a terminal this wide; what is longer (a failure's whole reason) is in report.md.
CONSOLE_COLUMNS = 160
# 400,000 photons a beam: a ~57 MB granule, past s3fs's 50 MiB default block, where Lopez et al.'s
# effect (original + default reader vs paged + aligned reader) shows (docs/benchmarks.md)
DEFAULT_PHOTONS = 400_000


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the whole pipeline locally (local S3, DynamoDB, Step Functions) on samples or your files",
        description=(
            "Run the event-driven pipeline on the local cloud: upload each file under incoming/ (its S3 event "
            "reaches ingest through the EventBridge rule, as in AWS), run the state machine (convert variants, benchmark every case cold "
            "on one core, summarize), print the results and write a report. With no FILES it generates a "
            "GEOS-like NetCDF-4 file and an ICESat-2 ATL03-like granule. No AWS account, no Docker, no network "
            "beyond 127.0.0.1. Results are kept on disk for 'layoutlab results' (see --reset)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            "  layoutlab demo                                  # samples, the built-in demo plan\n"
            "  layoutlab demo my_granule.h5 --repetitions 5    # your file\n"
            "  layoutlab demo --plan my_plan.json --latency-ms 60 --bandwidth-mbps 400\n"
            "  layoutlab results --pattern map-timestep        # afterwards\n"
        ),
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="HDF5 / NetCDF-4 files (default: generated samples)")
    parser.add_argument("--workdir", default="demo-output", help="where samples and the report go (default: %(default)s)")
    parser.add_argument("--plan", help="a plan JSON file (default: the built-in demo plan, layoutlab/pipeline/demo_plan.json)")
    parser.add_argument("--repetitions", type=int, help="override the plan's repetitions")
    parser.add_argument("--geos-shape", default=DEFAULT_GEOS_SHAPE, help="T,LAT,LON of the GEOS-like sample (default: %(default)s)")
    parser.add_argument("--photons", type=int, default=DEFAULT_PHOTONS, help="photons per beam of the ATL03-like sample (default: %(default)s)")
    parser.add_argument("--latency-ms", type=float, help="emulated S3 first-byte latency (default: the local cloud's)")
    parser.add_argument("--bandwidth-mbps", type=float, help="emulated S3 bandwidth per connection (default: the local cloud's)")
    parser.add_argument("--timeout", type=float, default=3600, help="give up waiting after this many seconds (default: %(default)s)")
    parser.add_argument("--reset", action="store_true", help="forget the results kept from earlier runs first")
    parser.set_defaults(func=run)


def load_plan(path: str | None, repetitions: int | None) -> dict:
    from layoutlab.pipeline.plan import PlanError, merge_plan

    if path:
        try:
            plan = json.loads(Path(path).read_text())
        except OSError as error:
            raise UserError(f"{path}: cannot read the plan ({error.strerror})") from None
        except ValueError as error:
            raise UserError(f"{path}: not valid JSON ({error})") from None
    else:
        plan = json.loads(resources.files("layoutlab.pipeline").joinpath("demo_plan.json").read_text())
    if repetitions is not None:
        plan["repetitions"] = repetitions
        # (the first round; a plan's cap on further rounds never falls below it)
        plan["max_repetitions"] = max(repetitions, plan.get("max_repetitions", repetitions))
    try:
        merge_plan(plan)
    except PlanError as error:
        raise UserError(str(error)) from None
    return plan


def make_samples(workdir: Path, geos_shape: str, photons: int) -> list[Path]:
    from tqdm import tqdm

    from layoutlab.samples import atl03, geos

    shape = geos.parse_shape(geos_shape)
    paths = []
    with tqdm(total=shape[0], desc="sample GEOS-like", unit="step", leave=False) as bar:
        paths.append(geos.write_geos(workdir / "geos-sample.nc", shape=shape, progress=bar.update))
    paths.append(atl03.write_atl03(workdir / "atl03-sample.h5", photons=photons))
    return paths


def run(args) -> int:
    from tqdm import tqdm

    from layoutlab.local.cloud import start_local_cloud
    from layoutlab.local.pipeline import LocalPipeline, snapshot_path
    from layoutlab.report import tables

    started = time.perf_counter()
    workdir = Path(args.workdir)
    files = [Path(f) for f in args.files]
    for f in files:
        if not f.is_file():
            raise UserError(f"{f}: no such file")
    plan = load_plan(args.plan, args.repetitions)
    workdir.mkdir(parents=True, exist_ok=True)
    if args.reset:
        snapshot_path().unlink(missing_ok=True)
    if not files:
        print(f"generating samples in {workdir}/ (GEOS-like {args.geos_shape}, ATL03-like {args.photons} photons/beam)")
        files = make_samples(workdir, args.geos_shape, args.photons)

    cloud_options = {k: v for k, v in (("latency_ms", args.latency_ms), ("bandwidth_mbps", args.bandwidth_mbps)) if v is not None}
    cloud = start_local_cloud(log_path=workdir / "local-cloud.log", **cloud_options)
    try:
        pipeline = LocalPipeline(cloud)
        pipeline.setup(s3_events=True)
        kept = pipeline.load_snapshot()
        print(f"local cloud up: moto {cloud.moto_endpoint}, S3 through the proxy at {cloud.s3_endpoint} "
              f"({cloud.latency_ms:g} ms first byte, {cloud.bandwidth_mbps:g} Mbit/s); {kept} kept items loaded")
        plan_name = plan.get("name") or "demo"
        pipeline.put_plan(plan_name, plan)
        outcomes = []
        # Each upload reaches ingest as in AWS: S3 -> EventBridge rule -> ingest (local/s3_events.py).
        uploads = [pipeline.upload(path, plan=plan_name) for path in files]
        for event in uploads:
            outcome = pipeline.ingested(event)
            outcomes.append(outcome)
            print(fit(f"  {outcome['key']}: {outcome['status']}"
                      + (f" as {outcome['dataset_id']}" if outcome.get("dataset_id") else "")
                      + (f" ({outcome['reason']})" if outcome.get("reason") else "")))
        running = [o for o in outcomes if o["status"] == "started"]
        with tqdm(desc="benchmark cases", unit="case", total=0) as bar:
            def show(done, planned):
                bar.total = max(planned, bar.total or 0)
                bar.n = done
                bar.refresh()

            final = pipeline.wait(running, timeout=args.timeout, on_progress=show)
        failed = report(pipeline, running, final, workdir, tables)
        items = [i for o in running for i in pipeline.store.items(dataset=o["dataset_id"])]
        path = pipeline.save_snapshot()
    finally:
        cloud.stop()
    page = html_report(items, workdir)
    print(f"\nresults kept in {path} (query with 'layoutlab results'; 'layoutlab demo --reset' forgets them)")
    print(f"report: {workdir / 'report.md'}" + (f", {page}" if page else "")
          + f"; done in {time.perf_counter() - started:.0f} s")
    rejected = [o for o in outcomes if o["status"] == "rejected"]
    return 1 if failed or rejected else 0


def fit(line: str) -> str:
    """One console line of at most CONSOLE_COLUMNS characters: a longer one is cut, pointing to the report."""
    if len(line) <= CONSOLE_COLUMNS:
        return line
    more = " ... (whole line in report.md)"
    return line[: CONSOLE_COLUMNS - len(more)] + more


def wrap(text: str) -> str:
    """A paragraph wrapped at CONSOLE_COLUMNS, its continuation lines indented like its first."""
    import textwrap

    indent = " " * (len(text) - len(text.lstrip()) + 2)
    return textwrap.fill(text, width=CONSOLE_COLUMNS, subsequent_indent=indent, break_on_hyphens=False)


def html_report(items: list[dict], workdir: Path) -> Path | None:
    """The HTML page of this run's datasets (``layoutlab report``'s), or None when there is nothing to show."""
    try:
        from layoutlab.report.html import write_report
    except ImportError as error:  # matplotlib comes with the 'report' extra
        print(f"no HTML report: {error} (install layoutlab[report])")
        return None
    if not any(i.get("kind") == "RESULT" for i in items):
        return None
    print("writing the HTML report ...")
    written = write_report(items, workdir / "report.html", source="this demo run", command="layoutlab demo")
    return written.html


def report(pipeline, running, final, workdir: Path, tables) -> int:
    lines = ["# layoutlab local run", ""]
    failed = 0
    for outcome in running:
        dataset_id = outcome["dataset_id"]
        status = final.get(dataset_id, "UNKNOWN")
        items = pipeline.store.items(dataset=dataset_id)
        results = [i for i in items if i["kind"] == "RESULT"]
        failures = [i for i in items if i["kind"] == "FAILURE"]
        summary = next((i for i in items if i["kind"] == "SUMMARY"), None)
        variants = [i for i in items if i["kind"] == "VARIANT"]
        print(f"\n== {outcome['key']} ({dataset_id}): {status}, {len(results)} results, {len(failures)} failures")
        lines += [f"## {outcome['key']}", "", f"dataset `{dataset_id}`: {status}, {len(results)} results, "
                  f"{len(failures)} failures", ""]
        if status != "SUCCEEDED":
            failed += 1
        for failure in failures[:10]:
            print(fit(f"  FAILURE {failure['stage']} {failure.get('detail')}: {failure['reason']}"))
            lines.append(f"- FAILURE {failure['stage']} `{failure.get('detail')}`: {failure['reason']}")
        if summary and summary.get("recommendation"):
            print(wrap(f"  recommendation: {summary['recommendation']}"))
            lines += [f"**Recommendation:** {summary['recommendation']}", ""]
        lines += ["", "| variant | status | size MB | overhead | convert s |", "|---|---|---|---|---|"]
        for v in variants:
            if v.get("status") == "SKIPPED":  # (e.g. paging that no page size keeps within the size budget)
                lines.append(f"| {v['variant']} | skipped: {v.get('reason', '')} | | | |")
                continue
            overhead = "" if v.get("size_overhead") is None else f"{v['size_overhead']:+.1%}"
            seconds = "" if v.get("convert_s") is None else f"{v['convert_s']:.1f}"
            lines.append(f"| {v['variant']} | {(v.get('status') or '').lower()} | {(v.get('size_bytes') or 0) / 1e6:.1f} "
                         f"| {overhead} | {seconds} |")
        for platform in sorted({r["platform"] for r in results}):
            header, rows = tables.median_table(results, platform)
            print(f"\n{platform}: median wall time (s) of {len(results)} cold single-core cases")
            print(tables.render(header, rows))
            lines += ["", f"### {platform}", "", tables.render(header, rows, markdown=True)]
            header, rows = tables.requests_table(results, platform)
            lines += ["", tables.render(header, rows, markdown=True)]
        if summary:
            print()
            for line in tables.summary_lines(summary):
                print(wrap("  " + line))
            lines += ["", "```"] + tables.summary_lines(summary) + ["```"]
    (workdir / "report.md").write_text("\n".join(lines) + "\n")
    return failed
