"""``layoutlab repack IN OUT``: paged aggregation and the NSIDC cloud-optimization recipe."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "repack",
        usage=("layoutlab repack IN OUT [options]\n"
               "       layoutlab repack IN... --out-dir DIR [--jobs N] [options]"),
        help="rewrite an HDF5 / NetCDF-4 file with paged aggregation (like h5repack -S PAGE -G N, and more)",
        description=(
            "Repack IN into OUT for cloud access: PAGE file-space strategy with the page size given and "
            "free-space tracking persisted; COMPACT datasets made CONTIGUOUS; unlimited dimensions fixed at "
            "their current size; optionally larger chunks (never larger than a page). Groups, attributes, all "
            "dtypes, fill values, filters and dimension scales are kept, so a NetCDF-4 file stays a NetCDF-4 "
            "file. Chunks whose shape does not change are copied without decoding. OUT is written under a "
            "temporary name and renamed at the end: a failure leaves no OUT behind."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            "  layoutlab repack atl03.h5 atl03-paged.h5                      # 8 MiB pages\n"
            "  layoutlab repack granules/ 'more/*.h5' one.nc --out-dir paged/   # many files, one run\n"
            "  layoutlab repack atl03.h5 atl03-paged.h5 --page-size auto     # the largest page within 5 %\n"
            "  layoutlab repack geos.nc geos-4m.nc --page-size 4MiB --verify\n"
            "  layoutlab repack atl03.h5 out.h5 --target-chunk-bytes 400KB   # 10,000 -> 100,000 photons (f4)\n"
            "  layoutlab repack atl03.h5 out.h5 --chunks gt1l/heights/h_ph=100000 --chunks gt1r/heights/h_ph=100000\n"
            "\n"
            "how: HDF5 copies what does not change (H5Ocopy: stored chunks undecoded, attributes, committed\n"
            "types, links); datasets that must change (COMPACT, unlimited, rechunked, variable-length fill\n"
            "value) are made anew, and every reference is pointed at its target's copy. OUT is compared\n"
            "with IN before it is renamed into place unless --no-verify.\n"
            "--verify also decodes every stored chunk of IN on the other core while OUT is written: a\n"
            "damaged compressed chunk is named (dataset and chunk) and nothing is written.\n"
            "\n"
            "many files: with --out-dir, every IN (a file, a directory: the files directly in it, or a\n"
            "quoted glob pattern) is copied to DIR/its name, up to --jobs at once (default: the cores),\n"
            "in one process that starts once; each file in its own guarded child holding no cloud\n"
            "credentials, which also runs that file's check (unless --no-verify).\n"
            "One line per file (ok / skipped / FAILED and why) in the order given, then a summary line.\n"
            "A file that fails does not stop the others; the exit status is 1 if any failed, else 0.\n"
            "\n"
            "page size auto: a paged file grows (the last pages of metadata and raw data are mostly\n"
            "empty; chunks of about a page or more are rounded up to whole pages): an 8 MiB page adds\n"
            "+42 % to a 30 MB granule. auto predicts the copy's size at every power of two from 4 KiB to\n"
            "8 MiB from the file itself (its metadata and the size of every chunk, packed as HDF5 packs\n"
            "them) and takes the largest page whose overhead (OUT / IN - 1) stays within --size-budget,\n"
            "and that puts the metadata in fewer pages than the regions it lies in now. It prints the\n"
            "choice, then the predicted and the measured overhead. When no page size helps within the\n"
            "budget (a file of 1 MiB or less, metadata already contiguous, no page within budget), OUT is\n"
            "not written, the reason is printed and the exit status is 3. NSIDC's budget for cloud-\n"
            "optimized ICESat-2 products is 5 % (their files grow ~1 %).\n"
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="IN",
                        help="HDF5 or NetCDF-4 file to read (never modified), then OUT, the file to write; with "
                             "--out-dir, one or more inputs: files, directories, glob patterns")
    parser.add_argument("--out-dir", metavar="DIR", default=None,
                        help="write each input's copy to DIR/its file name (created if missing): many files, one run")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="with --out-dir: files repacked at once (default: the cores this process may use)")
    parser.add_argument("--page-size", default="8MiB",
                        help="file-space page size (default: %(default)s; e.g. 4MiB), or auto: the largest page "
                             "within --size-budget, chosen from the file (see below)")
    parser.add_argument("--size-budget", default=None, metavar="PCT",
                        help="how much larger OUT may be than IN: 5%% or 0.05 (default 5%%); auto stays within "
                             "it, an explicit page size is reported against it")
    sizing = parser.add_mutually_exclusive_group()
    sizing.add_argument(
        "--target-chunk-bytes",
        default=None,
        help="grow chunks along their first axis up to this many uncompressed bytes (e.g. 1MiB); "
        "never more than the page size",
    )
    sizing.add_argument(
        "--chunks",
        action="append",
        default=[],
        metavar="VAR=N[,N...]",
        help="explicit chunk shape for one dataset (path inside the file); repeat for several",
    )
    parser.add_argument("--verify", dest="verify", action="store_true", default=True,
                        help="compare OUT with IN: stored chunks as bytes, every value exactly (the default)")
    parser.add_argument("--no-verify", dest="verify", action="store_false", help="skip the comparison")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    # Nothing is left open or unwritten once run() returns: the program may end without
    # the interpreter's teardown (layoutlab.cli.main).
    parser.set_defaults(func=run, exit_without_teardown=True)


def run(args) -> int:
    from layoutlab.errors import UserError

    if args.out_dir is not None:
        return run_many(args)
    if args.jobs is not None:
        raise UserError("--jobs: only with --out-dir (many files)")
    if len(args.paths) != 2:
        raise UserError(f"expected IN OUT (got {len(args.paths)} path(s)); for many files give --out-dir DIR")
    args.input, args.output = args.paths
    return run_one(args)


def _checked_options(args):
    """(page size or None for auto, target chunk bytes, chunks, budget) from the options; ``UserError`` naming
    the wrong one."""
    from layoutlab.convert.page_budget import DEFAULT_BUDGET, is_auto, parse_budget
    from layoutlab.convert.repack_common import parse_chunk_spec, parse_size
    from layoutlab.errors import UserError

    try:
        page_size = None if is_auto(args.page_size) else parse_size(args.page_size, "--page-size")
        target = parse_size(args.target_chunk_bytes, "--target-chunk-bytes") if args.target_chunk_bytes else None
        chunks = dict(parse_chunk_spec(spec) for spec in args.chunks)
        budget = parse_budget(args.size_budget if args.size_budget is not None else DEFAULT_BUDGET, "--size-budget")
    except ValueError as error:
        raise UserError(str(error)) from None
    return page_size, target, chunks, budget


def run_many(args) -> int:
    """``IN... --out-dir DIR``: one line per file in the order given, a summary line; 1 if any file failed."""
    import time
    from pathlib import Path

    from layoutlab.convert.repack_many import default_workers, expand_inputs, output_paths, repack_many
    from layoutlab.errors import UserError

    page_size, target, chunks, budget = _checked_options(args)
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs {args.jobs}: must be at least 1")
    out_dir = Path(args.out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir}: --out-dir exists and is not a directory")
    inputs = expand_inputs(args.paths)
    if not inputs:
        raise UserError(f"{' '.join(args.paths)}: no input file found")
    outputs = output_paths(inputs, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    workers = min(args.jobs or default_workers(), len(inputs))
    options = dict(target_chunk_bytes=target, chunks=chunks, verify=args.verify)
    started = time.perf_counter()
    report = None if args.json else (lambda result: print(result.line(), flush=True))
    results = repack_many(inputs, outputs, page_size, budget, options, workers, report=report)
    failed = sum(r.failed for r in results)
    skipped = sum(r.skipped is not None for r in results)
    seconds = time.perf_counter() - started
    if args.json:
        import json

        print(json.dumps({"files": [r.record() for r in results], "written": len(results) - failed - skipped,
                          "skipped": skipped, "failed": failed, "seconds": round(seconds, 3), "jobs": workers},
                         indent=2))
    else:
        check = "verified" if args.verify else "not verified: --no-verify"
        print(f"repacked {len(results) - failed - skipped} of {len(results)} files into {out_dir} ({check}); "
              f"{skipped} skipped, {failed} failed; {seconds:.2f} s with {workers} jobs")
    return 1 if failed else 0


def run_one(args) -> int:
    # (not repack_hdf5 yet: h5py and numpy cost ~0.15 s, paid only once the options and the input are checked)
    from layoutlab.convert.repack import repack
    from layoutlab.guard import run_guarded  # a damaged file that makes libhdf5 spin or crash: a clean error

    page_size, target, chunks, budget = _checked_options(args)
    auto = page_size is None
    from pathlib import Path

    from layoutlab.convert.repack_common import check_signature, partial_output_remover

    check_signature(args.input)  # not HDF5 at all: one line, before any progress bar is drawn
    choice = None
    if auto:
        from layoutlab.convert.page_budget import choose_page_size

        choice = run_guarded(choose_page_size, args.input, budget, path=args.input, target_chunk_bytes=target)
        if choice.skip:
            if args.json:
                import json

                print(json.dumps({"input": args.input, "output": None, "written": False, **choice.record()}, indent=2))
            else:
                print(f"{args.input}: paging skipped ({args.output} not written): {choice.reason}")
            return 3
        page_size = choice.page_size
        if not args.json:
            print(f"page size {choice.reason}")
    total = Path(args.input).stat().st_size
    options = dict(page_size=page_size, target_chunk_bytes=target, chunks=chunks, verify=args.verify,
                   path=args.input, cleanup=partial_output_remover(args.output))
    if not sys.stderr.isatty():  # no bar in logs and CI (and no tqdm import: ~40 ms of start-up)
        summary = run_guarded(repack, args.input, args.output, **options)
    else:
        from tqdm import tqdm

        with tqdm(total=total, unit="B", unit_scale=True, desc="repack", leave=False, dynamic_ncols=True) as bar:
            summary = run_guarded(repack, args.input, args.output, progress=bar.update, **options)
    within = summary.size_overhead <= budget
    if args.json:
        import json

        paging = choice.record() if choice else {"page_size": page_size, "page_size_choice": "--page-size",
                                                 "size_budget": budget}
        print(json.dumps({**summary.to_dict(), **paging, "within_budget": within}, indent=2))
        return 0
    print(f"wrote {summary.output}: {summary.output_bytes / 1e6:.1f} MB from {summary.input_bytes / 1e6:.1f} MB "
          f"({summary.size_overhead:+.1%}) in {summary.seconds:.2f} s, {summary.page_size // 1024} KiB pages")
    verdict = "within" if within else "OVER"
    if choice:
        print(f"  size: predicted {choice.predicted_overhead:+.1%}, measured {summary.size_overhead:+.1%} "
              f"({verdict} the {budget:.0%} budget)")
    elif not within:
        print(f"  size: {summary.size_overhead:+.1%} is OVER the {budget:.0%} budget; --page-size auto picks "
              "the largest page within it")
    print(f"  {summary.datasets} datasets, {summary.groups} groups, {summary.attributes} attributes; "
          f"{summary.chunks_copied_raw} chunks copied without decoding")
    for label, items in (("COMPACT -> CONTIGUOUS", summary.compact_to_contiguous),
                         ("unlimited -> fixed", summary.unlimited_fixed),
                         ("kept unlimited (zero length, or a filter not installed)", summary.unlimited_kept),
                         ("rechunked", list(summary.rechunked))):
        if items:
            print(f"  {label}: {len(items)} ({', '.join(items[:3])}{', ...' if len(items) > 3 else ''})")
    for note in summary.notes:
        print(f"  note: {note}")
    if summary.verified:
        decoded = summary.decode_check
        not_decoded = (decoded or {}).get("not_decoded") or []
        every = "every other" if not_decoded else "every"
        by_copy = (f"; those of {decoded['by_copy_datasets']} more datasets by the copy itself"
                   if decoded and decoded.get("by_copy_datasets") else "")
        beside = (f"; {every} stored chunk of the input decoded beside the copy ({decoded['chunks'] + decoded['by_hdf5']} "
                  f"chunks, {decoded['seconds']:.2f} s{by_copy})") if decoded else ""
        print(f"  verified: decoded data and attributes identical ({summary.verify_seconds:.2f} s after the copy)"
              + beside)
        for item in not_decoded:  # (their stored bytes were compared; their values could not be decoded here)
            print(f"  NOT decoded (stored bytes copied and compared as they are): {item}")
    return 0
