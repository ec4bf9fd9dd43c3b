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
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from layoutlab import settings
from layoutlab.bounded_decoding import within
from layoutlab.convert import rechunk_plan as planner
from layoutlab.convert.heap import set_malloc_thresholds
from layoutlab.convert.phony_dims import HDF5_READ_ERRORS as _HDF5_READ_ERRORS
from layoutlab.convert.phony_dims import phony_dimension_names
from layoutlab.errors import DAMAGED_HDF5_ERRORS, BadInputFile, UserError, damaged_reason, raised_by_h5py
from layoutlab.storage import S3Location, is_s3_url
from layoutlab.units import parse_size  # the one size parser; benchmarks/ call it from here

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


@functools.cache
def fix_mmap_threshold() -> bool:
    """Set glibc's mmap threshold once per process (convert/heap.py); False where it is not glibc."""
    return set_malloc_thresholds(mmap_threshold=MMAP_THRESHOLD)


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


_runners = threading.local()


def _run(coro):
    """Run a store coroutine on this thread's event loop, made once (``asyncio.Runner``) instead of per
    call: ``asyncio.run`` made and closed a loop and its executor each time, ~0.6 ms: ~10 of the 32-38 s a
    2,001-variable NetCDF-4 file (14,006 calls) took to rechunk. The loop runs in the calling thread,
    as ``asyncio.run``'s did, so a signal stops the work where it is; a call that raises (SIGTERM's
    Terminated too) closes it there, its tasks cancelled, as ``asyncio.run`` does, and a forked child
    makes its own.

    SIGTERM's ``Terminated`` raised while the loop runs one of its callbacks (``_read_from_self``, woken by
    the signal) is caught by asyncio, which re-raises only SystemExit and KeyboardInterrupt and logs the
    rest: the signal was swallowed and the command exited 0 (issue 36, 1 run in ~25). The loop's
    exception handler therefore keeps it, cancels the loop's tasks, and it is raised here."""
    runner = getattr(_runners, "runner", None)
    if runner is None or _runners.pid != os.getpid():
        runner, _runners.pid = asyncio.Runner(), os.getpid()
        runner.get_loop().set_exception_handler(_stop_on_termination)
        _runners.runner = runner
    _runners.terminated = None
    try:
        result = runner.run(coro)
    except BaseException:
        _runners.runner = None
        runner.close()
        if _runners.terminated is not None:  # (the cancellation it caused: the signal is the reason)
            raise _runners.terminated from None
        raise
    if _runners.terminated is not None:  # (the coroutine ended before the cancellation reached it)
        _runners.runner = None
        runner.close()
        raise _runners.terminated
    return result


def _stop_on_termination(loop, context) -> None:
    """The loop's exception handler: a ``Terminated`` (SIGTERM) swallowed in a callback stops the work."""
    from layoutlab.errors import Terminated

    error = context.get("exception")
    if isinstance(error, Terminated):
        _runners.terminated = error
        for task in asyncio.all_tasks(loop):
            task.cancel()
        return
    loop.default_exception_handler(context)


def _store_get(store, key: str) -> bytes | None:
    return _store_get_many(store, [key])[key]


def _store_set(store, key: str, data: bytes) -> None:
    _store_set_many(store, [(key, data)])


# Keys written or read at once by the batched calls below (the store's own concurrency setting is zarr's).
BATCH_CONCURRENCY = 32


def _store_set_many(store, items) -> None:
    """Write every (key, bytes) of ``items`` in one run of the loop, ``BATCH_CONCURRENCY`` at a
    time: one loop run and one wake-up per key instead of a loop run each (finalize writes every array's
    ``zarr.json``: 1,339 of them for GEDI L2B, ~8 of the ~9 s of CPU it took, one key at a time)."""
    from zarr.core.buffer import default_buffer_prototype

    prototype = default_buffer_prototype()

    async def put_all():
        if not store._is_open:
            await store._open()
        limit = asyncio.Semaphore(BATCH_CONCURRENCY)

        async def put(key, data):
            async with limit:
                await store.set(key, prototype.buffer.from_bytes(data))

        await asyncio.gather(*(put(key, data) for key, data in items))

    _run(put_all())


def _store_get_many(store, keys) -> dict[str, bytes | None]:
    """{key: its bytes, or None when absent} of every key, in one run of the loop (see ``_store_set_many``)."""
    from zarr.core.buffer import default_buffer_prototype

    prototype = default_buffer_prototype()

    async def get_all():
        if not store._is_open:
            await store._open()
        limit = asyncio.Semaphore(BATCH_CONCURRENCY)

        async def get(key):
            async with limit:
                buf = await store.get(key, prototype=prototype)
                return None if buf is None else buf.to_bytes()

        return dict(zip(keys, await asyncio.gather(*(get(key) for key in keys))))

    return _run(get_all())


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
    name: str  # path inside the source, "var" or "group/sub/var": the array's path in DST
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: np.dtype  # numpy's view; object for variable-length strings (kind "string")
    chunks: tuple[int, ...]
    attrs: dict
    is_coord: bool
    kind: str = "numeric"  # numeric | string (variable-length UTF-8) | bytes (fixed-length char)
    stored_shape: tuple[int, ...] | None = None  # the HDF5 dataset's own shape when shorter than its dimensions
    source_path: str | None = None  # the HDF5 path when it differs from name (netCDF's _nc4_non_coord_ prefix)


# Zarr v3 data types for what is not a core numeric type: variable-length strings
# become the "string" data type (UTF-8, a registered Zarr v3 extension that zarr-python
# 3.1+ writes); fixed-length byte strings (NetCDF char arrays, HDF5 fixed strings) keep
# their bytes as zarr-python's "null_terminated_bytes" (not yet in the v3 spec; zarr-python
# warns when writing it; trailing NULs are padding, as in NetCDF). xarray reads both back
# as it reads the source (char arrays decode to strings the same way).
STRING_KINDS = {"string": "variable-length UTF-8 strings -> Zarr v3 'string'",
                "bytes": "fixed-length byte strings -> zarr-python 'null_terminated_bytes'"}
STRING_ITEMSIZE = 64  # the planner's per-element memory guess for variable-length strings


def source_kind(src: str) -> str:
    """``hdf5`` or ``zarr``; a BadInputFile for anything else (or nothing)."""
    if is_s3_url(src):
        store = open_store(src, read_only=True)
        keys = set(_store_list(store))
        if keys & {"zarr.json", ".zgroup", ".zattrs", ".zmetadata"}:
            return "zarr"
        from layoutlab.storage import s3fs_filesystem

        try:
            with s3fs_filesystem(for_url=src).open(src, "rb", block_size=2**16) as f:
                head = _hdf5_signature_at(f, f.size)
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
        from layoutlab.hdf5_input import require_regular_file

        require_regular_file(path, src)  # (a FIFO would block the read below forever)
        with open(path, "rb") as f:
            head = _hdf5_signature_at(f, path.stat().st_size)
    if head is not None:
        return "hdf5"
    raise BadInputFile(src, "is not an HDF5/NetCDF-4 file or a Zarr store (no HDF5 signature at offset 0, 512, "
                            "1024, ...)")


def _hdf5_signature_at(stream, size: int) -> int | None:
    """Where the HDF5 signature is in ``stream``: at 0, or after a user block at 512, 1024, 2048, ... (where
    HDF5 itself looks: a valid file with a 512-byte user block was called "no HDF5 signature", issue 36)."""
    from layoutlab.formats.sniff import HDF5_SIGNATURE

    offset = 0
    while offset + len(HDF5_SIGNATURE) <= size:
        stream.seek(offset)
        if stream.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
            return offset
        offset = 512 if offset == 0 else offset * 2
    return None


def _open_hdf5(src: str, rdcc_nbytes: int = 2**20):
    """An h5py File; a small chunk cache because the planner's memory model counts chunks itself."""
    from layoutlab.hdf5_input import open_input

    if is_s3_url(src):
        from layoutlab.storage import s3fs_filesystem

        fileobj = s3fs_filesystem(for_url=src).open(src, "rb", block_size=8 * 2**20, cache_type="readahead")
        return open_input(fileobj, src, rdcc_nbytes=rdcc_nbytes)
    return open_input(src, rdcc_nbytes=rdcc_nbytes)


def inspect_source(src: str, kind: str) -> tuple[list[SourceArray], dict]:
    """Every root-group variable of the source and the global attributes (see ``describe_source`` for all groups)."""
    description = describe_source(src, kind)
    return [a for a in description["arrays"] if "/" not in a.name], description["groups"][""]


def describe_source(src: str, kind: str) -> dict:
    """What the source holds: {"arrays": [SourceArray], "groups": {path: attrs}, "skipped": [...]}.

    HDF5 / NetCDF-4 sources are walked with h5py, every group included (a Zarr
    group per HDF5 group); names, dimensions, shapes and attributes are what
    ``xarray.open_dataset(SRC, group=G, engine="h5netcdf", phony_dims="sort")``
    shows. Zarr sources are read through xarray (root group; sub-groups are listed
    as skipped).
    """
    if kind == "zarr":
        return _describe_zarr(src)
    try:
        handle = _open_hdf5(src)
    except (OSError, ValueError) as error:
        raise BadInputFile(src, f"cannot be opened as HDF5 ({error.__class__.__name__}: {error})") from None
    try:
        return _describe_hdf5(handle, src)
    except DAMAGED_HDF5_ERRORS as error:
        if not raised_by_h5py(error):
            raise
        raise BadInputFile(src, f"HDF5 signature found but the file cannot be read (damaged): "
                                f"{damaged_reason(error)}") from None
    finally:
        handle.close()


def _describe_zarr(src: str) -> dict:
    import xarray as xr

    try:
        ds = xr.open_zarr(open_store(src, read_only=True), decode_cf=False, chunks=None, consolidated=None)
    except (OSError, ValueError, KeyError) as error:
        raise BadInputFile(src, f"cannot be read as a dataset ({error.__class__.__name__}: {error})") from None
    arrays = []
    with ds:
        for name, var in ds.variables.items():
            arrays.append(SourceArray(
                name=str(name), dims=tuple(str(d) for d in var.dims), shape=tuple(int(n) for n in var.shape),
                dtype=np.dtype(var.dtype), chunks=tuple(int(c) for c in (var.encoding.get("chunks") or var.shape)),
                attrs=dict(var.attrs), is_coord=var.dims == (name,),
            ))
        global_attrs = dict(ds.attrs)
    skipped = []
    import zarr

    root = zarr.open_group(open_store(src, read_only=True), mode="r")
    for name, _ in root.groups():
        skipped.append({"group": name, "reason": "sub-group of a Zarr source: only the root group of a Zarr source is rechunked"})
    return {"arrays": arrays, "groups": {"": global_attrs}, "skipped": skipped}




class _AttrView:
    """What xarray's h5netcdf backend reads an object's attributes through (name + h5netcdf's attribute mapping)."""

    def __init__(self, obj):
        import h5py
        from h5netcdf.attrs import Attributes

        self.name = obj.name
        self.attrs = Attributes(obj.attrs, None, h5py)


# An attribute is metadata: each copy lands in zarr.json, which every reader downloads and parses whole.
# Real products' largest (ISO/XML metadata, long histories) are a few hundred KB; a larger one is left
# out with the reason instead of being held, JSON-encoded and written several times over (a 300 MiB
# string attribute took rechunk to 1.79 GB of memory and a 314 MB zarr.json).
MAX_ATTRIBUTE_BYTES = 16 * 2**20


def _too_large(size: int) -> str:
    return (f"attribute of {size / 2**20:.1f} MiB: larger than the {MAX_ATTRIBUTE_BYTES // 2**20} MiB an attribute "
            "may hold in a Zarr store's metadata (every reader downloads zarr.json whole)")


def _attribute_bytes(obj, key: str) -> int:
    """Bytes the attribute's value holds, known before reading it: stored bytes of a fixed-size value, the
    lengths of a variable-length one from its descriptors (``attribute_value_bytes``: a 100 MiB string
    was read whole, 659 MB of memory, only to be left out). 0 where unknown before reading (variable-length
    parts inside a compound): its size is then checked once read."""
    import h5py

    from layoutlab.hdf5_input import attribute_value_bytes

    try:
        return attribute_value_bytes(h5py.h5a.open(obj.id, key.encode("utf-8", "surrogateescape"))) or 0
    except (OSError, KeyError, ValueError, TypeError, AttributeError, RuntimeError):  # (unreadable: said when read)
        return 0


def _value_bytes(value) -> int:
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "O":
            return int(sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in value.ravel()))
        return int(value.nbytes)
    return 0


def _read_attrs(obj, owner: str, skipped: list) -> dict:
    """Attributes as xarray's h5netcdf backend reads them; one that cannot be read is listed in ``skipped``."""
    from h5netcdf.attrs import _HIDDEN_ATTRS
    from xarray.backends.h5netcdf_ import _read_attributes

    view = _AttrView(obj)
    out = {}
    for key in list(obj.attrs.keys()):
        if key in _HIDDEN_ATTRS:
            continue
        stored = _attribute_bytes(obj, key)
        if stored > MAX_ATTRIBUTE_BYTES:  # (known before reading it)
            skipped.append({"variable": owner, "attribute": key, "reason": _too_large(stored)})
            continue
        try:
            value = view.attrs[key]
            held = _value_bytes(value)
            if held > MAX_ATTRIBUTE_BYTES:  # (variable-length parts inside a compound: known once read)
                skipped.append({"variable": owner, "attribute": key, "reason": _too_large(held)})
                continue
            out.update(_read_attributes(type("One", (), {"name": view.name, "attrs": {key: value}})()))
        except _HDF5_READ_ERRORS as error:
            skipped.append({"variable": owner, "attribute": key,
                            "reason": f"attribute cannot be read ({error.__class__.__name__}: {error})"})
    return out


# S3 keys are at most 1,024 bytes (so are many file systems' paths, in practice); a Zarr key is the
# destination's prefix + the object's path + a chunk key, so an object's path keeps room for the rest.
S3_MAX_KEY_BYTES = 1024
MAX_OBJECT_PATH_BYTES = 768


def _describe_hdf5(f, src: str) -> dict:
    import h5py
    from h5netcdf.core import NOT_A_VARIABLE

    from layoutlab.hdf5_input import data_outside_file, iter_objects, link_outside_file

    # One pass over the file: object address -> path (a dimension scale is found
    # from a variable's DIMENSION_LIST by address; asking HDF5 the name of a
    # dereferenced object searches the file, which made h5netcdf quadratic in the
    # number of variables: 153 s for 602 empty variables).
    paths: dict[int, str] = {}

    for name, obj in iter_objects(f):
        paths.setdefault(h5py.h5o.get_info(obj.id).addr, name)
    arrays: list[SourceArray] = []
    groups: dict[str, dict] = {}
    skipped: list[dict] = []
    datasets = []  # (path, dataset) in h5netcdf's order: a group's own objects, then its sub-groups
    dimids: dict[int, str] = {}
    phony: dict = {}

    # Groups in h5netcdf's order (a group's own objects, then its sub-groups, depth first), without
    # recursion: the depth of the hierarchy is the uploader's to choose. Each group is walked once, by
    # object address: a hard link back to an ancestor (a cycle) made a walk by path run until the task's
    # timeout (issue 36); a second link to a group is reported, not followed.
    pending = [(f, "")]
    walked_groups = {h5py.h5o.get_info(f.id).addr: "/"}
    while pending:
        group, prefix = pending.pop()
        groups[prefix] = _read_attrs(group, prefix or "/", skipped)
        subgroups = []
        for key in group:
            path = f"{prefix}/{key}" if prefix else key
            if len(path.encode("utf-8", "surrogateescape")) > MAX_OBJECT_PATH_BYTES:
                skipped.append({"variable": path[:120] + "...", "reason": f"a path of {len(path.encode('utf-8', 'surrogateescape'))} "
                                f"bytes (groups nested {path.count('/') + 1} deep): its Zarr keys would pass S3's "
                                f"{S3_MAX_KEY_BYTES}-byte limit; it and everything below it are not copied"})
                continue
            outside = link_outside_file(group, key)
            if outside is not None:
                skipped.append({"variable": path, "reason": outside})
                continue
            try:
                obj = group[key]
            except _HDF5_READ_ERRORS as error:
                skipped.append({"variable": path, "reason": f"cannot be opened ({error.__class__.__name__}: {error})"})
                continue
            if isinstance(obj, h5py.Group):
                address = h5py.h5o.get_info(obj.id).addr
                if address in walked_groups:
                    first = walked_groups[address]
                    cycle = first == "/" or path.startswith(first + "/")
                    skipped.append({"group": path, "reason": (
                        f"a hard link back to its ancestor group {first} (a cycle): that group is copied once, "
                        f"as {first}" if cycle else
                        f"a second hard link to the group {first}: that group is copied once, as {first}")})
                    continue
                walked_groups[address] = path
                subgroups.append((obj, path))
            elif isinstance(obj, h5py.Dataset):
                datasets.append((path, obj))
                if obj.attrs.get("CLASS") == b"DIMENSION_SCALE" and "_Netcdf4Dimid" in obj.attrs:
                    dimids[int(obj.attrs["_Netcdf4Dimid"])] = key
        pending.extend(reversed(subgroups))
    unlimited: dict[int, int] = {}  # dimension scale address -> current length (longest user)
    described = []
    for path, ds in datasets:
        attrs = ds.attrs
        is_scale = attrs.get("CLASS") == b"DIMENSION_SCALE"
        name = path.rsplit("/", 1)[-1]
        if ds.shape is None:
            skipped.append({"variable": path, "reason": "null dataspace (an HDF5 dataset with no shape and no values)"})
            continue
        if is_scale and NOT_A_VARIABLE in (attrs.get("NAME", b"") if isinstance(attrs.get("NAME", b""), bytes) else b""):
            if ds.maxshape and ds.maxshape[0] is None:
                unlimited.setdefault(h5py.h5o.get_info(ds.id).addr, int(ds.shape[0]) if ds.shape else 0)
            continue  # a netCDF dimension, not a variable
        try:
            dims, scales = _dimensions(f, path, ds, is_scale, dimids, paths, phony)
        except _HDF5_READ_ERRORS as error:
            skipped.append({"variable": path, "reason": f"its dimensions cannot be read ({error.__class__.__name__}: {error})"})
            continue
        for axis, addr in enumerate(scales):
            if addr is not None and ds.maxshape[axis] is None:
                unlimited[addr] = max(unlimited.get(addr, 0), int(ds.shape[axis]))
        described.append((path, name, ds, dims, scales))
    for path, name, ds, dims, scales in described:
        shape = tuple(max(int(n), unlimited.get(a, 0)) if a is not None else int(n) for n, a in zip(ds.shape, scales))
        try:
            kind, reason = _data_kind(ds)
        except _HDF5_READ_ERRORS as error:  # a type h5py cannot map (HDF5 1.12 references): not this variable
            if not raised_by_h5py(error):
                raise
            kind, reason = "other", f"its data type cannot be read by h5py ({damaged_reason(error)})"
        reason = data_outside_file(ds) or reason  # never read, whatever its type
        if reason is None and math.prod(ds.shape) > 0:
            # A variable Zarr can hold but whose values cannot be decoded here fails the whole copy, naming
            # it: left out, the store would look complete without it (issue 36: an absent filter plugin
            # made rechunk exit 0 and the pipeline's variant READY without the variable's data).
            from layoutlab.convert.repack_hdf5 import missing_filters

            absent = missing_filters(ds)
            if absent:
                raise BadInputFile(src, f"variable {path} cannot be converted: its filter plugin is absent here "
                                        f"({', '.join(absent)}), so its values cannot be decoded")
            try:  # one element: a damaged first chunk, no conversion path
                with within(ds):
                    ds[(0,) * ds.ndim] if ds.ndim else ds[()]
            except _HDF5_READ_ERRORS as error:
                if "conversion path" not in str(error):  # (damage or a failing filter: never a silent gap)
                    raise BadInputFile(src, f"variable {path} cannot be converted: its values cannot be read "
                                            f"({damaged_reason(error)})") from None
                # a type HDF5 has no conversion for (a bitfield...): a type Zarr is not given, said in skipped
                reason = f"its data type cannot be converted by HDF5 ({damaged_reason(error)})"
        if reason is not None:
            skipped.append({"variable": path, "reason": reason})
            continue
        dtype = np.dtype(object) if kind == "string" else np.dtype(ds.dtype)
        clean = path.rpartition("/")[0] + ("/" if "/" in path else "") + name.replace("_nc4_non_coord_", "")
        attrs = _read_attrs(ds, path, skipped)
        if kind != "numeric" and "_FillValue" in attrs:  # xarray's Zarr reader decodes no string _FillValue attribute
            attrs.pop("_FillValue")
            skipped.append({"variable": path, "attribute": "_FillValue",
                            "reason": "a string _FillValue attribute: Zarr's reader cannot decode it (the array's fill value is empty)"})
        arrays.append(SourceArray(
            name=clean, source_path=path if clean != path else None, dims=dims, shape=shape, dtype=dtype,
            chunks=tuple(int(c) for c in (ds.chunks or shape)), attrs=attrs,
            is_coord=dims == (name.replace("_nc4_non_coord_", ""),), kind=kind, stored_shape=tuple(int(n) for n in ds.shape) if shape != ds.shape else None,
        ))
    return {"arrays": arrays, "groups": groups, "skipped": skipped}


def _dimensions(f, path, ds, is_scale, dimids, paths, phony) -> tuple[tuple[str, ...], tuple[int | None, ...]]:
    """(dimension names, dimension scale address per axis or None) as h5netcdf names them."""
    import h5py

    if ds.ndim == 0:
        return (), ()
    attrs = ds.attrs
    own = h5py.h5o.get_info(ds.id).addr
    if is_scale and "_Netcdf4Coordinates" in attrs:
        ids = [int(i) for i in np.atleast_1d(attrs["_Netcdf4Coordinates"])]
        names = tuple(dimids[i] for i in ids)
        return names, tuple(own if i == 0 else None for i in range(len(ids)))
    if "DIMENSION_LIST" in attrs:
        refs = attrs["DIMENSION_LIST"]
        if all(len(np.atleast_1d(r)) for r in refs):
            addrs = tuple(h5py.h5o.get_info(h5py.h5r.dereference(np.atleast_1d(r)[-1], f.id)).addr for r in refs)
            return tuple(paths[a].rsplit("/", 1)[-1] for a in addrs), addrs
    if is_scale and ds.ndim == 1:
        return (path.rsplit("/", 1)[-1],), (own,)
    # No dimension scales: h5netcdf's phony dimensions (phony_dims="sort"), as xarray names them.
    return phony_dimension_names(f, path, ds, phony), (None,) * ds.ndim


def _data_kind(ds) -> tuple[str, str | None]:
    """("numeric" | "string" | "bytes", None) or (kind, the reason it cannot be written)."""
    import h5py

    try:
        dtype = ds.dtype
    except TypeError as error:  # (h5py has no numpy type for it: say which HDF5 type, not a guess)
        tid = ds.id.get_type()
        if tid.detect_class(h5py.h5t.TIME):  # (PyTables' time columns: "No NumPy equivalent for TypeTimeID")
            return "other", "the HDF5 time type (H5T_TIME) has no NumPy or Zarr v3 data type"
        if tid.detect_class(h5py.h5t.REFERENCE):  # (HDF5 1.12's H5R_ref_t: "Unknown reference type")
            return "other", "HDF5 1.12-style references (H5R_ref_t) have no Zarr v3 data type"
        return "other", f"its HDF5 type has no NumPy equivalent ({error}), so no Zarr v3 data type"
    if dtype.kind in CORE_KINDS:
        if h5py.check_dtype(ref=dtype) is None:
            return "numeric", None
    string = h5py.check_string_dtype(dtype)
    if string is not None:
        return ("string", None) if string.length is None else ("bytes", None)
    if dtype.kind == "V" and dtype.names:
        what = "a compound type"
    elif h5py.check_dtype(ref=dtype) is not None:
        what = "object or region references"
    elif h5py.check_dtype(vlen=dtype) is not None:
        what = "variable-length sequences"
    elif dtype.subdtype is not None:
        what = f"an array type {dtype.subdtype[0]}{list(dtype.subdtype[1])}"
    elif dtype.kind == "V":
        what = "an opaque type"
    else:
        what = f"data type {dtype}"
    return "other", f"{what} has no Zarr v3 data type (only numbers, booleans and strings are written)"


# --- plan ---------------------------------------------------------------------------


def _json_attrs(attrs: dict, dtype: np.dtype | None = None, owner: str = "", skipped: list | None = None) -> dict:
    """Attributes as xarray writes them to Zarr v3 (so xarray reads them back identically).

    An attribute JSON cannot hold (references, compound values...) is left out and
    listed in ``skipped`` (when given) with the reason; without ``skipped`` it raises.
    """
    from xarray.backends.zarr import FillValueCoder, encode_zarr_attr_value

    out = {}
    for key, value in attrs.items():
        try:
            if key == "_FillValue" and dtype is not None and dtype.kind in CORE_KINDS:
                out[key] = FillValueCoder.encode(np.asarray(value).reshape(-1)[0].item(), dtype)
                continue
            value = encode_zarr_attr_value(value)
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            json.dumps(value, allow_nan=True)
            out[key] = value
        except (TypeError, ValueError, IndexError, OverflowError) as error:
            if skipped is None:
                raise
            skipped.append({"variable": owner, "attribute": key,
                            "reason": f"attribute value has no JSON form ({error.__class__.__name__}: {error})"})
    return out


def _fill_value(array: SourceArray):
    """The Zarr array's fill value: the source's _FillValue, else NaN / 0 / empty string."""
    if array.kind == "string":
        return ""
    if array.kind == "bytes":
        return b""
    fill = array.attrs.get("_FillValue")
    if fill is not None:
        try:
            return np.asarray(fill, dtype=array.dtype).reshape(-1)[0].item()
        except (TypeError, ValueError, IndexError, OverflowError):
            pass
    return float("nan") if array.dtype.kind in "fc" else (False if array.dtype.kind == "b" else 0)


# Array documents zarr made, by what besides shape, chunks, dimension names and attributes shapes them.
_ARRAY_TEMPLATES: dict[tuple, dict] = {}


def _array_metadata(name, shape, dtype, chunks, shards, codecs, fill_value, attrs, dims) -> dict:
    """The ``zarr.json`` document of one array, made by zarr itself (in memory).

    zarr makes one document per data type, codecs, fill value and rank; an array's own shape,
    chunk shape, dimension names and attributes are written into a copy of it. Why: asking zarr
    for every array took 8-15 ms each, most of a plan's time for a file of thousands of small
    variables (2,000 in netcdf-c's hdf5_compat1: 16 s a plan). Sharded arrays (their inner chunk
    shape is inside a codec) are always made by zarr.
    """
    if shards is not None or len(chunks) != len(shape) or not all(int(c) >= 1 for c in chunks):
        return _zarr_array_metadata(name, shape, dtype, chunks, shards, codecs, fill_value, attrs, dims)
    key = (getattr(dtype, "str", dtype), repr(codecs), type(fill_value), repr(fill_value), len(shape), bool(dims))
    template = _ARRAY_TEMPLATES.get(key)
    if template is None:
        ones = (1,) * len(shape)
        placeholder = tuple(f"dim_{i}" for i in range(len(shape))) if dims else dims
        template = _ARRAY_TEMPLATES[key] = _zarr_array_metadata(name, ones, dtype, ones, None, codecs, fill_value, {},
                                                                placeholder)
    document = json.loads(json.dumps(template))
    document["shape"] = [int(n) for n in shape]
    document["chunk_grid"]["configuration"]["chunk_shape"] = [int(c) for c in chunks]
    document["attributes"] = json.loads(json.dumps(attrs, allow_nan=True))
    if dims:
        document["dimension_names"] = list(dims)
    return document


def _zarr_array_metadata(name, shape, dtype, chunks, shards, codecs, fill_value, attrs, dims) -> dict:
    """``_array_metadata``, asking zarr for each array."""
    import warnings

    import zarr
    from zarr.storage import MemoryStore

    store = MemoryStore()
    with warnings.catch_warnings():
        # null_terminated_bytes (char arrays) is zarr-python's, not yet in the v3 spec: the plan's notes say so
        warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification.*")
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


def _target_chunks(array: SourceArray, chunks, target_bytes: int, record_chunk: int | None = None) -> tuple[int, ...]:
    if not array.shape:
        return ()
    if record_chunk:  # a table's rows / a swath's scan lines: the first axis in blocks, the others whole (index too)
        return (max(1, min(array.shape[0], record_chunk)), *(max(1, n) for n in array.shape[1:]))
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


def _stored_bytes(src: str, kind: str) -> int | None:
    """The input's size as stored (what its declared shapes are weighed against); None for a Zarr source,
    whose declared shapes are bounded by the absolute ceiling only."""
    if kind != "hdf5":
        return None
    if is_s3_url(src):
        from layoutlab.storage import s3fs_filesystem

        return int(s3fs_filesystem(for_url=src).size(src))
    return os.path.getsize(src)


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
    ceilings=None,
    record_chunk: int | None = None,
) -> dict:
    """Plan the rechunk of SRC into DST; JSON-serialisable.

    ``chunks``: {dim: size or None (whole extent)}, ``"auto"`` (balanced, about
    ``target_chunk_mb`` MB), or None (keep the source chunks). Dimensions not
    named keep their whole extent. 1-D coordinate variables are stored as one
    chunk. ``shards``: {dim: size}, whole multiples of the chunks.
    ``record_chunk`` (instead of ``chunks``): every array's first axis in chunks of this many elements, its
    other axes whole (a table's rows, a swath's scan lines; 1-D coordinates too).
    ``prepare``: check DST (refuse an existing one unless ``overwrite``) and
    store the plan in it for ``--unit`` / ``--finalize``.
    ``ceilings`` (``layoutlab.ceilings.Ceilings``; ``LAYOUTLAB_CEILINGS`` or the defaults when None):
    the objects and declared bytes the copy may make, refused before anything is written.
    """
    max_mem = parse_size(max_mem, "--max-mem")
    src, dst = str(src), str(dst)
    if isinstance(chunks, str) and chunks != "auto":
        chunks = parse_dim_spec(chunks)
    if isinstance(shards, str):
        shards = parse_dim_spec(shards, "--shards")
    if prepare:
        _check_destination(dst, overwrite)
    kind = source_kind(src)
    description = describe_source(src, kind)
    arrays, skipped = description["arrays"], list(description["skipped"])
    if not arrays:
        why = "; ".join(f"{s.get('variable') or s.get('group')}: {s['reason']}" for s in skipped if "attribute" not in s)
        raise BadInputFile(src, "holds no array variables" + (f" that can be written ({why})" if why else ""))
    all_dims = {d for a in arrays for d in a.dims}
    for option, spec in (("--chunks", chunks), ("--shards", shards)):
        if isinstance(spec, dict):
            missing = [d for d in spec if d not in all_dims]
            unnamed = sorted((a for a in arrays if a.dims and all(d.startswith("phony_dim_") for d in a.dims)),
                             key=lambda a: (len(a.dims), math.prod(a.shape)), reverse=True)
            if missing and unnamed and len(unnamed[0].dims) == len(spec):
                # (the true reason: the variable the plan was made for has no dimension scales, so its axes
                # have no names; a list of names "not in the file" sent users looking for a typo, issue 36)
                raise BadInputFile(src, f"variable {unnamed[0].name} has no dimension scales (netCDF dimensions), so "
                                        f"its axes have no names to chunk by: {option} names {', '.join(missing)}; "
                                        f"name its axes {', '.join(unnamed[0].dims)} (as xarray reads them), or "
                                        "attach dimension scales to it")
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
        # Coordinates of the chosen variables come along (from their own group), so the result is a dataset.
        chosen = {(a.name.rpartition("/")[0], d) for a in arrays if a.name in wanted for d in a.dims}
        arrays = [a for a in arrays if a.name in wanted or (a.is_coord and (a.name.rpartition("/")[0], a.dims[0]) in chosen)]
        skipped = [s for s in skipped if s.get("variable") in wanted]

    codecs = compressor_codecs(compressor)
    compressor_codecs(INTERMEDIATE_COMPRESSOR)
    target_bytes = int(target_chunk_mb * 10**6)
    source_concurrency = 1 if kind == "hdf5" else planner.MAX_IO_CONCURRENCY
    plan_vars: dict[str, dict] = {}
    units: list[dict] = []
    tally = planner.output_tally(ceilings or settings.value(settings.CEILINGS), _stored_bytes(src, kind))
    for array in arrays:
        target = _target_chunks(array, chunks, target_bytes, record_chunk)
        shard_shape = _target_shards(array, shards, target)
        spec = planner.ArraySpec(
            name=array.name,
            shape=array.shape,
            itemsize=STRING_ITEMSIZE if array.kind == "string" else array.dtype.itemsize,
            source_chunks=tuple(min(max(1, c), max(1, n)) for c, n in zip(array.chunks, array.shape)),
            target_chunks=target,
            target_shards=shard_shape,
        )
        try:
            tally.add(spec)  # before the planner tiles the array into units, and before anything is written
        except planner.OutputTooLarge as error:
            raise BadInputFile(src, str(error)) from None
        try:
            array_plan = planner.plan_array(spec, int(max_mem / MEMORY_MODEL_HEADROOM), source_concurrency)
        except planner.PlanError as error:
            raise UserError(f"--max-mem {max_mem} B (planned as {int(max_mem / MEMORY_MODEL_HEADROOM)} B after headroom): {error}") from None
        attrs = dict(array.attrs)
        fill_value = _fill_value(array)
        zarr_dtype = str if array.kind == "string" else array.dtype
        metadata = _array_metadata(
            array.name, array.shape, zarr_dtype, target, shard_shape, codecs, fill_value,
            _json_attrs(attrs, array.dtype, owner=array.name, skipped=skipped), array.dims,
        )
        intermediate = None
        if array_plan.intermediate_chunks is not None:
            intermediate = _array_metadata(
                array.name, array.shape, zarr_dtype, array_plan.intermediate_chunks, None,
                compressor_codecs(INTERMEDIATE_COMPRESSOR), fill_value, {}, array.dims,
            )
        notes = []
        if array.kind != "numeric":
            notes.append(STRING_KINDS[array.kind])
        if array.dtype.kind in "iu" and ("scale_factor" in attrs or "add_offset" in attrs):
            types = ", ".join(f"{k} {np.asarray(attrs[k]).dtype}" for k in ("scale_factor", "add_offset") if k in attrs)
            notes.append(f"packed: kept as stored ({array.dtype}) with its packing attributes ({types}); Zarr "
                         "attributes are JSON numbers, so xarray unpacks to float64 where the source's float32 "
                         "attributes give float32")
        if array.stored_shape is not None:
            notes.append(f"stored as {list(array.stored_shape)} in the source, shorter than its unlimited "
                         f"dimension(s): the rest is the fill value, as netCDF reads it")
        plan_vars[array.name] = {
            "dims": list(array.dims),
            "shape": list(array.shape),
            "dtype": array.dtype.str,
            "kind": array.kind,
            "source_path": array.source_path,
            "stored_shape": list(array.stored_shape) if array.stored_shape is not None else None,
            "notes": notes,
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
    for item in skipped:
        log.warning("not copied: %s", ", ".join(f"{k} {v}" for k, v in item.items()))
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
        "group_attributes": _json_attrs(description["groups"][""], owner="/", skipped=skipped),
        "groups": {path: _json_attrs(attrs, owner=path, skipped=skipped)
                   for path, attrs in description["groups"].items() if path
                   if not variables or any(name.startswith(path + "/") for name in plan_vars)},
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
            and isinstance(metadata["data_type"], str)
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
        """One chunk, decoded into a buffer of the chunk's declared size: Blosc and Zstd check the size
        their header states against it before decompressing, so a chunk that would decode past it is
        refused (ValueError) instead of allocated (bounded decoding, issue 36)."""
        if self.compressor is None:
            return np.frombuffer(data, dtype=self.dtype).reshape(self.chunk_shape)
        out = np.empty(self.chunk_shape, dtype=self.dtype)
        self.compressor.decode(data, out=out)
        return out

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


def _done_test(store, done_here: set | None):
    """Whether unit k is done: from the set of the one process that runs every unit (``run_unit``'s
    ``_done_here``), else from one listing of the store's markers."""
    if done_here is not None:
        return done_here.__contains__
    markers = set(_store_list(store, f"{STAGING}/done/"))
    return lambda k: _done_key(k) in markers


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


def _catch_up(plan: dict, unit: dict, store, source_cache: dict | None,
              done_here: set | None = None) -> tuple[list[int], int]:
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
    docs/benchmarks.md (rechunk).
    """
    needed = units_feeding(plan, unit)
    if not needed:
        return [], 0
    is_done = _done_test(store, done_here)
    missing = [j for j in needed if not is_done(j)]
    random.Random(unit["id"]).shuffle(missing)
    ran: list[int] = []
    copied = 0
    cache = source_cache if source_cache is not None else {}  # one open source for all of them
    try:
        for j in missing:
            result = run_unit(plan, j, _source_cache=cache, _done_here=done_here)  # skipped if another worker finished it meanwhile
            if not result["skipped"]:
                ran += [j, *result["ran_earlier"]]
                copied += result["bytes"]
    finally:
        if source_cache is None and cache.get("hdf5") is not None:
            cache["hdf5"].close()
    return ran, copied


def run_unit(plan: dict, k: int, _source_cache: dict | None = None, _done_here: set | None = None) -> dict:
    """Copy work unit ``k`` of ``plan``; returns {"unit", "bytes", "seconds", "ran_earlier", "skipped"}.

    Idempotent: a unit whose ``done`` marker exists is skipped (``skipped``;
    e.g. a retry, or a stage-0 unit a later unit already ran), and running it
    again would write the same chunks. Units may run in any order and with
    any parallelism, across stages too: a unit of stage s > 0 first runs the
    units of stage s - 1 that write what it reads and have not left their
    marker (``ran_earlier`` lists them; see ``_catch_up`` for why this is
    safe). ``bytes`` counts what this call copied, its catch-up included.

    ``_done_here``: the ids of the units done so far by the one process that runs them all (``rechunk``),
    which keeps this set instead of the store's markers: no marker is read or written, and ``finalize``
    is given the set. A marker is a file or an S3 object per unit, and its check a HEAD: for a file of
    2,001 small variables, two thirds of the store calls of the run (and two round trips per unit on S3).
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
    already_done = (k in _done_here) if _done_here is not None else _store_exists(dst_store, _done_key(k))
    if already_done:
        return {"unit": k, "bytes": 0, "seconds": round(time.perf_counter() - started, 6), "ran_earlier": [],
                "skipped": True}
    ran_earlier, caught_up_bytes = _catch_up(plan, unit, dst_store, _source_cache, _done_here)
    region = tuple(slice(a, b) for a, b in zip(unit["start"], unit["stop"]))
    kind = var.get("kind", "numeric")
    dtype = np.dtype(object) if kind == "string" else np.dtype(var["dtype"])

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
            try:
                dataset = handle[var.get("source_path") or unit["variable"]]
                with within(dataset):  # (a chunk that inflates past its declared size is refused, not held)
                    data = _read_hdf5_region(dataset, unit["start"], unit["stop"], var)
            except DAMAGED_HDF5_ERRORS as error:
                if not raised_by_h5py(error):
                    raise
                raise BadInputFile(plan["source"], f"the stored data of {unit['variable']} cannot be read "
                                   f"(damaged, or a filter failed): {damaged_reason(error)}") from None
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
        import warnings

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification.*")
            writer = _open_writer(dst_store, path, metadata)
        with zarr.config.set({"async.concurrency": stage["write_concurrency"]}):
            if region:
                writer[region] = data
            else:
                writer[...] = data
    nbytes = int(data.nbytes)
    del data
    if _done_here is not None:
        _done_here.add(k)
    else:
        _store_set(dst_store, _done_key(k), json.dumps(unit).encode())
    return {"unit": k, "bytes": nbytes + caught_up_bytes, "seconds": round(time.perf_counter() - started, 6),
            "ran_earlier": ran_earlier, "skipped": False}


def _read_hdf5_region(dataset, start, stop, var: dict) -> np.ndarray:
    """[start, stop) of an HDF5 dataset as the plan sees it: strings decoded, and a
    dataset shorter than its unlimited dimension read as netCDF does (the fill value beyond its end)."""
    kind = var.get("kind", "numeric")
    source = dataset.asstr() if kind == "string" else dataset
    if not start:
        return np.asarray(source[()])
    stored = var.get("stored_shape") or var["shape"]
    inside = [min(b, n) for b, n in zip(stop, stored)]
    if all(b == c for b, c in zip(stop, inside)):
        if kind == "numeric":
            from layoutlab.convert.direct_chunks import read_region

            direct = read_region(dataset, start, stop)  # (None: h5py reads it, below)
            if direct is not None:
                return direct
        return source[tuple(slice(a, b) for a, b in zip(start, stop))]
    fill = _fill_from_metadata(var["metadata"], kind)
    out = np.full([b - a for a, b in zip(start, stop)], fill, dtype=object if kind == "string" else np.dtype(var["dtype"]))
    if all(a < c for a, c in zip(start, inside)):
        out[tuple(slice(0, c - a) for a, c in zip(start, inside))] = source[tuple(slice(a, c) for a, c in zip(start, inside))]
    return out


def _fill_from_metadata(metadata: dict, kind: str):
    from zarr.core.metadata.v3 import ArrayV3Metadata

    fill = ArrayV3Metadata.from_dict(metadata).fill_value
    return str(fill) if kind == "string" else fill


def finalize(plan: dict, _done_here: set | None = None) -> dict:
    """Publish the store: arrays' metadata, then the consolidated root ``zarr.json`` last. ``_done_here``:
    the units one process ran (``rechunk``, see ``run_unit``), in place of the store's markers."""
    import zarr
    from zarr.storage import MemoryStore

    dst = plan["destination"]
    store = open_store(dst)
    is_done = _done_test(store, _done_here)
    missing = [u["id"] for u in plan["units"] if not is_done(u["id"])]
    if missing:
        raise UserError(
            f"{dst}: cannot finalize, {len(missing)} of {len(plan['units'])} units are not done "
            f"(first: {missing[:5]}); run them with --unit K"
        )
    # Build the whole hierarchy's metadata in memory and let zarr consolidate it.
    memory = MemoryStore()
    zarr.create_group(memory, attributes=plan["group_attributes"], zarr_format=3)
    for path, attrs in plan.get("groups", {}).items():  # parents come before their children
        zarr.create_group(memory, path=path, attributes=attrs, zarr_format=3)
    _store_set_many(memory, [(f"{name}/zarr.json", json.dumps(var["metadata"]).encode())
                             for name, var in plan["variables"].items()])
    import warnings

    with warnings.catch_warnings():
        # zarr warns that consolidated metadata is not yet part of the v3 spec; xarray and zarr read it.
        warnings.simplefilter("ignore", UserWarning)
        zarr.consolidate_metadata(memory, zarr_format=3)
    # every array's and group's metadata, then (below) the root's last: a reader that finds the root finds all
    documents = _store_get_many(memory, [f"{name}/zarr.json" for name in [*plan["variables"], *plan.get("groups", {})]])
    _store_set_many(store, list(documents.items()))
    _store_delete_dir(store, f"{STAGING}/intermediate")
    _store_set(store, "zarr.json", _store_get(memory, "zarr.json"))
    _store_delete_dir(store, STAGING)
    if not is_s3_url(dst):
        staging = Path(dst) / STAGING
        if staging.exists():
            shutil.rmtree(staging)
    return {"destination": dst, "variables": list(plan["variables"]), "units": len(plan["units"])}


def rechunk(src, dst, progress: bool = True, on_plan=None, **options) -> dict:
    """Plan, run every unit in order, finalize; a progress bar over the bytes copied. ``on_plan``: called with
    the plan once it is made (what each variable becomes, what is skipped and why), before any unit runs."""
    from tqdm import tqdm

    was_absent = _destination_state(dst) == "absent"
    plan = None
    try:
        plan = plan_rechunk(src, dst, prepare=True, **options)
        if on_plan is not None:
            on_plan(plan)
        total = sum(
            math.prod(b - a for a, b in zip(u["start"], u["stop"])) * np.dtype(plan["variables"][u["variable"]]["dtype"]).itemsize
            for u in plan["units"]
        )
        started = time.perf_counter()
        cache: dict = {}
        done_here: set = set()  # (a failure clears the destination below: there is nothing to resume)
        try:
            with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="rechunk", disable=not progress) as bar:
                for k in range(len(plan["units"])):
                    result = run_unit(plan, k, _source_cache=cache, _done_here=done_here)
                    bar.update(result["bytes"])
        finally:
            if cache.get("hdf5") is not None:
                cache["hdf5"].close()
        finalize(plan, _done_here=done_here)
    except BaseException:
        # Nothing half-written is left behind (an error, Ctrl-C, SIGTERM): the store this call made, or
        # replaced with --overwrite, goes; a destination refused before anything was written stays.
        if plan is not None or was_absent:
            try:
                _clear_destination(dst)
            except OSError:  # (the original error is the one to report)
                pass
        raise
    seconds = time.perf_counter() - started
    return {
        "destination": str(dst),
        "units": len(plan["units"]),
        "stages": plan["stages"],
        "bytes": total,
        "seconds": round(seconds, 3),
        "skipped": plan["skipped"],
    }
