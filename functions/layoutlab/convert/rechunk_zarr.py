"""Rechunk an HDF5 / NetCDF-4 / Zarr source into a Zarr v3 store, in work units.

The public API is JSON in, JSON out, so a Step Functions fan-out can call it
from Lambda or Fargate tasks:

    plan = plan_rechunk(src, dst, chunks={"time": 120, "lat": 100, "lon": 50}, max_mem="512MiB")
    for k in range(len(plan["units"])):   # any order, any parallelism
        run_unit(plan, k)
    finalize(plan)

or ``rechunk(src, dst, ...)`` for all three with a progress bar.

How a store is produced
- ``plan_rechunk`` reads only metadata. It decides every array's Zarr v3
  metadata (chunks, shards, codecs, fill value, ``dimension_names``, CF
  attributes encoded the way xarray reads them back) and asks the pure planner
  (``rechunk_plan``) for work units. With ``prepare=True`` it checks DST,
  and stores the plan under ``DST/.layoutlab-rechunk/plan.json``.
- ``run_unit`` copies one region: one read from the source (or the
  intermediate array of a two-stage plan), one write of whole target chunks
  or shards, then a ``done`` marker. A unit of stage 1 first runs (one at a
  time) the stage-0 units it reads from that have no marker yet, so units
  of all stages run in any order and with any parallelism. It writes chunks only: no ``zarr.json``,
  so nothing in DST is readable as Zarr yet.
- ``finalize`` checks that every unit left its marker, writes the arrays'
  ``zarr.json``, removes the intermediate arrays and writes the root
  ``zarr.json`` with consolidated metadata last: a reader sees either no
  store or the whole store.

Values are copied raw (no CF decoding): what xarray decodes from the source
(scale factors, fill values, time units) it decodes the same way from DST.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import os
import random
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from layoutlab.convert import rechunk_plan as planner
from layoutlab.errors import BadInputFile, UserError
from layoutlab.storage import S3Location, is_s3_url

log = logging.getLogger(__name__)

PLAN_VERSION = 1
STAGING = ".layoutlab-rechunk"  # plan, unit markers and intermediate arrays live here until finalize
DEFAULT_COMPRESSOR = "blosc-zstd:3"  # Nguyen et al.: Zarr's default Blosc with Zstd, level 3
INTERMEDIATE_COMPRESSOR = "blosc-lz4:1"  # cheap to write and read back, still halves the bytes
DEFAULT_MAX_MEM = "512MiB"
# Zarr v3 core data types (the spec's list): other dtypes (strings, objects,
# structured) are skipped with a logged reason rather than written as
# implementation-specific extensions other readers may not understand.
CORE_KINDS = {"b", "i", "u", "f", "c"}
# The planner's model counts the arrays a unit holds; the process also holds what
# the allocator keeps after freeing them (glibc arenas of zarr's codec threads) and
# temporary copies inside codecs. Measured peak RSS above the import baseline was up
# to 1.4x the model (tests/integration/test_zarr_rechunk.py, benchmarks/bench_rechunk.py),
# so units are planned for max_mem / MEMORY_MODEL_HEADROOM.
MEMORY_MODEL_HEADROOM = 1.5
# Beyond the import cost, a run holds some working memory that does not grow with
# the bound or the data (codec thread pools, Blosc/Zstd/LZ4 contexts, allocator
# arenas): measured 13-15 MiB on two-stage runs, ~1 MiB on direct ones. The stated
# guarantee is: peak RSS <= --max-mem + import baseline + FIXED_WORKING_MEMORY.
FIXED_WORKING_MEMORY = 16 * 2**20

# glibc raises its mmap threshold each time a big mmapped block is freed (up to 32 MiB); after
# that, unit-sized buffers come from the heap arenas of zarr's I/O threads and stay there,
# fragmented. Measured (benchmarks/bench_unit_order.py, 286 MiB source, --max-mem 64MiB): peak
# RSS crept up by 23-60 MiB over ten stage-1 units in one process, past the bound; with a fixed
# threshold it stays flat. A fixed threshold also turns the dynamic adjustment off, so every
# buffer bigger than about a chunk goes back to the OS when freed.
MMAP_THRESHOLD = 4 * 2**20
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


@functools.cache
def fix_mmap_threshold() -> bool:
    """Set glibc's mmap threshold once per process (no Python binding exists: ctypes).

    True when set; False where the C library is not glibc (then nothing changes).
    """
    import ctypes

    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False


_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_size(text) -> int:
    """``"512MiB"`` -> 536870912; ``"1GB"`` -> 10**9; ints pass through."""
    if isinstance(text, int | np.integer):
        return int(text)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise UserError(f"--max-mem: cannot read {text!r} as a size (examples: 512MiB, 2GiB, 300MB)")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def parse_dim_spec(text: str | None, option: str = "--chunks") -> dict[str, int | None] | None:
    """``"time=120,lat=100,lon=50"`` -> {"time": 120, ...}; ``full`` or ``-1`` means the whole extent."""
    if text is None:
        return None
    spec: dict[str, int | None] = {}
    for part in str(text).split(","):
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            raise UserError(f"{option}: expected DIM=SIZE[,DIM=SIZE...], got {text!r}")
        if value.lower() in ("full", "-1"):
            spec[name] = None
        elif value.isdigit() and int(value) > 0:
            spec[name] = int(value)
        else:
            raise UserError(f"{option}: {name}={value!r} is not a positive size (or 'full')")
    return spec


# --- codecs -------------------------------------------------------------------------


def compressor_codecs(spec: str | None):
    """``blosc-zstd:3`` | ``blosc-lz4:1`` | ``zstd:3`` | ``none`` -> zarr v3 codecs (a tuple)."""
    from zarr.codecs import BloscCodec, ZstdCodec

    text = (spec or "none").strip().lower()
    if text == "none":
        return ()
    name, _, level = text.partition(":")
    try:
        level = int(level) if level else 3
    except ValueError:
        raise UserError(f"--compressor: level in {spec!r} is not an integer") from None
    if name.startswith("blosc-"):
        cname = name.removeprefix("blosc-")
        if cname not in ("zstd", "lz4", "lz4hc", "zlib", "blosclz"):
            raise UserError(f"--compressor: unknown Blosc compressor {cname!r} (zstd, lz4, lz4hc, zlib, blosclz)")
        return (BloscCodec(cname=cname, clevel=level, shuffle="shuffle"),)
    if name == "zstd":
        return (ZstdCodec(level=level),)
    raise UserError(f"--compressor: unknown compressor {spec!r} (blosc-zstd:3, blosc-lz4:1, zstd:3, none)")


# --- stores -------------------------------------------------------------------------


def open_store(location: str, read_only: bool = False):
    """A zarr v3 store for a local directory or an ``s3://bucket/prefix``."""
    from zarr.storage import LocalStore, ObjectStore

    if is_s3_url(location):
        from layoutlab.storage import obstore_s3_store

        where = S3Location.parse(location)
        return ObjectStore(obstore_s3_store(where.bucket, where.key.strip("/") or None), read_only=read_only)
    return LocalStore(str(location), read_only=read_only)


def _run(coro):
    return asyncio.run(coro)


def _store_get(store, key: str) -> bytes | None:
    from zarr.core.buffer import default_buffer_prototype

    async def get():
        if not store._is_open:
            await store._open()
        buf = await store.get(key, prototype=default_buffer_prototype())
        return None if buf is None else buf.to_bytes()

    return _run(get())


def _store_set(store, key: str, data: bytes) -> None:
    from zarr.core.buffer import default_buffer_prototype

    async def put():
        if not store._is_open:
            await store._open()
        await store.set(key, default_buffer_prototype().buffer.from_bytes(data))

    _run(put())


def _store_list(store, prefix: str = "") -> list[str]:
    async def listing():
        if not store._is_open:
            await store._open()
        return [key async for key in store.list_prefix(prefix)]

    return _run(listing())


def _store_delete_dir(store, prefix: str) -> None:
    async def delete():
        if not store._is_open:
            await store._open()
        await store.delete_dir(prefix)

    _run(delete())


def _destination_state(dst: str) -> str:
    """``absent`` | ``empty`` | ``zarr`` (a Zarr store or our staging) | ``other``."""
    if is_s3_url(dst):
        store = open_store(dst)
        keys = _store_list(store)
        if not keys:
            return "absent"
        if any(k in ("zarr.json", ".zgroup", ".zarray") or k.startswith(STAGING + "/") for k in keys):
            return "zarr"
        return "other"
    path = Path(dst)
    if not path.exists():
        return "absent"
    if path.is_dir() and not any(path.iterdir()):
        return "empty"
    if path.is_dir() and any((path / name).exists() for name in ("zarr.json", ".zgroup", ".zarray", STAGING)):
        return "zarr"
    return "other"


def _check_destination(dst: str, overwrite: bool) -> None:
    if is_s3_url(dst):
        key = S3Location.parse(dst).key
        if key == "incoming" or key.startswith("incoming/"):
            raise BadInputFile(dst, "destinations under incoming/ are not allowed (that prefix triggers ingestion)")
    state = _destination_state(dst)
    if state in ("absent", "empty"):
        return
    if not overwrite:
        raise BadInputFile(dst, "already exists; pass --overwrite to replace it")
    if state == "other":
        raise BadInputFile(dst, "exists and is not a Zarr store; refusing to delete it even with --overwrite")


def _clear_destination(dst: str) -> None:
    if _destination_state(dst) in ("absent", "empty"):
        return
    if is_s3_url(dst):
        _store_delete_dir(open_store(dst), "")
    else:
        shutil.rmtree(dst)


# --- sources ------------------------------------------------------------------------


@dataclass
class SourceArray:
    name: str
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...]
    attrs: dict
    is_coord: bool


def source_kind(src: str) -> str:
    """``hdf5`` or ``zarr``; a BadInputFile for anything else (or nothing)."""
    if is_s3_url(src):
        store = open_store(src, read_only=True)
        keys = set(_store_list(store))
        if keys & {"zarr.json", ".zgroup", ".zattrs", ".zmetadata"}:
            return "zarr"
        from layoutlab.storage import s3fs_filesystem

        try:
            with s3fs_filesystem(for_url=src).open(src, "rb") as f:
                head = f.read(8)
        except (FileNotFoundError, IsADirectoryError):
            if keys:
                raise BadInputFile(src, "is an S3 prefix but not a Zarr store (no zarr.json or .zgroup)") from None
            raise BadInputFile(src, "does not exist") from None
    else:
        path = Path(src)
        if not path.exists():
            raise BadInputFile(src, "does not exist")
        if path.is_dir():
            if any((path / name).exists() for name in ("zarr.json", ".zgroup")):
                return "zarr"
            raise BadInputFile(src, "is a directory but not a Zarr store (no zarr.json or .zgroup)")
        with open(path, "rb") as f:
            head = f.read(8)
    if head == b"\x89HDF\r\n\x1a\n":
        return "hdf5"
    raise BadInputFile(src, "is not an HDF5/NetCDF-4 file or a Zarr store (no HDF5 signature)")


def _open_hdf5(src: str, rdcc_nbytes: int = 2**20):
    """An h5py File; a small chunk cache because the planner's memory model counts chunks itself."""
    import h5py

    if is_s3_url(src):
        from layoutlab.storage import s3fs_filesystem

        fileobj = s3fs_filesystem(for_url=src).open(src, "rb", block_size=8 * 2**20, cache_type="readahead")
        return h5py.File(fileobj, "r", rdcc_nbytes=rdcc_nbytes)
    return h5py.File(src, "r", rdcc_nbytes=rdcc_nbytes)


def inspect_source(src: str, kind: str) -> tuple[list[SourceArray], dict]:
    """Every variable of the source (with dims, raw dtype, chunks, raw attributes) and the global attributes."""
    import xarray as xr

    try:
        if kind == "zarr":
            ds = xr.open_zarr(open_store(src, read_only=True), decode_cf=False, chunks=None, consolidated=None)
        else:
            handle = _open_hdf5(src)
            ds = xr.open_dataset(handle, engine="h5netcdf", decode_cf=False, phony_dims="sort", chunks=None)
    except (OSError, ValueError, KeyError) as error:
        raise BadInputFile(src, f"cannot be read as a dataset ({error.__class__.__name__}: {error})") from None
    arrays = []
    with ds:
        for name, var in ds.variables.items():
            if kind == "zarr":
                chunks = tuple(var.encoding.get("chunks") or var.shape)
            else:
                chunks = tuple(var.encoding.get("chunksizes") or var.shape)
            arrays.append(
                SourceArray(
                    name=str(name),
                    dims=tuple(str(d) for d in var.dims),
                    shape=tuple(int(n) for n in var.shape),
                    dtype=np.dtype(var.dtype),
                    chunks=tuple(int(c) for c in chunks),
                    attrs=dict(var.attrs),
                    is_coord=var.dims == (name,),
                )
            )
        global_attrs = dict(ds.attrs)
    if kind == "hdf5":
        handle.close()
    return arrays, global_attrs


# --- plan ---------------------------------------------------------------------------


def _json_attrs(attrs: dict, dtype: np.dtype | None = None) -> dict:
    """Attributes as xarray writes them to Zarr v3 (so xarray reads them back identically)."""
    from xarray.backends.zarr import FillValueCoder, encode_zarr_attr_value

    out = {}
    for key, value in attrs.items():
        if key == "_FillValue" and dtype is not None:
            out[key] = FillValueCoder.encode(np.asarray(value).reshape(-1)[0].item(), dtype)
            continue
        value = encode_zarr_attr_value(value)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        out[key] = value
    return out


def _array_metadata(name, shape, dtype, chunks, shards, codecs, fill_value, attrs, dims) -> dict:
    """The ``zarr.json`` document of one array, made by zarr itself (in memory)."""
    import zarr
    from zarr.storage import MemoryStore

    store = MemoryStore()
    zarr.create_array(
        store,
        name=name,
        shape=shape,
        dtype=dtype,
        chunks=chunks,
        shards=shards,
        compressors=codecs,
        filters=(),
        fill_value=fill_value,
        attributes=attrs,
        dimension_names=dims,
        zarr_format=3,
        config={"write_empty_chunks": False},
    )
    return json.loads(_store_get(store, f"{name}/zarr.json"))


def _target_chunks(array: SourceArray, chunks, target_bytes: int) -> tuple[int, ...]:
    if not array.shape:
        return ()
    if array.is_coord:
        return tuple(max(1, n) for n in array.shape)  # index coordinates: one chunk, as xarray writes them
    if chunks == "auto":
        return planner.auto_chunks(array.shape, array.dtype.itemsize, target_bytes)
    if chunks is None:
        return tuple(max(1, min(c, n)) for c, n in zip(array.chunks, array.shape))
    # Dimensions the spec does not name (or names as 'full') keep their whole extent.
    return tuple(max(1, n if chunks.get(d) is None else min(n, chunks[d])) for d, n in zip(array.dims, array.shape))


def _target_shards(array: SourceArray, shards, chunks_shape) -> tuple[int, ...] | None:
    if shards is None or array.is_coord or not array.shape:
        return None
    out = []
    for d, n, c in zip(array.dims, array.shape, chunks_shape):
        s = shards.get(d, c) if d in shards else c
        s = n if s is None else min(n, s)
        if s % c and s < n:
            raise UserError(f"--shards: {d}={s} is not a whole multiple of the chunk size {c} along {d}")
        out.append(s)
    return tuple(out)


def plan_rechunk(
    src: str,
    dst: str,
    chunks: dict | str | None = None,
    shards: dict | None = None,
    compressor: str | None = DEFAULT_COMPRESSOR,
    max_mem: int | str = DEFAULT_MAX_MEM,
    variables: list[str] | None = None,
    target_chunk_mb: float = 4.0,
    overwrite: bool = False,
    prepare: bool = True,
) -> dict:
    """Plan the rechunk of SRC into DST; JSON-serialisable.

    ``chunks``: {dim: size or None (whole extent)}, ``"auto"`` (balanced, about
    ``target_chunk_mb`` MB), or None (keep the source chunks). Dimensions not
    named keep their whole extent. 1-D coordinate variables are stored as one
    chunk. ``shards``: {dim: size}, whole multiples of the chunks.
    ``prepare``: check DST (refuse an existing one unless ``overwrite``) and
    store the plan in it for ``--unit`` / ``--finalize``.
    """
    max_mem = parse_size(max_mem)
    src, dst = str(src), str(dst)
    if isinstance(chunks, str) and chunks != "auto":
        chunks = parse_dim_spec(chunks)
    if isinstance(shards, str):
        shards = parse_dim_spec(shards, "--shards")
    if prepare:
        _check_destination(dst, overwrite)
    kind = source_kind(src)
    arrays, global_attrs = inspect_source(src, kind)
    if not arrays:
        raise BadInputFile(src, "holds no array variables")
    all_dims = {d for a in arrays for d in a.dims}
    for option, spec in (("--chunks", chunks), ("--shards", shards)):
        if isinstance(spec, dict):
            missing = [d for d in spec if d not in all_dims]
            if missing:
                raise BadInputFile(
                    src, f"{option} names dimension(s) {', '.join(missing)} not in the file (it has: {', '.join(sorted(all_dims))})"
                )
    names = [a.name for a in arrays]
    if variables:
        unknown = [v for v in variables if v not in names]
        if unknown:
            raise BadInputFile(src, f"--variables: no variable(s) {', '.join(unknown)} (it has: {', '.join(names)})")
        wanted = set(variables)
        # Coordinates of the chosen variables come along, so the result is a dataset.
        chosen_dims = {d for a in arrays if a.name in wanted for d in a.dims}
        arrays = [a for a in arrays if a.name in wanted or (a.is_coord and a.name in chosen_dims)]

    codecs = compressor_codecs(compressor)
    compressor_codecs(INTERMEDIATE_COMPRESSOR)
    target_bytes = int(target_chunk_mb * 10**6)
    source_concurrency = 1 if kind == "hdf5" else planner.MAX_IO_CONCURRENCY
    plan_vars: dict[str, dict] = {}
    skipped = []
    units: list[dict] = []
    for array in arrays:
        if array.dtype.kind not in CORE_KINDS:
            reason = f"data type {array.dtype} has no Zarr v3 core data type (strings/objects are not in the spec)"
            log.warning("skipping variable %s: %s", array.name, reason)
            skipped.append({"variable": array.name, "reason": reason})
            continue
        target = _target_chunks(array, chunks, target_bytes)
        shard_shape = _target_shards(array, shards, target)
        spec = planner.ArraySpec(
            name=array.name,
            shape=array.shape,
            itemsize=array.dtype.itemsize,
            source_chunks=tuple(min(max(1, c), max(1, n)) for c, n in zip(array.chunks, array.shape)),
            target_chunks=target,
            target_shards=shard_shape,
        )
        try:
            array_plan = planner.plan_array(spec, int(max_mem / MEMORY_MODEL_HEADROOM), source_concurrency)
        except planner.PlanError as error:
            raise UserError(f"--max-mem {max_mem} B (planned as {int(max_mem / MEMORY_MODEL_HEADROOM)} B after headroom): {error}") from None
        attrs = dict(array.attrs)
        fill = attrs.get("_FillValue")
        if fill is not None:
            fill_value = np.asarray(fill, dtype=array.dtype).reshape(-1)[0].item()
        else:
            fill_value = float("nan") if array.dtype.kind in "fc" else 0
        metadata = _array_metadata(
            array.name, array.shape, array.dtype, target, shard_shape, codecs, fill_value,
            _json_attrs(attrs, array.dtype), array.dims,
        )
        intermediate = None
        if array_plan.intermediate_chunks is not None:
            intermediate = _array_metadata(
                array.name, array.shape, array.dtype, array_plan.intermediate_chunks, None,
                compressor_codecs(INTERMEDIATE_COMPRESSOR), fill_value, {}, array.dims,
            )
        plan_vars[array.name] = {
            "dims": list(array.dims),
            "shape": list(array.shape),
            "dtype": array.dtype.str,
            "source_chunks": list(spec.source_chunks),
            "chunks": list(target),
            "shards": list(shard_shape) if shard_shape else None,
            "intermediate_chunks": list(array_plan.intermediate_chunks) if array_plan.intermediate_chunks else None,
            "stages": [stage.to_dict() for stage in array_plan.stages],
            "metadata": metadata,
            "intermediate_metadata": intermediate,
        }
        units.extend(array_plan.units)
    if not plan_vars:
        raise BadInputFile(src, "holds no variable that Zarr v3 can store: " + "; ".join(s["reason"] for s in skipped))
    units.sort(key=lambda u: u["stage"])  # stable: variables keep their order within a stage
    for k, unit in enumerate(units):
        unit["id"] = k
    plan = {
        "version": PLAN_VERSION,
        "source": src,
        "source_kind": kind,
        "destination": dst,
        "compressor": compressor or "none",
        "max_mem": max_mem,
        "stages": 1 + max((u["stage"] for u in units), default=0),
        "peak_unit_memory": max((s["unit_memory"] for v in plan_vars.values() for s in v["stages"]), default=0),
        "group_attributes": _json_attrs(global_attrs),
        "variables": plan_vars,
        "skipped": skipped,
        "units": units,
    }
    if prepare:
        _clear_destination(dst)
        if not is_s3_url(dst):
            Path(dst).mkdir(parents=True, exist_ok=True)
        _store_set(open_store(dst), f"{STAGING}/plan.json", json.dumps(plan).encode())
    return plan


def load_plan(dst: str) -> dict:
    """The plan ``plan_rechunk(prepare=True)`` stored in DST."""
    raw = _store_get(open_store(str(dst), read_only=True), f"{STAGING}/plan.json") if _destination_state(str(dst)) != "absent" else None
    if raw is None:
        raise BadInputFile(dst, f"holds no rechunk plan ({STAGING}/plan.json); run with --plan-only first")
    return json.loads(raw)


# --- units --------------------------------------------------------------------------


def _open_writer(store, path: str, metadata: dict):
    """A zarr Array over ``store/path`` that writes chunks but never its ``zarr.json``."""
    import zarr
    from zarr.core.metadata.v3 import ArrayV3Metadata
    from zarr.storage import StorePath

    async_array = zarr.AsyncArray(
        metadata=ArrayV3Metadata.from_dict(metadata), store_path=StorePath(store, path), config={"write_empty_chunks": False}
    )
    return zarr.Array(async_array)


class DirectChunkCodec:
    """Encode/decode whole chunks of an unsharded Zarr v3 array with numcodecs directly.

    Written by hand because zarr-python's per-chunk async codec pipeline costs
    about as much as Blosc/Zstd itself on one core (measured: writing 119 MiB in
    96 KB chunks took 7.6 s through ``Array.__setitem__``, 3.6 s with the same
    numcodecs encoder and plain writes). It builds the very codecs zarr builds
    from the same metadata (``Blosc.from_config`` / ``Zstd.from_config``), pads
    edge chunks with the fill value and skips chunks that equal it (zarr's
    ``write_empty_chunks=False``), so the bytes are zarr's own — a test
    compares them with zarr's. Sharded arrays and any other codec chain go
    through zarr-python unchanged.
    """

    def __init__(self, metadata: dict):
        from numcodecs import Blosc, Zstd

        self.shape = tuple(metadata["shape"])
        self.chunk_shape = tuple(metadata["chunk_grid"]["configuration"]["chunk_shape"])
        self.dtype = np.dtype(_ZARR_DTYPES[metadata["data_type"]]).newbyteorder("<")
        self.separator = metadata["chunk_key_encoding"].get("configuration", {}).get("separator", "/")
        from zarr.core.metadata.v3 import ArrayV3Metadata

        self.fill_value = np.asarray(ArrayV3Metadata.from_dict(metadata).fill_value, dtype=self.dtype)
        codecs = metadata["codecs"]
        self.compressor = None
        if codecs[1:]:
            conf = codecs[1].get("configuration", {})
            if codecs[1]["name"] == "blosc":
                shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[conf["shuffle"]]
                self.compressor = Blosc.from_config(
                    {"cname": conf["cname"], "clevel": conf["clevel"], "shuffle": shuffle,
                     "blocksize": conf.get("blocksize", 0), "typesize": conf.get("typesize", self.dtype.itemsize)}
                )
            else:
                self.compressor = Zstd.from_config({"level": conf["level"], "checksum": conf.get("checksum", False)})

    @staticmethod
    def supports(metadata: dict) -> bool:
        codecs = metadata.get("codecs", [])
        return (
            metadata["chunk_grid"]["name"] == "regular"
            and metadata["chunk_key_encoding"]["name"] == "default"
            and metadata["data_type"] in _ZARR_DTYPES
            and bool(codecs)
            and codecs[0]["name"] == "bytes"
            and codecs[0].get("configuration", {}).get("endian", "little") == "little"
            and len(codecs) <= 2
            and all(c["name"] in ("blosc", "zstd") for c in codecs[1:])
            and not metadata.get("storage_transformers")
        )

    def key(self, index) -> str:
        return "c" + "".join(self.separator + str(i) for i in index) if index else "c"

    def _chunks_in(self, start, stop):
        ranges = [range(a // c, -(-b // c)) for a, b, c in zip(start, stop, self.chunk_shape)]
        import itertools

        return itertools.product(*ranges)

    def encode(self, chunk: np.ndarray) -> bytes | None:
        """One chunk's stored bytes; None when it equals the fill value everywhere (not stored)."""
        if chunk.shape != self.chunk_shape:
            padded = np.full(self.chunk_shape, self.fill_value, dtype=self.dtype)
            padded[tuple(slice(0, n) for n in chunk.shape)] = chunk
            chunk = padded
        chunk = np.ascontiguousarray(chunk, dtype=self.dtype)
        flat = chunk.reshape(-1)
        fill = self.fill_value
        # Cheap rejection first: most chunks differ from the fill value in their first element.
        if fill.dtype.kind in "fc" and np.isnan(fill):
            if np.isnan(flat[0]) and np.isnan(flat).all():
                return None
        elif flat[0] == fill and (flat == fill).all():
            return None
        if self.compressor is None:
            return chunk.tobytes()
        return self.compressor.encode(chunk)  # the buffer itself: no extra copy

    def decode(self, data: bytes) -> np.ndarray:
        raw = data if self.compressor is None else self.compressor.decode(data)
        return np.frombuffer(raw, dtype=self.dtype).reshape(self.chunk_shape)

    def write_region(self, store, path: str, start, data: np.ndarray, concurrency: int) -> None:
        """Write ``data`` at ``start``: a region made of whole chunks (edge chunks at the array's end)."""
        from zarr.core.buffer import default_buffer_prototype

        stop = [a + n for a, n in zip(start, data.shape)]
        prototype = default_buffer_prototype()

        async def write_all():
            if not store._is_open:
                await store._open()
            pending = set()
            for key, encoded in self._encoded(start, stop, data, path):
                pending.add(asyncio.ensure_future(store.set(key, prototype.buffer.from_bytes(encoded))))
                if len(pending) >= concurrency:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        task.result()
            for task in pending:
                await task

        _run(write_all())

    def _encoded(self, start, stop, data, path):
        """(key, bytes) of every stored chunk of the region, in C order."""
        for index in self._chunks_in(start, stop):
            lo = [i * c for i, c in zip(index, self.chunk_shape)]
            hi = [min(n, l + c) for l, c, n in zip(lo, self.chunk_shape, self.shape)]
            piece = data[tuple(slice(l - a, h - a) for l, h, a in zip(lo, hi, start))]
            encoded = self.encode(piece)
            if encoded is not None:
                yield f"{path}/{self.key(index)}", encoded

    def read_region(self, store, path: str, start, stop, concurrency: int) -> np.ndarray:
        """The region [start, stop) decoded from whole chunks (absent chunks read as the fill value)."""
        from zarr.core.buffer import default_buffer_prototype

        out = np.empty([b - a for a, b in zip(start, stop)], dtype=self.dtype)
        prototype = default_buffer_prototype()

        async def read_all():
            if not store._is_open:
                await store._open()
            indexes = list(self._chunks_in(start, stop))
            for first in range(0, len(indexes), max(1, concurrency)):
                batch = indexes[first : first + max(1, concurrency)]
                blobs = await asyncio.gather(*(store.get(f"{path}/{self.key(i)}", prototype=prototype) for i in batch))
                for index, blob in zip(batch, blobs):
                    lo = [i * c for i, c in zip(index, self.chunk_shape)]
                    src = tuple(slice(max(a, l) - l, min(b, l + c) - l) for a, b, l, c in zip(start, stop, lo, self.chunk_shape))
                    dst = tuple(slice(max(a, l) - a, min(b, l + c) - a) for a, b, l, c in zip(start, stop, lo, self.chunk_shape))
                    out[dst] = self.fill_value if blob is None else self.decode(blob.to_bytes())[src]

        _run(read_all())
        return out


_ZARR_DTYPES = {
    "bool": "?", "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8", "uint8": "u1", "uint16": "u2",
    "uint32": "u4", "uint64": "u8", "float16": "f2", "float32": "f4", "float64": "f8",
    "complex64": "c8", "complex128": "c16",
}


def _done_key(k: int) -> str:
    return f"{STAGING}/done/{k:08d}"


def _intermediate_path(name: str) -> str:
    return f"{STAGING}/intermediate/{name}"


def _store_exists(store, key: str) -> bool:
    async def exists():
        if not store._is_open:
            await store._open()
        return await store.exists(key)

    return _run(exists())


def units_feeding(plan: dict, unit: dict) -> list[int]:
    """Ids of the previous stage's units (same variable) that write what ``unit`` reads.

    The reader decodes whole chunks of the array it reads (the intermediate),
    so the region is widened to that array's chunk grid first. Units of the
    previous stage are aligned to that grid, so each chunk has exactly one writer.
    """
    if unit["stage"] == 0:
        return []
    var = plan["variables"][unit["variable"]]
    read_block = var["stages"][unit["stage"]]["read_block"]
    lo = [a // c * c for a, c in zip(unit["start"], read_block)]
    hi = [min(n, -(-b // c) * c) for b, c, n in zip(unit["stop"], read_block, var["shape"])]
    return [
        u["id"]
        for u in plan["units"]
        if u["variable"] == unit["variable"]
        and u["stage"] == unit["stage"] - 1
        and all(a < h and l < b for a, b, l, h in zip(u["start"], u["stop"], lo, hi))
    ]


def _catch_up(plan: dict, unit: dict, store, source_cache: dict | None) -> tuple[list[int], int]:
    """Run, one at a time, the earlier-stage units ``unit`` reads from that are not done yet.

    Why duplicate work instead of waiting (or failing, as before): a fan-out
    then needs no ordering between stages, no second Map and no locks, and a
    crashed or slow worker never blocks another. It is safe because
    - a unit is idempotent and deterministic: its chunks' bytes depend only on
      the plan and the source, so two workers that run the same earlier unit
      write identical bytes;
    - every chunk write is atomic: S3 PUTs are, and zarr's LocalStore writes
      a temporary file and renames it (zarr-python >= 3.1.3, #3412; pinned in
      pyproject.toml), so a reader never sees half a chunk even while another
      worker rewrites it;
    - a ``done`` marker is written only after all of a unit's chunks, and it
      is what makes a later unit skip the catch-up.
    Memory stays within the bound: the earlier units run one after the other
    and free their buffers before this unit reads. The duplicated work is
    bounded by the parallelism (only units running at the same moment can
    both do one earlier unit); each worker visits the missing units in its own
    order (seeded by its id) and re-checks the marker right before running
    one, so concurrent workers mostly pick different units. Measured in
    README (zarr section).
    """
    needed = units_feeding(plan, unit)
    if not needed:
        return [], 0
    done = set(_store_list(store, f"{STAGING}/done/"))
    missing = [j for j in needed if _done_key(j) not in done]
    random.Random(unit["id"]).shuffle(missing)
    ran: list[int] = []
    copied = 0
    cache = source_cache if source_cache is not None else {}  # one open source for all of them
    try:
        for j in missing:
            result = run_unit(plan, j, _source_cache=cache)  # skipped if another worker finished it meanwhile
            if not result["skipped"]:
                ran += [j, *result["ran_earlier"]]
                copied += result["bytes"]
    finally:
        if source_cache is None and cache.get("hdf5") is not None:
            cache["hdf5"].close()
    return ran, copied


def run_unit(plan: dict, k: int, _source_cache: dict | None = None) -> dict:
    """Copy work unit ``k`` of ``plan``; returns {"unit", "bytes", "seconds", "ran_earlier", "skipped"}.

    Idempotent: a unit whose ``done`` marker exists is skipped (``skipped``;
    e.g. a retry, or a stage-0 unit a later unit already ran), and running it
    again would write the same chunks. Units may run in any order and with
    any parallelism, across stages too: a unit of stage s > 0 first runs the
    units of stage s - 1 that write what it reads and have not left their
    marker (``ran_earlier`` lists them; see ``_catch_up`` for why this is
    safe). ``bytes`` counts what this call copied, its catch-up included.
    """
    import zarr

    if not 0 <= k < len(plan["units"]):
        raise UserError(f"--unit {k}: the plan has units 0..{len(plan['units']) - 1}")
    fix_mmap_threshold()
    started = time.perf_counter()
    unit = plan["units"][k]
    var = plan["variables"][unit["variable"]]
    stage = var["stages"][unit["stage"]]
    dst_store = open_store(plan["destination"])
    if _store_exists(dst_store, _done_key(k)):
        return {"unit": k, "bytes": 0, "seconds": round(time.perf_counter() - started, 6), "ran_earlier": [],
                "skipped": True}
    ran_earlier, caught_up_bytes = _catch_up(plan, unit, dst_store, _source_cache)
    region = tuple(slice(a, b) for a, b in zip(unit["start"], unit["stop"]))
    dtype = np.dtype(var["dtype"])

    # Read: one region, decoded chunk by chunk by the reader.
    with zarr.config.set({"async.concurrency": stage["read_concurrency"]}):
        if stage["reads"] == "intermediate":
            direct = DirectChunkCodec(var["intermediate_metadata"])
            data = direct.read_region(
                dst_store, _intermediate_path(unit["variable"]), unit["start"], unit["stop"], stage["read_concurrency"]
            )
        elif plan["source_kind"] == "zarr":
            source = zarr.open_group(open_store(plan["source"], read_only=True), mode="r")
            data = source[unit["variable"]][region]
        else:
            cache = _source_cache if _source_cache is not None else {}
            handle = cache.get("hdf5")
            if handle is None:
                handle = cache["hdf5"] = _open_hdf5(plan["source"])
            dataset = handle[unit["variable"]]
            data = dataset[region] if region else dataset[()]
            if _source_cache is None:
                handle.close()
    data = np.asarray(data, dtype=dtype)

    # Write: whole chunks (or shards) only — the unit is aligned to them.
    if stage["writes"] == "intermediate":
        path, metadata = _intermediate_path(unit["variable"]), var["intermediate_metadata"]
    else:
        path, metadata = unit["variable"], var["metadata"]
    if DirectChunkCodec.supports(metadata):
        DirectChunkCodec(metadata).write_region(dst_store, path, unit["start"], data, stage["write_concurrency"])
    else:
        writer = _open_writer(dst_store, path, metadata)
        with zarr.config.set({"async.concurrency": stage["write_concurrency"]}):
            if region:
                writer[region] = data
            else:
                writer[...] = data
    nbytes = int(data.nbytes)
    del data
    _store_set(dst_store, _done_key(k), json.dumps(unit).encode())
    return {"unit": k, "bytes": nbytes + caught_up_bytes, "seconds": round(time.perf_counter() - started, 6),
            "ran_earlier": ran_earlier, "skipped": False}


def finalize(plan: dict) -> dict:
    """Publish the store: arrays' metadata, then the consolidated root ``zarr.json`` last."""
    import zarr
    from zarr.storage import MemoryStore

    dst = plan["destination"]
    store = open_store(dst)
    done = set(_store_list(store, f"{STAGING}/done/"))
    missing = [u["id"] for u in plan["units"] if _done_key(u["id"]) not in done]
    if missing:
        raise UserError(
            f"{dst}: cannot finalize, {len(missing)} of {len(plan['units'])} units are not done "
            f"(first: {missing[:5]}); run them with --unit K"
        )
    # Build the whole hierarchy's metadata in memory and let zarr consolidate it.
    memory = MemoryStore()
    zarr.create_group(memory, attributes=plan["group_attributes"], zarr_format=3)
    for name, var in plan["variables"].items():
        _store_set(memory, f"{name}/zarr.json", json.dumps(var["metadata"]).encode())
    import warnings

    with warnings.catch_warnings():
        # zarr warns that consolidated metadata is not yet part of the v3 spec; xarray and zarr read it.
        warnings.simplefilter("ignore", UserWarning)
        zarr.consolidate_metadata(memory, zarr_format=3)
    for name in plan["variables"]:
        _store_set(store, f"{name}/zarr.json", _store_get(memory, f"{name}/zarr.json"))
    _store_delete_dir(store, f"{STAGING}/intermediate")
    _store_set(store, "zarr.json", _store_get(memory, "zarr.json"))
    _store_delete_dir(store, STAGING)
    if not is_s3_url(dst):
        staging = Path(dst) / STAGING
        if staging.exists():
            shutil.rmtree(staging)
    return {"destination": dst, "variables": list(plan["variables"]), "units": len(plan["units"])}


def rechunk(src, dst, progress: bool = True, **options) -> dict:
    """Plan, run every unit in order, finalize; a progress bar over the bytes copied."""
    from tqdm import tqdm

    plan = plan_rechunk(src, dst, prepare=True, **options)
    total = sum(
        math.prod(b - a for a, b in zip(u["start"], u["stop"])) * np.dtype(plan["variables"][u["variable"]]["dtype"]).itemsize
        for u in plan["units"]
    )
    started = time.perf_counter()
    cache: dict = {}
    try:
        with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="rechunk", disable=not progress) as bar:
            for k in range(len(plan["units"])):
                result = run_unit(plan, k, _source_cache=cache)
                bar.update(result["bytes"])
    finally:
        if cache.get("hdf5") is not None:
            cache["hdf5"].close()
    finalize(plan)
    seconds = time.perf_counter() - started
    return {
        "destination": str(dst),
        "units": len(plan["units"]),
        "stages": plan["stages"],
        "bytes": total,
        "seconds": round(seconds, 3),
        "skipped": plan["skipped"],
    }
