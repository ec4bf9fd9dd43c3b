"""``layoutlab sample geos|atl03 OUT``: generate real-looking test files (never committed)."""

from __future__ import annotations

import argparse
import math

from layoutlab.errors import UserError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sample",
        help="generate a GEOS-FP-like NetCDF-4 or an ICESat-2 ATL03-like HDF5 test file",
        description=(
            "Generate a real-looking sample file. Values are reproducible from --seed, "
            "smooth plus noise (so compressors behave as on real data)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            "  layoutlab sample geos geos.nc                        # 240x181x288, seconds\n"
            "  layoutlab sample geos geos-full.nc --shape full      # 5136x721x1152 as GEOS-FP\n"
            "  layoutlab sample geos g.nc --shape 48,361,576 --chunks 12,100,100\n"
            "  layoutlab sample atl03 atl03.h5 --photons 2000000    # 6 beams x 2M photons\n"
        ),
    )
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", required=True)

    geos = kinds.add_parser(
        "geos",
        help="GEOS-FP-like NetCDF-4: BCEXTTAU(time, lat, lon) float32, one time step per chunk",
        description="GEOS-FP-like NetCDF-4 file (Nguyen et al.): BCEXTTAU(time, lat, lon), CF attributes, zlib.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  layoutlab sample geos geos.nc --shape 480,361,576 --chunks 1,361,576\n",
    )
    geos.add_argument("out", metavar="OUT", help="path of the NetCDF-4 file to write")
    geos.add_argument(
        "--shape",
        default="240,181,288",
        help="T,LAT,LON or 'full' for 5136,721,1152 (default: %(default)s, ~50 MB raw)",
    )
    geos.add_argument(
        "--chunks",
        default=None,
        help="chunk shape T,LAT,LON (default: 1,LAT,LON, one time step per chunk as distributed)",
    )
    geos.add_argument("--complevel", type=int, default=2, help="zlib level, 0 = uncompressed (default: %(default)s)")
    geos.add_argument("--seed", type=int, default=0, help="seed of the noise (default: %(default)s)")
    geos.set_defaults(func=run_geos)

    atl03 = kinds.add_parser(
        "atl03",
        help="ICESat-2 ATL03-like HDF5 granule: 6 beams, ~1,000 datasets, COMPACT and unlimited datasets",
        description=(
            "ATL03-like granule (Lopez et al.): six beam groups gt1l..gt3r with photon-rate heights/ "
            "chunked --chunk photons with gzip, segment-rate geolocation/, ancillary_data/ and METADATA/ "
            "with many small datasets and string attributes."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  layoutlab sample atl03 atl03.h5 --photons 1000000 --chunk 10000\n",
    )
    atl03.add_argument("out", metavar="OUT", help="path of the HDF5 file to write")
    atl03.add_argument(
        "--photons", type=int, default=200_000, help="photons in each of the six beams (default: %(default)s)"
    )
    atl03.add_argument(
        "--chunk", type=int, default=10_000, help="photons per chunk of the photon datasets (default: %(default)s)"
    )
    atl03.add_argument("--complevel", type=int, default=1, help="gzip level (default: %(default)s)")
    atl03.add_argument("--seed", type=int, default=0, help="seed of the noise (default: %(default)s)")
    atl03.set_defaults(func=run_atl03)


def _progress_bar(total: int, unit: str, description: str):
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, unit_scale=True, desc=description, leave=False, dynamic_ncols=True,
                disable=None)


def run_geos(args) -> int:
    from layoutlab.samples import geos

    try:
        shape = geos.parse_shape(args.shape)
        chunks = geos.parse_shape(args.chunks) if args.chunks else None
    except ValueError as error:
        raise UserError(f"--shape/--chunks: {error}") from None
    if chunks and any(c > n for c, n in zip(chunks, shape)):
        raise UserError(f"--chunks {args.chunks}: larger than --shape {args.shape}")
    with _progress_bar(shape[0], "step", "geos") as bar:
        path = geos.write_geos(args.out, shape=shape, chunks=chunks, complevel=args.complevel, seed=args.seed,
                               progress=bar.update)
    raw_gb = math.prod(shape) * 4 / 1e9
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, shape {shape}, {raw_gb:.2f} GB uncompressed)")
    return 0


def run_atl03(args) -> int:
    from layoutlab.samples import atl03

    if args.photons < 1 or args.chunk < 1:
        raise UserError(f"--photons and --chunk must be positive (got {args.photons}, {args.chunk})")
    with _progress_bar(args.photons * len(atl03.BEAMS), "photon", "atl03") as bar:
        path = atl03.write_atl03(args.out, photons=args.photons, chunk=args.chunk, seed=args.seed,
                                 complevel=args.complevel, progress=bar.update)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, 6 beams x {args.photons} photons)")
    return 0
