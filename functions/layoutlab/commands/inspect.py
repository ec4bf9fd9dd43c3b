"""``layoutlab inspect FILE [--json]``: how cloud-ready is an HDF5 / NetCDF file, and what would fix it."""

from __future__ import annotations

import argparse
import json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="report format, paging, metadata scatter, chunk sizes and a verdict for an HDF5 / NetCDF file",
        description=(
            "Inspect a local file or an s3:// object: format (HDF5 / NetCDF-4 / NetCDF-3 / other), file-space "
            "strategy and page size, user block, object counts, how scattered the metadata is, stored chunk "
            "sizes, filters, unlimited dimensions, COMPACT datasets, and a plain verdict of what stands between "
            "the file and fast cloud access, with the fix for each. S3 is reached through AWS_ENDPOINT_URL when "
            "set (the local cloud), else AWS."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            "  layoutlab inspect atl03.h5\n"
            "  layoutlab inspect s3://my-bucket/incoming/geos.nc --json > report.json\n"
        ),
    )
    parser.add_argument("file", metavar="FILE", help="local path or s3://bucket/key")
    parser.add_argument("--json", action="store_true", help="print the full report as JSON instead of text")
    parser.add_argument(
        "--page-size",
        default="8MiB",
        help="page size the metadata-scatter figures assume for unpaged files (default: %(default)s)",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    from layoutlab.convert.repack_hdf5 import parse_size
    from layoutlab.errors import UserError
    from layoutlab.formats.inspect import format_report, inspect_file

    try:
        page_size = parse_size(args.page_size)
    except ValueError as error:
        raise UserError(f"--page-size: {error}") from None
    from layoutlab.guard import run_guarded  # a damaged file that makes libhdf5 spin or crash: a clean error

    report = run_guarded(inspect_file, args.file, path=args.file, page_size=page_size)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
