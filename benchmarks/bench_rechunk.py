"""Rechunk throughput and peak memory: layoutlab vs rechunker, xarray+dask ``to_zarr``, Cubed, and the codec floor.

Same GEOS-like source (NetCDF-4, 1 x lat x lon chunks, zlib), same targets, same
compressor (Blosc/Zstd level 3 + shuffle), same memory bound, one core each
(every run is a fresh process pinned with ``os.sched_setaffinity``), side by side
in one invocation. Throughput is MiB of *uncompressed* data variable per second
of wall time, from opening the source to a published store (consolidated
metadata included). Peak RSS is the process's VmHWM. Every output is checked
against the generator's values (a time series and a map) before it counts.

rechunker lives in its own venv (``--rechunker-python``, created by
``make bench-rechunk-venv``) because it is a separate tool with its own
dependency pins; it runs there as a subprocess of this script. Cubed (through
cubed-xarray) likewise runs from ``--cubed-python`` (``make bench-cubed-venv``):
neither is a dependency of the package shipped to Lambda.

The codec floor (tool ``floor``) is the least work any rechunk must do: decode
every source chunk once (h5py ``read_direct_chunk`` + the chunk's HDF5 filters
undone with numcodecs) and encode every target chunk once with the target's codec
(numcodecs Blosc/Zstd-3 + shuffle, edge chunks padded to the chunk shape as Zarr
does). Its ``seconds`` is the time inside those codec calls only; reading raw
chunks, staging the decoded values in a scratch file and slicing target blocks out
of it are timed apart and not counted. It keeps a band of target chunks in memory,
never more than the bound.

``--source FILE:VARIABLE`` replaces the GEOS-like grid with a real product's
variable tiled along its record axis (a new leading ``time`` axis when the
variable has none, as ERA5's single-time maps) to ``--source-mib``, keeping the
original's chunk shape (one record per chunk when the original is contiguous) and
filters. ``--repeats N`` runs every tool N times per target in alternating order
(forward, then reversed) and reports medians.

    .venv/bin/python benchmarks/bench_rechunk.py                     # ~2 GB source, three targets, three tools
    .venv/bin/python benchmarks/bench_rechunk.py --shape 240,181,288 --tools layoutlab --targets balanced
    .venv/bin/python benchmarks/bench_rechunk.py --seed-grid         # + the whole seed grid at demo scale
    .venv/bin/python benchmarks/bench_rechunk.py --tools layoutlab,xarray-dask,cubed,floor --repeats 3 \
        --source /work/shared/corpus/products/era5_1995-07-14T12.nc:t2m_C --source-mib 1500

Writes a table to stdout and JSON to ``--json`` (default benchmarks/results/rechunk.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
MiB = 2**20

# --- what runs inside each pinned child process --------------------------------------
# Each child: pin to one core, import, time the job, check values, print one JSON line.

CHILD_COMMON = textwrap.dedent(
    """
    import json, os, sys, time
    os.sched_setaffinity(0, {core})
    import numpy as np
    args = json.loads(sys.argv[1])

    def hwm():
        return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))

    def check(read_array):
        # The variable's values at a point through time and a whole map, vs the generator.
        from layoutlab_geos_values import expected
        series, first_map = read_array()
        exp_series, exp_map = expected(args)
        np.testing.assert_array_equal(series, exp_series)
        np.testing.assert_array_equal(first_map, exp_map)
    """
)

# The expected values, importable in the rechunker and Cubed venvs too (they have no
# layoutlab): this file is written next to the child scripts and imports numpy (and h5py
# for a tiled real product, which both venvs have).
GEOS_VALUES_SHIM = textwrap.dedent(
    """
    import importlib.util, sys, numpy as np
    CHECK_STEPS = 128
    def expected(args):
        t, la, lo = args["shape"]
        steps = min(t, CHECK_STEPS)
        if args.get("tiled"):
            # A real product's variable repeated along the record axis: record i is the
            # original's record i mod n (its only record when the original has no record axis).
            import h5py
            tiled = args["tiled"]
            with h5py.File(tiled["file"], "r") as f:
                original = f[tiled["variable"]][()]
            if original.ndim == 2:
                original = original[None]
            records = np.arange(steps) % original.shape[0]
            return original[records, la // 3, lo // 2], original[0]
        spec = importlib.util.spec_from_file_location("geos_sample", args["geos_module"])
        geos = importlib.util.module_from_spec(spec)
        sys.modules["geos_sample"] = geos  # dataclasses look their module up
        spec.loader.exec_module(geos)
        grid = geos.GeosGrid(tuple(args["shape"]))
        # A time series at one point over the first CHECK_STEPS steps, and the first map:
        # regenerating the whole series would cost more than the rechunk itself.
        series = geos.geos_values(grid, 0, steps)[:, la // 3, lo // 2]
        return series, geos.geos_values(grid, 0, 1)[0]
    """
)

READ_BACK = textwrap.dedent(
    """
    def read_back(dst, var):
        import zarr
        arr = zarr.open_group(dst, mode="r")[var]
        t, la, lo = arr.shape
        return arr[:128, la // 3, lo // 2], arr[0]
    """
)

CHILD_LAYOUTLAB = CHILD_COMMON + READ_BACK + textwrap.dedent(
    """
    from pathlib import Path
    from layoutlab.convert.rechunk_zarr import rechunk
    # rechunk imports xarray's attribute reader, h5netcdf and zarr lazily: import them before
    # the clock starts, as the other children import their tools before theirs.
    import h5netcdf.attrs, xarray.backends.h5netcdf_, zarr.codecs, zarr.storage
    profiler = None
    if args.get("profile"):
        import cProfile, pstats
        profiler = cProfile.Profile(time.process_time)  # CPU time: on a shared machine wall time is mostly waiting
        profiler.enable()
    start, cpu_start = time.perf_counter(), time.process_time()
    result = rechunk(args["src"], args["dst"], chunks=args["chunks"], max_mem=args["max_mem"],
                     compressor="blosc-zstd:3", progress=False)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    if profiler is not None:
        # Where the time goes: the functions with the most time of their own (not their callees').
        profiler.disable()
        stats = pstats.Stats(profiler)
        top = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:15]
        result["profile_top_tottime"] = [
            {"function": f"{Path(fn[0]).name}:{fn[1]}({fn[2]})", "calls": nc, "tottime": round(tt, 3), "cumtime": round(ct, 3)}
            for fn, (cc, nc, tt, ct, callers) in top
        ]
    peak = hwm()  # before the value check, which allocates arrays of its own
    check(lambda: read_back(args["dst"], args["var"]))
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_rss": peak, "units": result["units"], "stages": result["stages"],
                      "profiled": profiler is not None, "profile_top_tottime": result.get("profile_top_tottime")}))
    """
)

CHILD_XARRAY_DASK = CHILD_COMMON + READ_BACK + textwrap.dedent(
    """
    import dask, xarray as xr, zarr
    from zarr.codecs import BloscCodec
    # dask's rechunk keeps its intermediate blocks under array.chunk-size: the closest
    # thing xarray+dask has to a memory bound. Synchronous scheduler: one core.
    dask.config.set({"array.chunk-size": args["max_mem"], "scheduler": "synchronous"})
    start, cpu_start = time.perf_counter(), time.process_time()
    ds = xr.open_dataset(args["src"], engine="h5netcdf", chunks={})
    var = args["var"]
    ds[var] = ds[var].chunk(args["chunks"])
    encoding = {var: {"chunks": tuple(args["chunks"][d] for d in ds[var].dims),
                      "compressors": (BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"),)}}
    ds.to_zarr(args["dst"], mode="w", zarr_format=3, consolidated=True, encoding=encoding)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    peak = hwm()
    check(lambda: read_back(args["dst"], var))
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_rss": peak}))
    """
)

CHILD_RECHUNKER = CHILD_COMMON + READ_BACK + textwrap.dedent(
    """
    import dask, xarray as xr, zarr, rechunker
    from numcodecs import Blosc
    # rechunker 0.5.x requires zarr < 3: its venv has zarr 2 and writes a Zarr v2 store.
    dask.config.set({"scheduler": "synchronous"})
    start, cpu_start = time.perf_counter(), time.process_time()
    ds = xr.open_dataset(args["src"], engine="h5netcdf", chunks={})  # dask chunks = the file's chunks
    var = args["var"]
    target_chunks = {var: args["chunks"]}
    for name in ds.coords:
        target_chunks[name] = {d: ds.sizes[d] for d in ds[name].dims}
    plan = rechunker.rechunk(
        ds, target_chunks, args["max_mem"], args["dst"], temp_store=args["tmp"],
        target_options={var: {"compressor": Blosc(cname="zstd", clevel=3, shuffle=Blosc.SHUFFLE)}},
    )
    plan.execute()
    zarr.consolidate_metadata(args["dst"])
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    peak = hwm()
    check(lambda: read_back(args["dst"], var))
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_rss": peak, "rechunker": rechunker.__version__, "zarr": zarr.__version__}))
    """
)

CHILD_CUBED = CHILD_COMMON + READ_BACK + textwrap.dedent(
    """
    import cubed, xarray as xr, zarr
    from zarr.codecs import BloscCodec
    # Cubed's bound is its Spec's allowed_mem (it refuses a plan whose tasks would need more);
    # its intermediate arrays go to work_dir; the single-threaded executor runs one task at a
    # time in this process: one core, like the others.
    spec = cubed.Spec(work_dir=args["tmp"], allowed_mem=args["max_mem"], executor_name="single-threaded")
    cubed_kwargs = {"chunked_array_type": "cubed", "from_array_kwargs": {"spec": spec}}
    start, cpu_start = time.perf_counter(), time.process_time()
    ds = xr.open_dataset(args["src"], engine="h5netcdf", chunks={}, **cubed_kwargs)
    var = args["var"]
    ds[var] = ds[var].chunk(args["chunks"], **cubed_kwargs)
    encoding = {var: {"chunks": tuple(args["chunks"][d] for d in ds[var].dims),
                      "compressors": (BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"),)}}
    ds.to_zarr(args["dst"], mode="w", zarr_format=3, consolidated=True, encoding=encoding)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    peak = hwm()
    check(lambda: read_back(args["dst"], var))
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "peak_rss": peak, "cubed": cubed.__version__, "zarr": zarr.__version__}))
    """
)

CHILD_FLOOR = CHILD_COMMON + textwrap.dedent(
    """
    import h5py, numcodecs, itertools
    from numcodecs import Blosc
    # The codec floor: decode every source chunk once, encode every target chunk once, and
    # time only those calls. Decoded values are staged in a raw scratch file (C order, the
    # source's shape) so that target blocks can be cut out of it a band at a time, within the
    # bound, without decoding a source chunk twice.
    H5Z_DEFLATE, H5Z_SHUFFLE, H5Z_FLETCHER32 = 1, 2, 3
    var = args["var"]
    f = h5py.File(args["src"], "r")
    ds = f[var]
    shape, dtype, itemsize = ds.shape, ds.dtype, ds.dtype.itemsize
    if not ds.chunks:
        sys.exit(f"{args['src']}: {var} is contiguous: the codec floor reads chunks (a contiguous variable has no codec)")
    src_chunks = ds.chunks
    plist = ds.id.get_create_plist()
    filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
    unknown = [code for code in filters if code not in (H5Z_DEFLATE, H5Z_SHUFFLE, H5Z_FLETCHER32)]
    if unknown:
        sys.exit(f"{args['src']}: {var} uses HDF5 filter(s) {unknown}: the codec floor undoes deflate, shuffle and fletcher32 only")
    zlib, shuffle = numcodecs.Zlib(), numcodecs.Shuffle(elementsize=itemsize)
    target = [args["chunks"][d] for d in args["dims"]]
    encoder = Blosc(cname="zstd", clevel=3, shuffle=Blosc.SHUFFLE)
    band_bytes = target[0] * target[1] * shape[2] * itemsize
    if band_bytes > args["max_mem"]:
        sys.exit(f"target band {target[0]} x {target[1]} x {shape[2]} is {band_bytes} bytes, over the bound {args['max_mem']}")

    def decode(raw, mask):
        # HDF5 applies filters in order on write; undo them in reverse, skipping masked ones.
        for i, code in reversed(list(enumerate(filters))):
            if mask & (1 << i):
                continue
            if code == H5Z_FLETCHER32:
                raw = raw[:-4]
            elif code == H5Z_DEFLATE:
                raw = zlib.decode(raw)
            elif code == H5Z_SHUFFLE:
                raw = shuffle.decode(raw)
        return np.frombuffer(raw, dtype=dtype)

    decode_seconds = encode_seconds = read_seconds = stage_seconds = decode_cpu = encode_cpu = 0.0
    scratch = os.open(args["tmp"], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    row_bytes = shape[2] * itemsize
    wall_start = time.perf_counter()
    for origin in itertools.product(*(range(0, n, c) for n, c in zip(shape, src_chunks))):
        t0 = time.perf_counter()
        mask, raw = ds.id.read_direct_chunk(origin)
        t1, c1 = time.perf_counter(), time.process_time()
        block = decode(raw, mask).reshape(src_chunks)
        t2, c2 = time.perf_counter(), time.process_time()
        read_seconds += t1 - t0
        decode_seconds += t2 - t1
        decode_cpu += c2 - c1
        # Edge chunks hold the full chunk shape; only the part inside the array is staged.
        extent = [min(c, n - o) for c, n, o in zip(src_chunks, shape, origin)]
        block = block[: extent[0], : extent[1], : extent[2]]
        for t in range(extent[0]):
            # Whole rows are contiguous in the scratch file: one write per record then.
            rows = [slice(None)] if extent[2] == shape[2] else [slice(la, la + 1) for la in range(extent[1])]
            for la in rows:
                first_row = origin[1] + (la.start or 0)
                offset = (((origin[0] + t) * shape[1] + first_row) * shape[2] + origin[2]) * itemsize
                os.pwrite(scratch, np.ascontiguousarray(block[t, la]).tobytes(), offset)
        stage_seconds += time.perf_counter() - t2
    del block, raw

    # Check values as the others do, from decoded target chunks (not timed).
    t_check, la_check, lo_check = min(shape[0], 128), shape[1] // 3, shape[2] // 2
    series, first_map = np.empty(t_check, dtype), np.empty(shape[1:], dtype)
    fill = np.asarray(ds.fillvalue, dtype)
    chunks_encoded = stored = 0
    for t0 in range(0, shape[0], target[0]):
        for la0 in range(0, shape[1], target[1]):
            t1, la1 = min(t0 + target[0], shape[0]), min(la0 + target[1], shape[1])
            s0 = time.perf_counter()
            band = np.empty((t1 - t0, la1 - la0, shape[2]), dtype)
            for t in range(t0, t1):
                band[t - t0] = np.frombuffer(
                    os.pread(scratch, (la1 - la0) * row_bytes, ((t * shape[1] + la0) * shape[2]) * itemsize), dtype
                ).reshape(la1 - la0, shape[2])
            stage_seconds += time.perf_counter() - s0
            for lo0 in range(0, shape[2], target[2]):
                s0 = time.perf_counter()
                piece = band[:, :, lo0 : lo0 + target[2]]
                if piece.shape != tuple(target):
                    # Zarr stores edge chunks at the full chunk shape, padded with the fill value.
                    padded = np.full(target, fill, dtype)
                    padded[: piece.shape[0], : piece.shape[1], : piece.shape[2]] = piece
                    piece = padded
                piece = np.ascontiguousarray(piece)
                s1, c1 = time.perf_counter(), time.process_time()
                encoded = encoder.encode(piece)
                encode_seconds += time.perf_counter() - s1
                encode_cpu += time.process_time() - c1
                stage_seconds += s1 - s0
                chunks_encoded += 1
                stored += len(encoded)
                if t0 == 0 or (t0 < t_check and la0 <= la_check < la1 and lo0 <= lo_check < lo0 + target[2]):
                    decoded = np.frombuffer(encoder.decode(encoded), dtype).reshape(target)
                    if t0 == 0:
                        width = min(target[2], shape[2] - lo0)
                        first_map[la0:la1, lo0 : lo0 + width] = decoded[0, : la1 - la0, :width]
                    if la0 <= la_check < la1 and lo0 <= lo_check < lo0 + target[2] and t0 < t_check:
                        stop = min(t1, t_check)
                        series[t0:stop] = decoded[: stop - t0, la_check - la0, lo_check - lo0]
    wall = time.perf_counter() - wall_start
    os.close(scratch)
    os.unlink(args["tmp"])
    peak = hwm()
    check(lambda: (series, first_map))
    print(json.dumps({"seconds": decode_seconds + encode_seconds, "cpu_seconds": decode_cpu + encode_cpu,
                      "decode_cpu_seconds": decode_cpu, "encode_cpu_seconds": encode_cpu, "decode_seconds": decode_seconds,
                      "encode_seconds": encode_seconds, "read_seconds": read_seconds,
                      "stage_seconds": stage_seconds, "floor_wall_seconds": wall,
                      "target_chunks_encoded": chunks_encoded, "encoded_bytes": stored, "peak_rss": peak}))
    """
)

CHILDREN = {
    "layoutlab": CHILD_LAYOUTLAB, "rechunker": CHILD_RECHUNKER, "xarray-dask": CHILD_XARRAY_DASK,
    "cubed": CHILD_CUBED, "floor": CHILD_FLOOR,
}


def targets_for(shape, dims=("time", "lat", "lon")) -> dict[str, dict[str, int]]:
    """Time-series-optimal, map-optimal and balanced targets (Nguyen et al.'s shapes, clipped)."""
    t, la, lo = shape
    shapes = {
        "time-series": (t, min(la, 10), min(lo, 10)),
        "map": (1, la, lo),
        "balanced": (min(t, 120), min(la, 50), min(lo, 100)),
    }
    return {name: dict(zip(dims, chunks)) for name, chunks in shapes.items()}


def write_tiled_source(workdir: Path, spec: str, target_mib: float) -> tuple[Path, dict]:
    """A real product's variable repeated along its record axis into a NetCDF-4 of ~target_mib.

    The copy keeps the original's chunk shape along the map axes and its HDF5 filters
    (deflate level, shuffle); a variable without a record axis (ERA5's single-time maps)
    gets a leading ``time`` axis with one record per chunk, the layout a time series of
    such files concatenated along time has. Returns the path and what the children need
    to regenerate the expected values.
    """
    import h5netcdf
    import h5py
    import numpy as np

    file, _, variable = spec.rpartition(":")
    if not file or not variable:
        raise SystemExit(f"--source {spec}: expected FILE:VARIABLE")
    with h5py.File(file, "r") as f:
        if variable not in f or not isinstance(f[variable], h5py.Dataset):
            raise SystemExit(f"--source {spec}: {file} has no variable {variable}")
        ds = f[variable]
        if ds.ndim not in (2, 3):
            raise SystemExit(f"--source {spec}: {variable} is {ds.ndim}-D; the benchmark rechunks a record x y x x grid")
        original = ds[()]
        fill = ds.fillvalue
        filters = {"compression": ds.compression, "compression_opts": ds.compression_opts, "shuffle": ds.shuffle}
        # Dimension names from the dimension scales NetCDF-4 attaches (phony names without them).
        names = [Path(dim[0].name).name if len(dim) else f"dim{i}" for i, dim in enumerate(ds.dims)]
        map_dims = names[-2:]
        record_dim = names[0] if ds.ndim == 3 else "time"
        original_chunks = ds.chunks
        coords = {name: f[name][()] for name in map_dims if name in f}
    records = original[None] if original.ndim == 2 else original
    chunks = (1, *records.shape[1:]) if original_chunks is None or original.ndim == 2 else original_chunks
    record_bytes = records[0].nbytes
    n_records = max(records.shape[0], round(target_mib * 2**20 / record_bytes) // chunks[0] * chunks[0])
    shape = (n_records, *records.shape[1:])
    path = workdir / f"tiled-{Path(file).stem}-{variable}-{'x'.join(map(str, shape))}.nc"
    tiled = {"file": str(Path(file).resolve()), "variable": variable}
    dims = (record_dim, *map_dims)
    if not path.exists():
        print(f"writing {path} ({n_records} records of {Path(file).name}:{variable}) ...", file=sys.stderr)
        partial = path.with_suffix(".partial")
        with h5netcdf.File(partial, "w") as out:
            out.dimensions = dict(zip(dims, shape))
            for name, values in coords.items():
                out.create_variable(name, (name,), data=values)
            out.create_variable(record_dim, (record_dim,), data=np.arange(n_records, dtype="i4"))
            compression = {}
            if filters["compression"]:
                compression = {"compression": filters["compression"], "compression_opts": filters["compression_opts"]}
            var = out.create_variable(variable, dims, dtype=records.dtype, chunks=chunks, shuffle=filters["shuffle"],
                                      fillvalue=fill, **compression)
            # Whole chunks along the record axis, ~64 MiB at a time: memory stays flat.
            step = max(chunks[0], (64 * 2**20 // record_bytes) // chunks[0] * chunks[0])
            for start in range(0, n_records, step):
                stop = min(start + step, n_records)
                var[start:stop] = records[np.arange(start, stop) % records.shape[0]]
        partial.rename(path)
    return path, {"tiled": tiled, "dims": list(dims), "shape": list(shape), "variable": variable,
                  "dtype": str(records.dtype), "chunks": list(chunks), "filters": filters}


def run_child(tool, python, core, args, workdir) -> dict:
    script = workdir / f"child_{tool}.py"
    script.write_text(CHILDREN[tool].replace("{core}", str({core})))
    (workdir / "layoutlab_geos_values.py").write_text(GEOS_VALUES_SHIM)
    env = dict(os.environ, PYTHONPATH=str(workdir))
    # Every venv caches its bytecode (pip's does at install; uv's .venv does not): without the cache
    # each fresh child recompiles xarray, pandas and zarr from source, tens of seconds under load.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    done = subprocess.run([python, str(script), json.dumps(args)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1], "stderr_tail": done.stderr[-2000:]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_seconds"] = wall
    return result


def store_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def ensure_source(workdir: Path, shape) -> Path:
    from layoutlab.samples.geos import write_geos

    path = workdir / f"geos-{'x'.join(map(str, shape))}.nc"
    if not path.exists():
        print(f"writing {path} ...", file=sys.stderr)
        write_geos(path, shape=shape)
    return path


def seed_grid_total(workdir: Path, core: int, max_mem: str) -> dict:
    """Time to produce every store of the seed grid at the demo shape, one core, one process."""
    from layoutlab.convert.rechunk_plan import seed_grid
    from layoutlab.samples.geos import DEFAULT_SHAPE

    src = ensure_source(workdir, DEFAULT_SHAPE)
    script = textwrap.dedent(
        f"""
        import json, os, shutil, sys, time
        os.sched_setaffinity(0, {{{core}}})
        from layoutlab.convert.rechunk_plan import seed_grid
        from layoutlab.convert.rechunk_zarr import rechunk
        rows = []
        for t, la, lo in seed_grid({tuple(DEFAULT_SHAPE)}):
            dst = "{workdir}/seed/{{}}x{{}}x{{}}.zarr".format(t, la, lo)
            start, cpu_start = time.perf_counter(), time.process_time()
            r = rechunk("{src}", dst, chunks={{"time": t, "lat": la, "lon": lo}}, max_mem="{max_mem}", progress=False)
            seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
            size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(dst) for f in fs)
            files = sum(len(fs) for _, _, fs in os.walk(dst))
            rows.append({{"chunks": [t, la, lo], "seconds": seconds, "stored_bytes": size, "files": files}})
            shutil.rmtree(dst)
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        print(json.dumps(rows))
        """
    )
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "shape": list(DEFAULT_SHAPE),
        "stores": len(rows),
        "total_seconds": round(time.perf_counter() - started, 2),
        "sum_of_rechunk_seconds": round(sum(r["seconds"] for r in rows), 2),
        "slowest": max(rows, key=lambda r: r["seconds"]),
        "rows": rows,
        "grid_points_expected": len(seed_grid(DEFAULT_SHAPE)),
    }


def median(values):
    import statistics

    return statistics.median(values) if values else None


def summarize(rows, targets) -> list[dict]:
    """Per target and tool: medians of the runs that passed the values check, and the goal ratios."""
    summary = []
    for target_name in targets:
        by_tool = {}
        for row in rows:
            if row["target"] == target_name and "error" not in row and not row.get("profiled"):
                by_tool.setdefault(row["tool"], []).append(row)
        medians = {tool: median([r["seconds"] for r in runs]) for tool, runs in by_tool.items()}
        cpu = {tool: median([r["cpu_seconds"] for r in runs]) for tool, runs in by_tool.items()}
        rivals = [medians[t] for t in ("xarray-dask", "cubed") if t in medians]
        cpu_rivals = [cpu[t] for t in ("xarray-dask", "cubed") if t in cpu]
        for tool, runs in by_tool.items():
            entry = {
                "target": target_name, "tool": tool, "runs": len(runs),
                "failed_runs": sum(1 for r in rows if r["target"] == target_name and r["tool"] == tool and "error" in r),
                "median_seconds": round(medians[tool], 2),
                "median_cpu_seconds": round(cpu[tool], 2),
                "seconds": [round(r["seconds"], 2) for r in runs],
                "median_mib_per_s": round(median([r["mib_per_s"] for r in runs]), 2),
                "max_peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
                "median_load_1min": round(median([r["load_1min"] for r in runs]), 2),
            }
            if tool == "layoutlab" and rivals:
                entry["speedup_vs_faster_of_xarray_dask_and_cubed"] = round(min(rivals) / medians[tool], 2)
            if tool == "layoutlab" and "floor" in medians:
                entry["seconds_over_codec_floor"] = round(medians[tool] / medians["floor"], 2)
            # On a shared machine a pinned child waits for its core: CPU seconds are what it did.
            if tool == "layoutlab" and cpu_rivals:
                entry["cpu_speedup_vs_faster_of_xarray_dask_and_cubed"] = round(min(cpu_rivals) / cpu[tool], 2)
            if tool == "layoutlab" and "floor" in cpu:
                entry["cpu_seconds_over_codec_floor"] = round(cpu[tool] / cpu["floor"], 2)
            summary.append(entry)
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="2016,361,720", help="source shape time,lat,lon (default ~2.1 GB float32)")
    parser.add_argument("--source", help="FILE:VARIABLE of a real product, tiled along its record axis instead of the GEOS-like grid")
    parser.add_argument("--source-mib", type=float, default=1500, help="size the tiled --source grows to (default 1500 MiB)")
    parser.add_argument("--workdir", default="/tmp/zarr/bench", help="where sources and outputs go (deleted after each run)")
    parser.add_argument("--max-mem", default="512MiB", help="memory bound given to every tool (default 512MiB)")
    parser.add_argument("--tools", default="layoutlab,rechunker,xarray-dask,cubed,floor")
    parser.add_argument("--targets", default="time-series,map,balanced")
    parser.add_argument("--repeats", type=int, default=1, help="runs per tool and target, alternating the tools' order")
    parser.add_argument("--core", type=int, default=None, help="CPU to pin every run to (default: the last one)")
    parser.add_argument("--rechunker-python", default="/tmp/zarr/rechunker-venv/bin/python")
    parser.add_argument("--cubed-python", default="/tmp/zarr/cubed-venv/bin/python")
    parser.add_argument("--profile", action="store_true",
                        help="run layoutlab's child under cProfile (slower: rows marked profiled, left out of the medians)")
    parser.add_argument("--seed-grid", action="store_true", help="also time the whole seed grid at the demo shape")
    parser.add_argument("--json", default=str(HERE / "results" / "rechunk.json"))
    args = parser.parse_args(argv)

    from layoutlab.convert.rechunk_zarr import parse_size
    from layoutlab.samples.geos import VARIABLE, parse_shape

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    core = args.core if args.core is not None else max(os.sched_getaffinity(0))
    max_mem = parse_size(args.max_mem)
    if args.source:
        src, source = write_tiled_source(workdir, args.source, args.source_mib)
        shape, dims, variable = tuple(source["shape"]), tuple(source["dims"]), source["variable"]
        itemsize = __import__("numpy").dtype(source["dtype"]).itemsize
    else:
        shape = parse_shape(args.shape)
        src, dims, variable, itemsize = ensure_source(workdir, shape), ("time", "lat", "lon"), VARIABLE, 4
        source = {"geos_like": True, "dims": list(dims), "shape": list(shape), "variable": variable}
    data_bytes = shape[0] * shape[1] * shape[2] * itemsize
    pythons = {"layoutlab": sys.executable, "xarray-dask": sys.executable, "floor": sys.executable,
               "rechunker": args.rechunker_python, "cubed": args.cubed_python}
    geos_module = str(Path(__import__("layoutlab.samples.geos", fromlist=["x"]).__file__))
    tools = args.tools.split(",")
    targets = args.targets.split(",")
    uptime_before = os.getloadavg()

    rows = []
    for repeat in range(args.repeats):
        order = tools if repeat % 2 == 0 else tools[::-1]
        for target_name in targets:
            chunks = targets_for(shape, dims)[target_name]
            for tool in order:
                dst = workdir / f"out-{tool}-{target_name}.zarr"
                tmp = workdir / f"tmp-{tool}-{target_name}.zarr"
                for path in (dst, tmp):
                    shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
                child_args = {
                    "src": str(src), "dst": str(dst), "tmp": str(tmp), "chunks": chunks, "max_mem": max_mem,
                    "var": variable, "dims": list(dims), "shape": list(shape), "geos_module": geos_module,
                    "tiled": source.get("tiled"), "profile": args.profile and tool == "layoutlab",
                }
                load = os.getloadavg()[0]
                result = run_child(tool, pythons[tool], core, child_args, workdir)
                row = {"tool": tool, "target": target_name, "repeat": repeat, "chunks": chunks,
                       "load_1min": round(load, 2), **result}
                if "error" not in result:
                    row["mib_per_s"] = round(data_bytes / MiB / result["seconds"], 2)
                    row["peak_rss_mib"] = round(result["peak_rss"] / MiB, 1)
                    if dst.exists():
                        row["stored_mib"] = round(store_bytes(dst) / MiB, 1)
                    elif "encoded_bytes" in result:
                        row["stored_mib"] = round(result["encoded_bytes"] / MiB, 1)
                rows.append(row)
                for path in (dst, tmp):
                    shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
                print(json.dumps(row), file=sys.stderr, flush=True)

    summary = summarize(rows, targets)
    print(f"\nrechunk {src.name}: {data_bytes / MiB:.0f} MiB {variable}, bound {args.max_mem}, one core (cpu {core}), "
          f"Blosc/Zstd-3, {args.repeats} run(s) per tool in alternating order, medians")
    print(f"{'target':<12} {'tool':<12} {'MiB/s':>8} {'seconds':>9} {'CPU s':>8} {'peak RSS MiB':>13}  "
          f"vs faster rival (wall/CPU)  over floor (wall/CPU)")
    for entry in summary:
        pairs = []
        for wall_key, cpu_key in (("speedup_vs_faster_of_xarray_dask_and_cubed", "cpu_speedup_vs_faster_of_xarray_dask_and_cubed"),
                                  ("seconds_over_codec_floor", "cpu_seconds_over_codec_floor")):
            pairs.append(f"{entry[wall_key]:.2f}x / {entry[cpu_key]:.2f}x" if wall_key in entry else "-")
        print(f"{entry['target']:<12} {entry['tool']:<12} {entry['median_mib_per_s']:>8.1f} {entry['median_seconds']:>9.1f} "
              f"{entry['median_cpu_seconds']:>8.1f} {entry['max_peak_rss_mib']:>13.0f}  {pairs[0]:>26}  {pairs[1]:>20}")
    for row in rows:
        if "error" in row:
            print(f"{row['target']:<12} {row['tool']:<12} FAILED (run {row['repeat']}): {row['error'][:100]}")

    report = {
        "benchmark": "rechunk",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_at_start": uptime_before, "loadavg_at_end": os.getloadavg()},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "source": source, "src": src.name,
        "shape": list(shape), "data_bytes": data_bytes, "max_mem": max_mem, "core": core, "repeats": args.repeats,
        "summary": summary,
        "rows": rows,
    }
    if args.seed_grid:
        report["seed_grid"] = seed_grid_total(workdir, core, args.max_mem)
        sg = report["seed_grid"]
        print(f"\nseed grid at {sg['shape']}: {sg['stores']} stores in {sg['total_seconds']:.0f} s "
              f"(slowest {sg['slowest']['chunks']}: {sg['slowest']['seconds']:.1f} s)")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
