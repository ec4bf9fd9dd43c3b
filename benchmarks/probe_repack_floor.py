#!/usr/bin/env python
"""How fast could a paged repack of the GEOS-like file be without numpy and h5py in the process?

A probe, not a tool: it answers "is ratio <= 1.0 against h5repack reachable by a
Python command at all?" before anyone writes a whole repack engine in C. The
measured process (``--copy``) imports neither numpy nor h5py: it loads h5py's
libhdf5 with ctypes (found on disk, not imported), binds layoutlab's C chunk loop
(``_fastcopy``) to it, creates the paged output (same file-creation and access
settings as ``layoutlab repack``, and its disk reservation), creates the main variable with its unlimited
axis fixed, and copies its stored chunks. It skips everything small (attributes,
coordinate variables, references), so it is a lower bound for such an engine on
this file, not a repack. Both it and ``h5repack -S PAGE -G`` run as fresh
processes, alternating, the input re-read into the page cache before each run.

    python benchmarks/probe_repack_floor.py /tmp/hdf5/b/geos-430.nc --repeat 9
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _libhdf5_path() -> str:
    """h5py's bundled libhdf5, found on disk without importing h5py (a wheel install keeps it in h5py.libs)."""
    import importlib.util

    spec = importlib.util.find_spec("h5py")
    site = Path(spec.origin).parent.parent
    found = sorted(glob.glob(str(site / "h5py.libs" / "libhdf5-*.so*")))
    found = [f for f in found if "_hl" not in Path(f).name]
    if not found:
        raise SystemExit("h5py.libs/libhdf5-*.so not found (an h5py built against a system HDF5?)")
    return found[0]


def copy(src: str, dst: str, variable: str, page_size: int) -> None:
    h5 = ctypes.CDLL(_libhdf5_path())
    i64, u64 = ctypes.c_int64, ctypes.c_uint64
    for name, restype in (("H5Fopen", i64), ("H5Fcreate", i64), ("H5Pcreate", i64), ("H5Dopen2", i64),
                          ("H5Dget_create_plist", i64), ("H5Dget_type", i64), ("H5Dget_space", i64),
                          ("H5Screate_simple", i64), ("H5Dcreate2", i64)):
        getattr(h5, name).restype = restype
    h5.H5open()
    cls = {n: i64.in_dll(h5, f"H5P_CLS_{n}_ID_g").value for n in ("FILE_CREATE", "FILE_ACCESS")}
    fcpl, fapl = h5.H5Pcreate(i64(cls["FILE_CREATE"])), h5.H5Pcreate(i64(cls["FILE_ACCESS"]))
    h5.H5Pset_file_space_strategy(i64(fcpl), ctypes.c_int(1), ctypes.c_bool(True), u64(1))  # PAGE, persist
    h5.H5Pset_file_space_page_size(i64(fcpl), u64(page_size))
    h5.H5Pset_libver_bounds(i64(fapl), ctypes.c_int(2), ctypes.c_int(2))  # the 1.10 format, as repack
    source = h5.H5Fopen(src.encode(), ctypes.c_uint(0), i64(0))
    out = h5.H5Fcreate(dst.encode(), ctypes.c_uint(2), i64(fcpl), i64(fapl))
    sys.path.insert(0, str(REPO / "functions"))
    from layoutlab.convert.preallocate import expected_output_bytes, preallocate, release_preallocation

    reserved = preallocate(dst, expected_output_bytes(src, page_size))  # as layoutlab repack does
    dataset = h5.H5Dopen2(i64(source), variable.encode(), i64(0))
    dcpl, ftype, space = (h5.H5Dget_create_plist(i64(dataset)), h5.H5Dget_type(i64(dataset)),
                          h5.H5Dget_space(i64(dataset)))
    rank = h5.H5Sget_simple_extent_ndims(i64(space))
    dims = (u64 * rank)()
    h5.H5Sget_simple_extent_dims(i64(space), dims, None)
    fixed = h5.H5Screate_simple(ctypes.c_int(rank), dims, dims)  # unlimited axis fixed at its size
    target = h5.H5Dcreate2(i64(out), variable.encode(), i64(ftype), i64(fixed), i64(0), i64(dcpl), i64(0))
    if min(source, out, dataset, target) < 0:
        raise SystemExit("an HDF5 call failed")

    from layoutlab.convert import _fastcopy  # (neither this nor fastcopy's names import h5py)
    from layoutlab.convert.fastcopy import FUNCTION_NAMES

    _fastcopy.bind(tuple(ctypes.cast(getattr(h5, n), ctypes.c_void_p).value for n in FUNCTION_NAMES))
    fd = os.open(src, os.O_RDONLY)
    _fastcopy.copy_chunks(dataset, target, fd, rank, 1 << 20, 64 << 10, None)
    for hid, close in ((target, "H5Dclose"), (dataset, "H5Dclose"), (out, "H5Fclose"), (source, "H5Fclose")):
        getattr(h5, close)(i64(hid))
    if reserved is not None:
        release_preallocation(reserved)
    os._exit(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="a GEOS-like NetCDF-4 file (benchmarks/bench_repack.py --keep leaves one)")
    parser.add_argument("--variable", default="BCEXTTAU")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--page-size", type=int, default=8 << 20)
    parser.add_argument("--copy", nargs=2, metavar=("SRC", "DST"), help=argparse.SUPPRESS)  # the measured process
    args = parser.parse_args()
    if args.copy:
        copy(*args.copy, args.variable, args.page_size)
    work = Path(args.input).parent
    out_probe, out_ref = work / "probe-floor.h5", work / "probe-h5repack.h5"
    tools = {
        "h5repack": ["h5repack", "-S", "PAGE", "-G", str(args.page_size), args.input, str(out_ref)],
        "probe": [sys.executable, __file__, args.input, "--variable", args.variable, "--page-size",
                  str(args.page_size), "--copy", args.input, str(out_probe)],
        "layoutlab": [sys.executable, "-m", "layoutlab.cli", "repack", args.input, str(out_probe),
                      "--page-size", str(args.page_size)],
    }
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_repack import measure  # fresh process, wall and CPU times from the kernel's rusage

    times: dict[str, list] = {name: [] for name in tools}
    for _ in range(args.repeat):
        for name, argv in tools.items():
            for stale in (out_probe, out_ref):
                stale.unlink(missing_ok=True)
            with open(args.input, "rb") as stream:  # warm: this VM drops cold page-cache pages
                while stream.read(64 << 20):
                    pass
            os.sync()
            times[name].append(measure(argv))
    for stale in (out_probe, out_ref):
        stale.unlink(missing_ok=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}  {args.input}  {args.repeat} alternating runs, load {os.getloadavg()[0]:.2f}")
    ref = times["h5repack"]
    for name, runs in times.items():
        walls = sorted(r["seconds"] for r in runs)
        med, best = statistics.median(walls), walls[0]
        ratio = "" if name == "h5repack" else (f"  ratio median {med / statistics.median(r['seconds'] for r in ref):.2f}"
                                               f" best {best / min(r['seconds'] for r in ref):.2f}")
        print(f"  {name:10s} median {med:.3f} s  best {best:.3f} s  user {statistics.median(r['user_seconds'] for r in runs):.3f} s"
              f"{ratio}   all: {' '.join(f'{w:.2f}' for w in walls)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
