"""``layoutlab estimate``: wall time and $ of running the whole pipeline in AWS for a dataset."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DESCRIPTION = """\
With FILE (a path or s3:// URL): what the plan's study of that file takes, from its structure
model (metadata only: nothing converted): the variants and benchmark cases the plan step would
make, and each variant's conversion time on one core and its storage, from the measured rates
(rechunk: benchmarks/results/rechunk*.json, as below; paged repack: bench_repack*.json).

With --shape: estimate what the pipeline would take in AWS for a gridded dataset of --shape: rechunk
it to every chunk shape of --grid (fanned out into work units like the pipeline does),
then benchmark every shape on the four grid patterns, at --concurrency parallel tasks.

Nothing is assumed: the rechunk cost per MiB and per chunk is fitted to the rechunks
measured by benchmarks/bench_rechunk.py (benchmarks/results/rechunk*.json) and kept
results; the read time of each case comes from the time model (report/model.py) fitted
on kept benchmark results (--results, default: what the last 'layoutlab demo' kept) and
asked about the bigger shape. Prices: report/prices/aws-us-east-1-2026-11.json (dated,
with sources) or --prices. Compares with Nguyen et al.'s single-node rechunk times."""

EPILOG = """\
examples:
  layoutlab estimate granule.h5
  layoutlab estimate granule.h5 --plan demo --json
  layoutlab estimate --shape 5136,721,1152 --dtype f4 --grid seed
  layoutlab estimate --shape 5136,721,1152 --platform fargate-1-4096 --concurrency 100 --json
  layoutlab estimate --shape 240,181,288 --results /path/to/results.json
  layoutlab estimate --product MERRA2 --granules 100000 --granule-size 400MiB
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "estimate", help="wall time and $ of the whole pipeline in AWS for a dataset, from measured rates",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", nargs="?", metavar="FILE",
                        help="any HDF5 / NetCDF-4 file (path or s3://): estimate its study from its structure")
    parser.add_argument("--plan", metavar="NAME", default="default",
                        help="with FILE: 'default', 'demo', or a plan's JSON file (as 'layoutlab plan')")
    parser.add_argument("--shape", help="time,lat,lon of the gridded variable (or 'full' = 5136,721,1152)")
    parser.add_argument("--product", help="instead of --shape: a product's archive, from its measured granules "
                                          "(with --granules and --granule-size; as 'layoutlab product estimate')")
    parser.add_argument("--granules", type=int, help="with --product: granules in the archive")
    parser.add_argument("--granule-size", help="with --product: bytes per granule (e.g. 120MiB)")
    parser.add_argument("--dtype", default="f4", help="numpy dtype of the variable (default: f4)")
    parser.add_argument("--grid", default="seed", choices=["seed", "seed-proportional"],
                        help="chunk shapes: Nguyen et al.'s seed grid, clipped to the shape (default) or scaled")
    parser.add_argument("--platform", default="lambda-1769",
                        help="where benchmark cases run: lambda-<MB> or fargate-<vcpu>-<MB> (default: lambda-1769)")
    parser.add_argument("--concurrency", type=int, default=1000,
                        help="tasks running at once (default 1000: AWS's default Lambda concurrency per region; "
                             "the pipeline's Map MaxConcurrency must be raised to match, LAYOUTLAB_MAX_CONCURRENCY)")
    parser.add_argument("--repetitions", type=int, default=3, help="repetitions per case (default: 3, as the default plan)")
    parser.add_argument("--results", type=Path,
                        help="kept results: a JSON list of RESULT and VARIANT items, as the demo keeps them "
                             "(results.json) or 'layoutlab results --dataset ID --format json' prints them "
                             "(default: the demo's)")
    parser.add_argument("--rechunk-results", type=Path, nargs="*",
                        help=f"bench_rechunk.py outputs (default: {'benchmarks/results/rechunk*.json'})")
    parser.add_argument("--prices", type=Path, help="price file (default: the dated us-east-1 file)")
    parser.add_argument("--json", action="store_true", help="print the estimate as JSON")
    parser.set_defaults(func=run)


def _shape(text: str) -> tuple[int, int, int]:
    from layoutlab.errors import UserError
    from layoutlab.samples.geos import parse_shape

    try:
        return parse_shape(text)
    except ValueError as error:
        raise UserError(f"--shape: {error}") from None


def _itemsize(text: str) -> int:
    import numpy as np

    from layoutlab.errors import UserError

    try:
        return np.dtype(text).itemsize
    except TypeError:
        raise UserError(f"--dtype: {text!r} is not a numpy dtype (e.g. f4, f8, i2)") from None


def load_kept(path: Path | None) -> tuple[list[dict], dict, Path]:
    """The grid dataset among kept results: its RESULT records and VARIANT items."""
    from layoutlab.errors import BadInputFile, UserError
    from layoutlab.local.pipeline import snapshot_path
    from layoutlab.report.model import dataset_shape

    path = path or snapshot_path()
    if not path.exists():
        raise BadInputFile(path, "no kept results here: run 'layoutlab demo' (or pass --results FILE)")
    try:
        items = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise BadInputFile(path, f"is not JSON: {error}") from None
    grid_datasets = sorted({i["dataset"] for i in items if i.get("kind") == "RESULT"
                            and i.get("pattern") == "timeseries-point" and i.get("checksum_ok")})
    if not grid_datasets:
        raise BadInputFile(path, "holds no gridded results (timeseries-point): run 'layoutlab demo' first")
    # the dataset with the most Zarr variants measured teaches the model the most
    def zarr_count(d):
        return sum(1 for i in items if i.get("dataset") == d and i.get("kind") == "VARIANT"
                   and i.get("format") == "zarr")
    dataset = max(grid_datasets, key=zarr_count)
    records = [i for i in items if i.get("dataset") == dataset and i.get("kind") == "RESULT"]
    variants = {i["variant"]: i for i in items if i.get("dataset") == dataset and i.get("kind") == "VARIANT"}
    run = next((i for i in items if i.get("dataset") == dataset and i.get("kind") == "RUN"), None)
    shape = dataset_shape(records, variants, run)
    if shape is None:
        raise UserError(f"{path}: cannot tell the grid shape of {dataset}")
    for item in variants.values():
        item.setdefault("grid_shape", list(shape))
    return records, variants, path


def run(args) -> int:
    from layoutlab.convert.rechunk_plan import seed_grid
    from layoutlab.errors import UserError
    from layoutlab.report.cost import load_prices
    from layoutlab.report.estimate import REPO_RESULTS, estimate_pipeline, fit_rechunk_rate, rechunk_observations

    if args.product:
        if not args.granules or not args.granule_size:
            raise UserError("--product needs --granules and --granule-size")
        from layoutlab.commands.product import _store, print_estimate

        product_args = argparse.Namespace(endpoint=None, aws=False, table=None, name=args.product,
                                          granules=args.granules, granule_size=args.granule_size,
                                          prices=args.prices, json=args.json)
        return print_estimate(_store(product_args), product_args)
    if args.file:
        if args.shape:
            raise UserError("give FILE or --shape, not both")
        return _estimate_file(args)
    if not args.shape:
        raise UserError("FILE (any file), --shape (a gridded dataset) or --product (a product's archive)")
    shape = _shape(args.shape)
    itemsize = _itemsize(args.dtype)
    if args.concurrency < 1:
        raise UserError("--concurrency must be at least 1")
    from layoutlab.platforms import platform_profile

    platform_profile(args.platform)  # a clear error for a bad name, before any work
    records, variants, results_path = load_kept(args.results)
    rechunk_files = args.rechunk_results if args.rechunk_results is not None else sorted(REPO_RESULTS.glob("rechunk*.json"))
    for path in rechunk_files:
        if not path.exists():
            raise UserError(f"{path}: no such file (bench_rechunk.py output)")
    rate = fit_rechunk_rate(rechunk_observations(rechunk_files, list(variants.values())))
    grid = seed_grid(shape, mode="clip" if args.grid == "seed" else "proportional")
    print(f"estimating {len(grid)} chunk shapes of {'x'.join(map(str, shape))} ...", file=sys.stderr)
    estimate = estimate_pipeline(shape, itemsize, grid, platform=args.platform, concurrency=args.concurrency,
                                 records=records, variants=variants, rate=rate,
                                 prices=load_prices(args.prices), repetitions=args.repetitions)
    estimate["results_file"] = str(results_path)
    if args.json:
        print(json.dumps(estimate, indent=2, default=str))
    else:
        print(render(estimate))
    return 0


def _estimate_file(args) -> int:
    from layoutlab.commands.plan import _load_plan
    from layoutlab.errors import UserError
    from layoutlab.pipeline.study_estimate import estimate_file
    from layoutlab.report.estimate import (REPO_RESULTS, fit_rechunk_rate, rechunk_observations, repack_rate,
                                           zarr_compression)
    from layoutlab.storage import is_s3_url

    plan = _load_plan(args.plan)
    rechunk_files = args.rechunk_results if args.rechunk_results is not None else sorted(REPO_RESULTS.glob("rechunk*.json"))
    for path in rechunk_files:
        if not path.exists():
            raise UserError(f"{path}: no such file (bench_rechunk.py output)")
    if is_s3_url(args.file):
        from layoutlab.storage import s3fs_filesystem

        size = int(s3fs_filesystem(for_url=args.file).size(args.file))
    elif not Path(args.file).is_file():
        raise UserError(f"{args.file}: no such file")
    else:
        size = Path(args.file).stat().st_size
    estimate = estimate_file(args.file, plan, rechunk=fit_rechunk_rate(rechunk_observations(rechunk_files)),
                             repack=repack_rate(sorted(REPO_RESULTS.glob("bench_repack*.json"))),
                             compression=zarr_compression(rechunk_files), input_bytes=size)
    if args.json:
        print(json.dumps(estimate, indent=2, default=str))
    else:
        print(render_file(estimate))
    return 0


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def _seconds(s: float) -> str:
    return f"{s * 1000:.1f} ms" if s < 1 else _duration(s)


def render_file(e: dict) -> str:
    size_label = _mib
    rates = e["rates"]
    lines = [f"{e['file']}: {e['role']}, {size_label(e['input_bytes'])} stored, {size_label(e['declared_bytes'])} "
             f"declared in its numeric arrays",
             f"study: {len(e['variants'])} variants, {e['cases_first_round']} benchmark cases in the first round, at most "
             f"{e['cases_at_most']} with every repetition round ({e['repetitions']['first']} to "
             f"{e['repetitions']['max']} repetitions)", "",
             f"{'variant':<32} {'convert (1 core)':>17} {'new storage':>11}  how"]
    for v in e["variants"]:
        seconds = "-" if v["convert_s"] is None else _seconds(v["convert_s"])
        stored = "-" if v["stored_bytes"] is None else size_label(v["stored_bytes"])
        lines.append(f"{v['variant']:<32} {seconds:>17} {stored:>11}  {v['how']}")
    lines += ["", f"convert: {_seconds(e['convert_single_core_s'])} on one core, {_seconds(e['convert_longest_s'])} "
                  f"when the variants convert side by side; stored: {size_label(e['stored_bytes'])}",
              f"rates: rechunk {rates['rechunk']['mib_per_s']:.1f} MiB/s + {rates['rechunk']['s_per_chunk'] * 1000:.2f} ms "
              f"per chunk ({rates['rechunk']['observations']} measured rechunks); paged repack "
              f"{1 / rates['repack']['s_per_mib']:.0f} MiB/s, +{rates['repack']['size_overhead']:.1%} size "
              f"(median of {rates['repack']['observations']} measured inputs, bench_repack*.json); Zarr stored at "
              f"{rates['zarr_compression']['ratio']:.2f} of declared ({rates['zarr_compression']['observations']} "
              f"measured copies), or the file's own {e['file_stored_ratio']:.2f} when smaller"]
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def render(e: dict) -> str:
    rate, usd, model = e["rechunk_rate"], e["usd"], e["read_model"]
    timeouts = [v for v in e["variants"] if v.get("over_lambda_timeout")]
    lines = [
        f"dataset {'x'.join(map(str, e['shape']))} x {e['itemsize']} B, {e['grid_shapes']} chunk shapes, "
        f"benchmarks on {e['platform']}, {e['concurrency']} at once",
        "",
        "measured rates",
        f"  rechunk: {rate['mib_per_s']:.1f} MiB/s + {rate['s_per_chunk'] * 1000:.2f} ms per chunk written "
        f"+ {rate['s_per_extra_stage_mib'] * 1000:.1f} ms per MiB through an intermediate "
        f"(fit to {rate['observations']} measured rechunks, median error {rate['median_relative_error']:.0%}; "
        f"one core; from {', '.join(rate['sources'])})",
        f"  reads:   {model['reader']} on {model['platform']}: "
        + ", ".join(f"{k} {v:.3g}" for k, v in model["coef"].items())
        + f" (s per unit; fitted on {'x'.join(map(str, model['measured_shape']))}"
        + (f" behind {model['latency_ms']} ms / {model['bandwidth_mbps']} Mbit/s emulated S3" if model.get("latency_ms") is not None else "")
        + ", held-out error "
        + (f"{model['held_out_by_platform'].get(model['platform'], model['held_out_median_relative_error']):.0%})"
           if model["held_out_median_relative_error"] is not None else "n/a)"),
        f"  storage: compressed to {e['compression_ratio']:.2f} of raw (measured Zarr variants)",
        "",
        "wall time",
        f"  convert:   {_duration(e['convert_wall_s'])} fanned out "
        f"({_duration(e['sum_single_core_convert_s'])} on one core)",
        f"  benchmark: {_duration(e['bench_wall_s'])} ({e['benchmark_cases']} cases)",
        f"  total:     {_duration(e['total_wall_s'])}",
        "",
        f"cost ({e['prices']})",
        f"  convert  Lambda ${usd['convert_lambda']:.2f}  Fargate ${usd['convert_fargate']:.2f}  "
        f"S3 PUT ${usd['convert_s3_put']:.2f}",
        f"  bench    compute ${usd['bench_compute']:.2f}  S3 GET ${usd['bench_s3_get']:.2f}",
        f"  run total ${usd['run_total']:.2f}; storing every variant ${usd['storage_per_month']:.2f} per month",
        "",
        "Nguyen et al. (one node) vs this estimate",
    ]
    for label, n in e["nguyen"].items():
        ours = (f"{_duration(n['ours_single_core_s'])} on one core; {n['ours_fanned_out']}, "
                f"{_duration(n['ours_wall_s'])} wall" if n["ours_single_core_s"] is not None else "not in this grid")
        lines.append(f"  {label:<9}{'x'.join(map(str, n['chunks'])):<13} paper {_duration(n['paper_s']):<9} ours {ours}")
    if timeouts:
        lines.append(f"warning: work units over Lambda's 15-minute limit for "
                     + ", ".join(f"{'x'.join(map(str, v['chunks']))} ({_duration(v['unit_s'])})" for v in timeouts)
                     + ": the pipeline would need smaller units or Fargate for these")
    if e.get("chunks_over_bench_memory"):
        lines.append(f"warning: chunks too big to decode in {e['platform']}'s memory (their cases would fail): "
                     + ", ".join("x".join(map(str, c)) for c in e["chunks_over_bench_memory"]))
    if e.get("recommendation"):
        lines += ["", e["recommendation"]["sentence"]]
    return "\n".join(lines)
