"""``layoutlab rechunk``: HDF5 / NetCDF-4 / Zarr -> Zarr v3 at any chunk grid, bounded memory."""

from __future__ import annotations

import argparse
import json
import sys

DESCRIPTION = """\
Rechunk an HDF5 / NetCDF-4 / Zarr source (local path or s3://) into a Zarr v3 store
(local or s3://): arrays with dimension_names, coordinates, CF attributes, fill values
and consolidated metadata, so xarray.open_zarr(DST) equals xarray.open_dataset(SRC).

Memory: every work unit stays under --max-mem (plus the fixed cost of the Python
process and its libraries). When a direct copy would have to decode source chunks
many times, the plan goes through an intermediate array (two stages), like rechunker.

Fan-out: --plan-only prints the plan (JSON, with independent work units aligned to
target chunks and shards) and prepares DST; --unit K runs one unit (any order, any
parallelism, across stages too: a stage-1 unit first runs the stage-0 units it reads
from that are not done yet); --finalize writes the metadata last, so readers never
see a half-written store. Without any of these
three options the whole sequence runs here with a progress bar.

What is copied, and what is said about it (the result's "skipped" list and, per
variable, the plan's "notes"):
- Groups: every HDF5/NetCDF group becomes a Zarr group per HDF5/NetCDF group at the
  same path, with its attributes; arrays keep their paths (gt1l/heights/h_ph), and
  --variables takes those paths. xarray.open_zarr(DST, group=G) equals
  xarray.open_dataset(SRC, group=G). For a Zarr source only its root group is copied;
  its sub-groups are listed in "skipped".
- Strings: variable-length strings become Zarr v3 'string' arrays (UTF-8); fixed-length
  byte strings and NetCDF char arrays keep their bytes (zarr-python's
  null_terminated_bytes, not yet in the Zarr v3 spec).
- Packing: packed integers (scale_factor / add_offset) are copied as stored, in their
  integer dtype with their packing attributes. Zarr attributes are JSON numbers, so a
  float32 scale_factor is read back as float64 and xarray unpacks to float64 where the
  source gives float32 (the plan's notes say so per variable).
- Not copied, each listed in "skipped" with the reason, never dropped silently:
  compound, opaque, reference and variable-length sequence types, data that cannot be
  read (a filter plugin missing, external raw data absent), external links, and
  attributes that have no JSON form. A file with nothing that can be written is refused
  with those reasons.
- Empty (zero-size) variables cost metadata only."""

EPILOG = """\
examples:
  layoutlab rechunk geos.nc geos.zarr --chunks time=120,lat=50,lon=100
  layoutlab rechunk geos.nc s3://bucket/zarr/geos-ts.zarr --chunks time=full,lat=10,lon=10 --max-mem 256MiB
  layoutlab rechunk geos.nc geos.zarr --chunks auto --target-chunk-mb 4 --print-chunks
  layoutlab rechunk geos.nc --grid seed            # print Nguyen et al.'s grid scaled to this file
  layoutlab rechunk geos.nc geos.zarr --chunks time=24,lat=50,lon=50 --shards time=240,lat=100,lon=100
  layoutlab rechunk geos.nc geos.zarr --chunks time=120 --plan-only > plan.json
  layoutlab rechunk geos.nc geos.zarr --unit 0     # ... for every unit id in plan.json
  layoutlab rechunk geos.nc geos.zarr --finalize
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "rechunk",
        help="rechunk HDF5/NetCDF-4/Zarr into Zarr v3 (bounded memory, work units)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("src", metavar="SRC", help="source: NetCDF-4/HDF5 file or Zarr store, local path or s3://bucket/key")
    parser.add_argument(
        "dst", metavar="DST", nargs="?", help="destination Zarr v3 store, local directory or s3://bucket/prefix (not under incoming/)"
    )
    parser.add_argument(
        "--chunks",
        metavar="SPEC",
        help="target chunks by dimension, e.g. time=120,lat=100,lon=50 ('full' = whole extent; dimensions not named "
        "keep their whole extent); 'auto' = a balanced shape of --target-chunk-mb; default: keep the source chunks",
    )
    parser.add_argument(
        "--record-chunk", type=int, metavar="N",
        help="instead of --chunks: every array's first axis (a table's rows, a swath's scan lines) in chunks of N "
        "elements, its other axes whole (the pipeline's zarr-rows / zarr-lines layouts)",
    )
    parser.add_argument(
        "--target-chunk-mb", type=float, default=4.0, metavar="MB", help="chunk size for --chunks auto, in MB (default 4; e.g. 3.3)"
    )
    parser.add_argument(
        "--shards",
        metavar="SPEC",
        help="store chunks inside shards, e.g. time=480,lat=100,lon=200 (whole multiples of the chunks; default: no sharding)",
    )
    parser.add_argument(
        "--compressor",
        default="blosc-zstd:3",
        help="blosc-zstd:3 (default, as Nguyen et al.), blosc-lz4:1, zstd:3 or none",
    )
    parser.add_argument("--max-mem", default="512MiB", help="memory bound per work unit, e.g. 512MiB (default), 2GiB, 300MB")
    parser.add_argument(
        "--variables", metavar="NAMES", help="comma-separated variables to copy, e.g. BCEXTTAU (their coordinates come along)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace DST if it is an existing Zarr store")
    step = parser.add_mutually_exclusive_group()
    step.add_argument("--plan-only", action="store_true", help="print the plan as JSON and prepare DST; copy nothing")
    step.add_argument("--unit", type=int, metavar="K", help="run work unit K of the plan stored in DST (after --plan-only)")
    step.add_argument("--finalize", action="store_true", help="publish DST once every unit is done (metadata last)")
    step.add_argument(
        "--print-chunks", action="store_true", help="print the target chunks each variable would get (e.g. with --chunks auto); copy nothing"
    )
    step.add_argument(
        "--grid",
        choices=["seed", "seed-proportional"],
        help="print the seed chunk grid (Nguyen et al.: time 1,6,12,24,48,120,720,1440,2160,full x lat/lon 10,50,100,full) "
        "for SRC's shape: 'seed' keeps the paper's sizes and turns those beyond an extent into full; "
        "'seed-proportional' scales each size by extent/paper extent",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def _print_json(value) -> None:
    json.dump(value, sys.stdout, indent=2)
    sys.stdout.write("\n")


def run(args) -> int:
    from layoutlab.convert import rechunk_plan as planner
    from layoutlab.convert import rechunk_zarr as rz
    from layoutlab.errors import UserError

    if args.grid:
        kind = rz.source_kind(args.src)
        arrays, _ = rz.inspect_source(args.src, kind)
        grids = {}
        for array in arrays:
            if len(array.shape) == 3 and not array.is_coord:
                grids[array.name] = {
                    "dims": list(array.dims),
                    "shape": list(array.shape),
                    "chunks": [",".join(f"{d}={c}" for d, c in zip(array.dims, chunk)) for chunk in planner.seed_grid(array.shape, "clip" if args.grid == "seed" else "proportional")],
                }
        if not grids:
            raise UserError(f"{args.src}: no 3-D (time, lat, lon) variable to apply the seed grid to")
        _print_json(grids)
        return 0

    if args.unit is not None or args.finalize:
        if not args.dst:
            raise UserError("DST is required with --unit / --finalize")
        plan = rz.load_plan(args.dst)
        if args.unit is not None:
            _print_json(rz.run_unit(plan, args.unit))
        else:
            _print_json(rz.finalize(plan))
        return 0

    chunks = args.chunks
    if chunks is not None and chunks.strip().lower() != "auto":
        chunks = rz.parse_dim_spec(chunks)
    elif chunks is not None:
        chunks = "auto"
    if args.record_chunk is not None:
        if args.chunks is not None or args.shards is not None:
            raise UserError("--record-chunk chunks every array by its first axis: give it without --chunks / --shards")
        if args.record_chunk < 1:
            raise UserError(f"--record-chunk must be a positive number of elements, got {args.record_chunk}")
    options = dict(
        record_chunk=args.record_chunk,
        chunks=chunks,
        shards=rz.parse_dim_spec(args.shards, "--shards"),
        compressor=args.compressor,
        max_mem=args.max_mem,
        variables=[v.strip() for v in args.variables.split(",") if v.strip()] if args.variables else None,
        target_chunk_mb=args.target_chunk_mb,
        overwrite=args.overwrite,
    )
    if args.print_chunks:
        plan = rz.plan_rechunk(args.src, args.dst or "unused", prepare=False, **options)
        _print_json({name: dict(zip(v["dims"], v["chunks"])) for name, v in plan["variables"].items()})
        return 0
    if not args.dst:
        raise UserError("DST is required (only --grid and --print-chunks run without it)")
    if args.plan_only:
        plan = rz.plan_rechunk(args.src, args.dst, prepare=True, **options)
        summary = {k: plan[k] for k in ("source", "destination", "stages", "max_mem", "peak_unit_memory", "skipped", "units")}
        summary["variables"] = {
            name: {k: v[k] for k in ("dims", "shape", "dtype", "source_chunks", "chunks", "shards", "intermediate_chunks", "stages")}
            for name, v in plan["variables"].items()
        }
        _print_json(summary)
        return 0
    result = rz.rechunk(args.src, args.dst, progress=not args.no_progress, **options)
    _print_json(result)
    return 0
