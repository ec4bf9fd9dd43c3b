"""``layoutlab inspect FILE [--json]``: how cloud-ready is an HDF5 / NetCDF file, and what would fix it.

``layoutlab inspect --check FILE...``: the pass/fail form for producers' pipelines (what
``rio cogeo validate`` is to Cloud-Optimized GeoTIFF): one line per broken rule with its fix,
exit status 0 / 1 / 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

EXIT_READY, EXIT_PROBLEMS, EXIT_UNREADABLE = 0, 1, 2


def _rules_help() -> str:
    from layoutlab.formats.readiness import RULES

    lines = ["rules checked by --check (default threshold: why it matters -> what fixes it):"]
    for name, default, why, fix in RULES:
        lines.append(f"  {name} [{default}]")
        lines += textwrap.wrap(f"{why} -> {fix}", width=96, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="report how cloud-ready HDF5 / NetCDF files are; --check: pass/fail per file, with fixes",
        description=(
            "Inspect a local file or an s3:// object: format (HDF5 / NetCDF-4 / NetCDF-3 / other), file-space "
            "strategy and page size, user block, object counts, how scattered the metadata is, stored chunk "
            "sizes, filters, unlimited dimensions, COMPACT datasets, and a plain verdict of what stands between "
            "the file and fast cloud access, with the fix for each. S3 is reached through AWS_ENDPOINT_URL when "
            "set (the local cloud), else AWS.\n\n"
            "With --check, each FILE is held to the rules below instead: one line per broken rule, "
            "'FILE: PROBLEM (measured vs threshold) — fix: COMMAND', or 'FILE: cloud-ready (why)'. Exit "
            "status: 0 when every file passes, 1 when any file breaks a rule (a file that is not HDF5 / "
            "NetCDF-4 cannot be checked and counts as failing), 2 on a usage error or when a file cannot be "
            "read (missing, damaged: reported on stderr with its reason; the other files are still checked). "
            "Fix commands name a local copy of an s3:// object by its base name."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            _rules_help() + "\n\n"
            "examples:\n"
            "  layoutlab inspect atl03.h5\n"
            "  layoutlab inspect s3://my-bucket/incoming/geos.nc --json > report.json\n"
            "  layoutlab inspect --check out/*.h5 s3://my-bucket/incoming/geos.nc\n"
            "  layoutlab inspect --check granule.nc --min-chunk 1MB --allow unlimited,compact --json\n"
        ),
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="local path or s3://bucket/key (several with --check)")
    parser.add_argument("--json", action="store_true",
                        help="print JSON: the full report; with --check a list of "
                             "{file, ok, problems: [{rule, message, value, threshold, fix}]}")
    parser.add_argument(
        "--page-size",
        default=None,
        help="block size an unpaged file's metadata scatter is counted in (what a block-cache reader fetches; "
             "default: 8MiB); with --check also the smallest page the fixes consider (default: 4KiB). A fix's "
             "page is the power of two that pads the file least among those that hold the metadata in half "
             "the allowed GETs and every chunk; its estimated size change is printed with it",
    )
    parser.add_argument("--structure", action="store_true",
                        help="print what the file holds by structure instead (grids, swaths, tables, radar "
                             "volumes, station series: each with its dimensions, coordinates and data arrays), "
                             "the model the plan step fits access patterns to; with --json, as JSON")
    check = parser.add_argument_group("cloud-readiness check")
    check.add_argument("--check", action="store_true", help="pass/fail each FILE against the rules below")
    check.add_argument("--min-chunk", metavar="SIZE", default=None,
                       help="smallest median stored chunk of a dataset in several chunks (default: 100KB)")
    check.add_argument("--max-chunk", metavar="SIZE", default=None,
                       help="largest stored chunk (default: 16MiB)")
    check.add_argument("--max-metadata-requests", metavar="N", default=None,
                       help="most page-sized ranged GETs that may hold metadata (default: 4)")
    check.add_argument("--allow", metavar="RULE[,RULE]", action="append", default=[],
                       help="rules not to fail on (e.g. unlimited,compact); repeatable")
    parser.set_defaults(func=run)


def run(args) -> int:
    from layoutlab.errors import UserError

    if args.check:
        return _check(args, _thresholds(args))
    given = [flag for flag, value in (("--min-chunk", args.min_chunk), ("--max-chunk", args.max_chunk),
                                      ("--max-metadata-requests", args.max_metadata_requests),
                                      ("--allow", args.allow)) if value]
    if given:
        raise UserError(f"{', '.join(given)}: only with --check")
    if len(args.files) > 1:
        raise UserError(f"{len(args.files)} files given: the full report is for one FILE; "
                        "use --check to check several")
    from layoutlab.formats.inspect import RECOMMENDED_PAGE_SIZE, format_report, inspect_file
    from layoutlab.guard import run_guarded  # a damaged file that makes libhdf5 spin or crash: a clean error

    if args.structure:
        from layoutlab.structure import file_structure

        structure = run_guarded(file_structure, args.files[0], path=args.files[0])
        print(json.dumps(structure.to_dict(), indent=2) if args.json else "\n".join(structure.summary_lines()))
        return 0

    page_size = _size(args.page_size, "--page-size") if args.page_size else RECOMMENDED_PAGE_SIZE
    location = args.files[0]
    report = run_guarded(inspect_file, location, path=location, page_size=page_size)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def _size(text: str, option: str) -> int:
    from layoutlab.errors import UserError
    from layoutlab.units import parse_size

    value = parse_size(text, option)
    if value <= 0:
        raise UserError(f"{option} {text}: must be more than 0 bytes")
    return value


def _thresholds(args):
    from layoutlab.errors import UserError
    from layoutlab.formats.readiness import ALLOWABLE, RULE_NAMES, Thresholds

    defaults = Thresholds()
    min_chunk = _size(args.min_chunk, "--min-chunk") if args.min_chunk else defaults.min_chunk
    max_chunk = _size(args.max_chunk, "--max-chunk") if args.max_chunk else defaults.max_chunk
    if min_chunk >= max_chunk:
        raise UserError(f"--min-chunk {min_chunk} bytes is not below --max-chunk {max_chunk} bytes")
    requests = defaults.max_metadata_requests
    if args.max_metadata_requests is not None:
        try:
            requests = int(args.max_metadata_requests)
        except ValueError:
            requests = 0
        if requests < 1:
            raise UserError(f"--max-metadata-requests {args.max_metadata_requests!r}: expected a whole number >= 1")
    allow = {name.strip() for option in args.allow for name in option.split(",") if name.strip()}
    unknown = sorted(allow - set(ALLOWABLE))
    if unknown:
        why = " (a file that is not HDF5 cannot be checked)" if "not-hdf5" in unknown else ""
        raise UserError(f"--allow {','.join(unknown)}: not a rule that can be allowed{why}; "
                        f"rules: {', '.join(r for r in RULE_NAMES if r in ALLOWABLE)}")
    page_size = _size(args.page_size, "--page-size") if args.page_size else defaults.page_size
    return Thresholds(min_chunk=min_chunk, max_chunk=max_chunk, max_metadata_requests=requests,
                      page_size=page_size, allow=allow)


def _check(args, thresholds) -> int:
    from layoutlab.errors import UserError
    from layoutlab.formats.readiness import check_file, format_result
    from layoutlab.guard import GuardedCallFailed, run_guarded

    # What each file's child runs, imported once here: the forked children inherit h5py, numpy and the page
    # model instead of each importing them anew (~0.16 s of CPU a file: 148 corpus files 40 -> 17 s)
    import layoutlab.formats.inspect  # noqa: F401
    import layoutlab.formats.paged_layout  # noqa: F401

    results, unreadable = [], False
    for location in args.files:
        try:
            # One watched child per file: a file that makes libhdf5 spin or crash is reported and the
            # others are still checked.
            result = run_guarded(check_file, location, thresholds, path=location)
        except UserError as error:  # missing, not an object, damaged: its own one-line reason
            result = _unreadable(location, str(error))
        except (GuardedCallFailed, MemoryError) as error:  # a layoutlab bug or the memory limit, not the file
            text = str(error)
            result = _unreadable(location, text if text.startswith(location) else f"{location}: {text}")
        if result.get("error"):
            unreadable = True
            print(f"layoutlab inspect: error: {result['error']}", file=sys.stderr, flush=True)
        results.append(result)
        if not args.json:
            for line in format_result(result) if not result.get("error") else ():
                print(line, flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    if unreadable:
        return EXIT_UNREADABLE
    return EXIT_READY if all(r["ok"] for r in results) else EXIT_PROBLEMS


def _unreadable(location: str, message: str) -> dict:
    return {"file": location, "ok": False, "format": None, "problems": [], "error": message}
