"""The instrument never lies: every byte a case reads crosses its own emulated link, for every reader x variant kind.

Every variant kind a plan can produce (original, paged, rechunked + paged, Zarr, sharded Zarr, Zarr of a
table's rows and of a swath's scan lines, kerchunk over the original and over the paged copy, Icechunk of
virtual chunks, native Icechunk) is made from small GEOS-like, ATL03-like and swath samples with layoutlab's converters, *in the
environment the local pipeline converts in* (``AWS_ENDPOINT_URL_S3`` = the local S3 itself,
``local/dispatch.py``): whatever a converter persists (an endpoint in an Icechunk container, a
URL in kerchunk references) is what the readers meet. Then every reader that can open each
kind runs every pattern of the plans on it, at 25 ms and at 250 ms (or more) of first-byte latency, and
each record must show:

- bytes counted >= the stored (compressed) bytes of the chunks the pattern must touch, computed
  without the reader: the pattern is replayed on the local file with h5py to learn which
  elements it reads, and those elements' chunks are sized from the variant's own index (HDF5's
  chunk index through ``get_chunk_info_by_coord``, the Zarr store's files and shard indexes,
  the kerchunk references, the Icechunk manifest through ``getsize``);
- requests that reached the local S3 around the case's proxy client = 0 (the local S3 refuses
  and counts them while a case runs: ``local/case_guard.py``);
- wall time at 250 ms > wall time at 25 ms by at least the sequential round trips the record
  implies x 225 ms (every request for a reader that sends one at a time; for a concurrent reader
  ceil(requests / its concurrency) per phase, or one per phase when the record gives no number),
  less a scheduling allowance (``TIME_SLACK``); a case with few round trips runs its high latency
  above 250 ms, so that the time it adds (``MIN_ADDED_S``) stands above the noise of its CPU time;
- client counts = proxy counts where the reader has a hook; where it has none (icechunk, ros3)
  the test says so and checks that the record's counts are the proxy's.

Before issue 24 the Icechunk-virtual rows failed here (virtual chunks read from the local S3
directly: bytes counted below the chunks' bytes) and xarray opened the granule twice
(``test_xarray_opens_once_as_its_users_do``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

from layoutlab.bench.patterns import PATTERNS
from layoutlab.bench.readers import H5pyHandle, READERS, make_reader, ros3_available
from layoutlab.bench.runner import BENCH_BUCKET, run_case, upload_target
from layoutlab.pipeline.plan import KERCHUNK_READERS, ICECHUNK_READERS, ZARR_READERS
from layoutlab.results.record import validate_record
from layoutlab.samples.atl03 import write_atl03
from layoutlab.samples.geos import write_geos

pytestmark = [pytest.mark.slow, pytest.mark.timing]

GRID_PATTERNS = ("timeseries-point", "map-timestep", "timeseries-region-mean", "map-time-mean")
GRANULE_PATTERNS = ("granule-open-list", "beam-read", "beam-subset")
# the pattern families (bench/families.py) as the plan step fits them to each sample's structure
# (pipeline/families.py; the samples themselves get the presets above, any other file these)
FAMILY_PATTERNS = {"geos": ("variable-read", "record-slice", "point-series", "box"),
                   "atl03": ("open-list", "column-read", "row-subset", "multi-variable"),
                   "swath": ("variable-read", "record-slice", "point-series", "box", "multi-variable")}
# the named presets of each sample (a swath has none: its families are its patterns)
NAMED_PATTERNS = {"geos": GRID_PATTERNS, "atl03": GRANULE_PATTERNS, "swath": ()}
LOW_MS, HIGH_MS = 25, 250
# The 25 ms run may be slowed by other work on a shared machine (it only makes the difference smaller):
# the difference must reach this share of the sequential round trips' added latency.
TIME_SLACK = 0.8
# The added latency a comparison stands on is at least this: a case with few round trips runs its high
# latency above 250 ms to reach it, so that the run-to-run noise of its CPU time (~0.1 s quiet for a case
# that parses a granule's tree for a second, 0.3 s+ on a loaded CI machine) cannot hide the link's time
# (two round trips at 250 ms add only 0.45 s).
MIN_ADDED_S = 1.5
# 25 ms then the high latency, then the pair again up to twice while the difference falls short
TIME_ATTEMPTS = ("low", "high") * 3
HDF5_READERS = ("h5py-s3fs-default", "h5py-s3fs-aligned", "xarray-h5netcdf", "h5coro", "h5py-ros3")


def _cannot(reader: str, sample: str, kind: str, pattern: str) -> str | None:
    """Why a reader cannot read this variant at all (the pipeline records it as a failed case, never a value)."""
    if reader == "h5coro" and sample == "geos":  # (the plan step's probe finds it: h5coro is not planned there)
        return ("h5coro cannot parse this NetCDF-4 grid's root attributes, which the value check reads "
                "(FatalError: failed to read expected bytes for dataspace message: 8 != 4)")
    if reader == "h5coro" and kind != "original":
        return "h5coro cannot read superblock version 3 (every paged file)"
    if reader == "xarray-h5netcdf" and sample == "atl03" and pattern in ("granule-open-list", "open-list"):
        return ("h5netcdf refuses the ATL03 tree as a whole (dimension scales mixed with phony dimensions; "
                "docs/bench-and-readers.md)")
    return None


# -- the variants, made as the pipeline makes them --------------------------------------------------
def _h5repack_paged(source: Path, out: Path) -> Path:
    subprocess.run(["h5repack", "-S", "PAGE", "-G", str(2**20), str(source), str(out)], check=True)
    return out


def _rechunked_paged(source: Path, out: Path) -> Path:
    from layoutlab.convert.repack import repack

    repack(str(source), str(out), page_size=2**20, target_chunk_bytes=256 * 2**10)
    return out


def _zarr_records(source: Path, out: Path, record_chunk: int) -> Path:
    """A table's rows / a swath's scan lines in blocks (the default plan's zarr-rows / zarr-lines layouts), made
    by layoutlab's rechunk as the pipeline's rechunk-zarr kind makes them."""
    from layoutlab.convert.rechunk_zarr import rechunk

    rechunk(str(source), str(out), progress=False, record_chunk=record_chunk)
    return out


def write_swath(path: Path, scans: int = 240, pixels: int = 64) -> Path:
    """A small swath (structure.py's role): two (scan, pixel) variables over 2-D latitude / longitude that vary along
    scan lines and across them, stored in chunks of 8 scan lines."""
    rng = np.random.default_rng(7)
    scan, pixel = np.meshgrid(np.arange(scans), np.arange(pixels), indexing="ij")
    with h5py.File(path, "w") as f:
        geo = f.create_group("geolocation")
        geo.create_dataset("latitude", data=(-40 + 0.3 * scan + 0.05 * pixel).astype("f4"))
        geo.create_dataset("longitude", data=(10 + 0.02 * scan + 0.4 * pixel).astype("f4"))
        geo["latitude"].attrs["units"], geo["longitude"].attrs["units"] = "degrees_north", "degrees_east"
        product = f.create_group("product")
        for name in ("column_amount", "cloud_fraction"):
            product.create_dataset(name, data=rng.random((scans, pixels), dtype="f4"), chunks=(8, pixels))
            product[name].attrs["coordinates"] = "latitude longitude"
    return path


def _zarr(source: Path, out: Path, shards: bool) -> Path:
    import xarray as xr

    with xr.open_dataset(source) as ds:
        encoding = {"BCEXTTAU": {"chunks": (8, 8, 8), "shards": (24, 16, 24)} if shards else {"chunks": (24, 8, 8)}}
        ds.to_zarr(out, zarr_format=3, mode="w", consolidated=False, encoding=encoding)
    return out


@pytest.fixture(scope="module")
def variants(cloud_env, tmp_path_factory):
    """{(sample, kind): {"url", "local", "refs"?}}: every variant kind of both samples, in the local S3."""
    import boto3

    from layoutlab.convert import virtual
    from layoutlab.convert.icechunk_store import write_icechunk_native

    work = tmp_path_factory.mktemp("invariants")
    samples = {"geos": write_geos(work / "geos.nc", shape=(24, 46, 72)),
               "atl03": write_atl03(work / "atl03.h5", photons=60000, chunk=10000),
               "swath": write_swath(work / "swath.h5")}
    made: dict = {}
    s3 = boto3.client("s3", endpoint_url=cloud_env.moto_endpoint, region_name="us-east-1")
    with pytest.MonkeyPatch.context() as patch:
        # the local pipeline's conversion environment: the local S3's own endpoint (local/dispatch.py)
        patch.setenv("AWS_ENDPOINT_URL_S3", cloud_env.moto_endpoint)
        # the swath's new layout: blocks of 24 scan lines (its own original and paged copies are the HDF5 kinds
        # the other samples already cover)
        made[("swath", "zarr-lines")] = {"local": _zarr_records(samples["swath"], work / "swath-lines.zarr", 24)}
        made[("swath", "zarr-lines")]["url"] = upload_target(made[("swath", "zarr-lines")]["local"], cloud_env,
                                                             prefix="invariants/swath")
        for sample, source in ((k, v) for k, v in samples.items() if k != "swath"):
            files = {"original": Path(source), "paged": _h5repack_paged(source, work / f"{sample}-paged.h5"),
                     "rechunked-paged": _rechunked_paged(source, work / f"{sample}-rechunked-paged.h5")}
            if sample == "geos":
                files["zarr"] = _zarr(source, work / "geos.zarr", shards=False)
                files["zarr-sharded"] = _zarr(source, work / "geos-sharded.zarr", shards=True)
            else:  # a table's rows in chunks of 2 x 10^4 photons (the granule's are 10^4)
                files["zarr-rows"] = _zarr_records(source, work / "atl03-rows.zarr", 20000)
            for kind, path in files.items():
                made[(sample, kind)] = {"url": upload_target(path, cloud_env, prefix=f"invariants/{sample}"),
                                        "local": path}
            layouts = {}
            for over in ("original", "paged"):
                layout = layouts[over] = virtual.build_layout(str(files[over]), made[(sample, over)]["url"])
                url = f"s3://{BENCH_BUCKET}/invariants/{sample}/kerchunk-{over}.json"
                virtual.write_kerchunk(layout, url, s3)
                made[(sample, f"kerchunk-{over}")] = {"url": url, "refs": virtual.kerchunk_refs(layout)["refs"],
                                                      "over": files[over]}
            original = made[(sample, "original")]["url"]
            loc = original.removeprefix("s3://").split("/", 1)
            etag = s3.head_object(Bucket=loc[0], Key=loc[1])["ETag"]
            url = f"s3://{BENCH_BUCKET}/invariants/{sample}/icechunk-virtual"
            virtual.write_icechunk_virtual(layouts["original"], url, etag)
            made[(sample, "icechunk-virtual")] = {"url": url}
            if sample == "geos":
                url = f"s3://{BENCH_BUCKET}/invariants/geos/icechunk-native"
                write_icechunk_native(str(source), url, {"time": 6, "lat": 10, "lon": 12}, {"t": 12, "a": 20, "o": 24})
                made[("geos", "icechunk-native")] = {"url": url}
    made["samples"] = samples
    return made


# -- which elements a pattern must read: replayed on the local original with h5py --------------------
class _Recorder:
    def __init__(self, dataset, path, log):
        self._ds, self._path, self._log = dataset, path, log
        self.shape, self.dtype, self.chunks = dataset.shape, dataset.dtype, dataset.chunks

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        ranges = []
        for axis, size in enumerate(self.shape):
            i = index[axis] if axis < len(index) else slice(None)
            if isinstance(i, slice):
                start, stop, _ = i.indices(size)
                ranges.append((start, stop))
            else:
                ranges.append((int(i) % size, int(i) % size + 1))
        self._log.append((self._path, tuple(ranges)))
        return self._ds[index]


class _RecordingHandle(H5pyHandle):
    def array(self, path):
        return _Recorder(super().array(path), path.strip("/"), self.log)


_FAMILY_PARAMS: dict = {}


def family_params(source: Path, pattern: str) -> dict | None:
    """The parameters the plan step gives ``pattern`` (a family) on this sample, its first case's; None for a
    named pattern (its defaults are the published ones)."""
    from layoutlab.bench.families import FAMILIES
    from layoutlab.pipeline.families import plan_families
    from layoutlab.structure import read_structure

    if pattern not in FAMILIES:
        return None
    if source not in _FAMILY_PARAMS:
        with h5py.File(source, "r") as f:
            _FAMILY_PARAMS[source] = {}
            for case in plan_families(f, read_structure(f, str(source))).cases:
                _FAMILY_PARAMS[source].setdefault(case.pattern, case.params)
    assert pattern in _FAMILY_PARAMS[source], f"{pattern} is not planned on {source}"
    return _FAMILY_PARAMS[source][pattern]


def touched(source: Path, pattern: str) -> list[tuple[str, tuple]]:
    """[(array path, ((start, stop) per axis))] the pattern reads, found by running it on the local file."""
    from layoutlab.bench.patterns import get_pattern

    with h5py.File(source, "r") as f:
        handle = _RecordingHandle("hdf5", f)
        handle.log = []
        p = get_pattern(pattern)
        params = p.params(family_params(source, pattern))
        p.load(handle, p.select(handle, params))
        return handle.log


def _chunk_coords(ranges, chunk_shape):
    if not ranges:
        return [()]
    axes = [range(a // c, (b - 1) // c + 1) if b > a else range(0) for (a, b), c in zip(ranges, chunk_shape)]
    return list(itertools.product(*axes))


# -- the stored bytes of those elements' chunks, per variant kind ------------------------------------
def _hdf5_needed(path: Path, reads) -> int:
    total = 0
    with h5py.File(path, "r") as f:
        for name, ranges in reads:
            ds = f[name]
            layout = ds.id.get_create_plist().get_layout()
            if layout == h5py.h5d.CHUNKED:
                for coords in _chunk_coords(ranges, ds.chunks):
                    info = ds.id.get_chunk_info_by_coord(tuple(c * n for c, n in zip(coords, ds.chunks)))
                    total += int(info.size or 0) if info.byte_offset is not None else 0
            elif layout == h5py.h5d.CONTIGUOUS:  # at least the elements asked for
                total += math.prod(b - a for a, b in ranges) * ds.dtype.itemsize
    return total


def _zarr_metadata(document: bytes | str):
    from zarr.core.metadata.v3 import ArrayV3Metadata

    return ArrayV3Metadata.from_dict(json.loads(document))


def _shard_index(shard: bytes, inner_per_shard: int, index_at_end: bool) -> np.ndarray:
    """(offset, nbytes) of each inner chunk, from the shard's index (Zarr v3 sharding: uint64 pairs + crc32c)."""
    size = inner_per_shard * 16 + 4
    raw = shard[-size:] if index_at_end else shard[:size]
    return np.frombuffer(raw[:-4], dtype="<u8").reshape(inner_per_shard, 2)


def _chunks_needed(metadata, stored, reads, size=None) -> int:
    """Stored bytes of the chunks ``reads`` touch in a Zarr v3 hierarchy given by ``metadata(name)`` (its array
    metadata) and ``stored(key)`` (an object's bytes, None when absent): whole chunks (``size(key)`` when given,
    so a store need not fetch them), or for a sharded array the inner chunks, sized from each shard's index."""
    size = size or (lambda key: len(stored(key) or b""))
    from zarr.codecs import ShardingCodec

    total = 0
    for name, ranges in reads:
        meta = metadata(name)
        codec = meta.codecs[0]
        outer = tuple(meta.chunk_grid.chunk_shape)
        if not isinstance(codec, ShardingCodec):
            for coords in _chunk_coords(ranges, outer):
                total += size(f"{name}/{meta.encode_chunk_key(coords)}")
            continue
        inner = tuple(codec.chunk_shape)
        per_shard = tuple(o // i for o, i in zip(outer, inner))
        shards: dict = {}
        for coords in _chunk_coords(ranges, inner):
            shard_coords = tuple(c // p for c, p in zip(coords, per_shard))
            if shard_coords not in shards:
                shards[shard_coords] = stored(f"{name}/{meta.encode_chunk_key(shard_coords)}")
            shard = shards[shard_coords]
            if shard is None:
                continue
            index = _shard_index(shard, math.prod(per_shard), str(getattr(codec.index_location, "value", codec.index_location)) == "end")
            offset, nbytes = index[np.ravel_multi_index(tuple(c % p for c, p in zip(coords, per_shard)), per_shard)]
            total += 0 if offset == 2**64 - 1 else int(nbytes)
    return total


def _zarr_needed(root: Path, reads) -> int:
    def stored(key):
        path = root / key
        return path.read_bytes() if path.exists() else None

    return _chunks_needed(lambda name: _zarr_metadata((root / name / "zarr.json").read_bytes()), stored, reads)


def _kerchunk_needed(refs: dict, reads) -> int:
    """The references themselves (one JSON object, read whole) and every referenced chunk touched."""
    total = len(json.dumps({"version": 1, "refs": refs}, separators=(",", ":")))
    for name, ranges in reads:
        meta = _zarr_metadata(refs[f"{name}/zarr.json"])
        for coords in _chunk_coords(ranges, tuple(meta.chunk_grid.chunk_shape)):
            ref = refs.get(f"{name}/{meta.encode_chunk_key(coords)}")
            if isinstance(ref, list) and len(ref) == 3:
                total += int(ref[2])
    return total


def _icechunk_needed(url: str, reads) -> int:
    """From the repository's manifest (``getsize`` of each chunk key: a virtual reference's length or a native
    chunk's size, no chunk fetched), read with icechunk itself in this process, before any case runs."""
    import icechunk
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from layoutlab.convert.virtual import icechunk_storage

    storage = icechunk_storage(url)
    config = icechunk.Repository.fetch_config(storage)
    prefixes = [c.url_prefix for c in ((config.virtual_chunk_containers if config else None) or {}).values()]
    repo = icechunk.Repository.open(storage, authorize_virtual_chunk_access=icechunk.containers_credentials(
        {prefix: icechunk.s3_credentials(from_env=True) for prefix in prefixes}))
    store = repo.readonly_session("main").store
    prototype = default_buffer_prototype()

    def size(key):
        return int(sync(store.getsize(key))) if sync(store.exists(key)) else 0

    def stored(key):  # only shards (native chunks) are fetched: their index sizes the inner chunks
        return sync(store.get(key, prototype)).to_bytes() if sync(store.exists(key)) else None

    return _chunks_needed(lambda name: _zarr_metadata(sync(store.get(f"{name}/zarr.json", prototype)).to_bytes()),
                          stored, reads, size)


def needed_bytes(variants, sample: str, kind: str, pattern: str) -> int:
    reads = touched(variants["samples"][sample], pattern)
    variant = variants[(sample, kind)]
    if kind in ("original", "paged", "rechunked-paged"):
        return _hdf5_needed(variant["local"], reads)
    if kind.startswith("zarr"):
        return _zarr_needed(variant["local"], reads)
    if kind.startswith("kerchunk"):
        return _kerchunk_needed(variant["refs"], reads)
    return _icechunk_needed(variant["url"], reads)


# -- the matrix: every reader that can open each kind, every pattern ----------------------------------
KINDS = {"geos": ("original", "paged", "rechunked-paged", "zarr", "zarr-sharded", "kerchunk-original",
                  "kerchunk-paged", "icechunk-virtual", "icechunk-native"),
         "atl03": ("original", "paged", "rechunked-paged", "zarr-rows", "kerchunk-original", "kerchunk-paged",
                   "icechunk-virtual"),
         "swath": ("zarr-lines",)}


def _readers_of(kind: str) -> tuple:
    if kind.startswith("zarr"):
        return ZARR_READERS
    if kind.startswith("kerchunk"):
        return KERCHUNK_READERS
    if kind.startswith("icechunk"):
        return ICECHUNK_READERS
    return HDF5_READERS


# Every reader x variant kind x pattern is ~160 cold cases run at two latencies (28 min on a loaded 2-core
# machine): `make test` runs every reader x variant kind once, the patterns taken in turn so that each
# pattern is run too (the swath's one layout: each family once); `make test-invariants`
# (LAYOUTLAB_INVARIANTS=full) runs the whole product.
FULL_MATRIX = os.environ.get("LAYOUTLAB_INVARIANTS") == "full"


def _matrix():
    rows = []
    turn = 0
    for sample, kinds in KINDS.items():
        patterns = NAMED_PATTERNS[sample] + FAMILY_PATTERNS[sample]
        for kind in kinds:
            readers = _readers_of(kind)
            if not FULL_MATRIX and len(kinds) == 1:
                # a sample of one layout (the swath's): every family on it once, its readers taken in turn
                # (each reader runs every family of the other samples' layouts of its format)
                rows += [pytest.param(readers[i % len(readers)], sample, kind, pattern,
                                      id=f"{readers[i % len(readers)]}-{sample}-{kind}-{pattern}")
                         for i, pattern in enumerate(patterns)]
                continue
            for reader in readers:
                if FULL_MATRIX:
                    chosen = list(patterns)
                else:  # the next pattern in turn this reader can read
                    order = patterns[turn % len(patterns):] + patterns[:turn % len(patterns)]
                    chosen = [next((p for p in order if _cannot(reader, sample, kind, p) is None), order[0])]
                    turn += 1
                rows += [pytest.param(reader, sample, kind, pattern, id=f"{reader}-{sample}-{kind}-{pattern}")
                         for pattern in chosen]
    return rows


def test_the_suites_matrix_runs_every_pattern():
    ran = {(sample, pattern) for _, sample, _, pattern in (p.values for p in _matrix())}
    assert ran >= {(sample, p) for sample in KINDS for p in NAMED_PATTERNS[sample] + FAMILY_PATTERNS[sample]}


def test_the_matrix_covers_every_reader_and_variant_kind():
    from layoutlab.pipeline.plan import READERS_BY_FORMAT, VARIANT_KINDS

    covered = {reader for kind in itertools.chain(*KINDS.values()) for reader in _readers_of(kind)}
    assert covered == set(READERS), set(READERS) - covered
    assert set(itertools.chain(*READERS_BY_FORMAT.values())) <= covered
    # plan kinds -> the variants made here: original, repack-paged (paged), rechunked-paged, rechunk-zarr (zarr,
    # sharded or not; a table's rows, a swath's scan lines), virtual-kerchunk (over original and paged),
    # icechunk-virtual, icechunk (native)
    assert set(VARIANT_KINDS) == {"original", "repack-paged", "rechunked-paged", "rechunk-zarr", "virtual-kerchunk",
                                  "icechunk-virtual", "icechunk"}


def sequential_round_trips(record: dict) -> int:
    """The round trips a record implies were made one after another (a lower bound)."""
    concurrency = record["reader_settings"].get("concurrency")
    trips = 0
    for phase in record["proxy_counts"]["phases"].values():
        n = phase["requests"] or 0
        if isinstance(concurrency, int) and concurrency >= 1:
            trips += math.ceil(n / concurrency)
        else:  # concurrency the record does not bound: at least one round trip per phase that sent any
            trips += int(n > 0)
    return trips


@pytest.fixture(scope="module")
def needed_cache():
    return {}


@pytest.mark.parametrize("reader, sample, kind, pattern", _matrix())
def test_every_byte_crosses_the_link(variants, needed_cache, reader, sample, kind, pattern):
    why = _cannot(reader, sample, kind, pattern)
    if why:
        pytest.skip(why)
    if reader == "h5py-ros3" and not ros3_available():
        pytest.skip("this h5py has no ros3 driver (docs/bench-and-readers.md: h5py with ros3)")
    key = (sample, kind, pattern)
    if key not in needed_cache:
        needed_cache[key] = needed_bytes(variants, sample, kind, pattern)
    needed = needed_cache[key]
    records: dict = {}  # "low" / "high": the fastest run at each latency
    # Other work on a shared machine (CI) only ever lengthens a run, so the fastest run at each latency is the
    # one to compare; when the difference falls short, both are run again (CI once saw three 25 ms runs all
    # slower than the machine's quiet time by more than the added latency).
    high_ms = HIGH_MS
    for attempt, which in enumerate(TIME_ATTEMPTS):
        if attempt >= 2 and _time_holds(records):
            break
        latency = LOW_MS if which == "low" else high_ms
        record = run_case({"target": variants[(sample, kind)]["url"], "pattern": pattern, "reader": reader,
                           "variant": kind, "latency_ms": latency, "bandwidth_mbps": 0,
                           "params": family_params(variants["samples"][sample], pattern)})
        assert record["status"] == "ok", record["error"]
        assert validate_record(record) == []
        assert record["checksum_ok"] in (True, None)
        proxy = record["proxy_counts"]
        # bytes counted cover the stored bytes of the chunks the pattern must touch
        assert proxy["bytes_transferred"] >= needed, (latency, proxy["bytes_transferred"], needed)
        assert record["bytes_transferred"] >= needed, (latency, record["bytes_transferred"], needed)
        # no path around the link: the local S3 saw no read of this case except through its proxy client
        assert proxy["direct_requests"] == 0
        if make_reader(reader).counts_requests:
            assert record["counts_source"] == "client"
            assert record["client_counts"]["requests"] == proxy["requests"]
        else:  # no hook in this library (Rust or C I/O): the proxy's counts are the record's
            assert record["counts_source"] == "proxy" and record["request_counting"] == "proxy"
            assert (record["requests"], record["bytes_transferred"]) == (proxy["requests"], proxy["bytes_transferred"])
        if which not in records or record["wall_s"] < records[which]["wall_s"]:
            records[which] = record
        if which == "low" and attempt == 0:
            high_ms = high_latency_ms(sequential_round_trips(record))
    low, high = records["low"], records["high"]
    trips = sequential_round_trips(high)
    _table_row(reader, sample, kind, pattern, needed, trips, low, high)
    assert trips >= 1
    assert _time_holds(records), (f"{trips} sequential round trips: {high['wall_s']:.3f} s at {high_ms} ms vs "
                                  f"{low['wall_s']:.3f} s at {LOW_MS} ms")


def high_latency_ms(trips: int) -> int:
    """250 ms, or more where few round trips would add less than ``MIN_ADDED_S`` in all."""
    return max(HIGH_MS, LOW_MS + math.ceil(MIN_ADDED_S * 1000 / max(trips, 1)))


TABLE_ENV = "LAYOUTLAB_INVARIANTS_TABLE"  # a file to append one JSON line per case to (docs/bench-and-readers.md)


def _table_row(reader, sample, kind, pattern, needed, trips, low, high) -> None:
    if not os.environ.get(TABLE_ENV):
        return
    row = {"reader": reader, "sample": sample, "kind": kind, "pattern": pattern, "needed": needed,
           "bytes": high["proxy_counts"]["bytes_transferred"], "requests": high["proxy_counts"]["requests"],
           "direct": high["proxy_counts"]["direct_requests"], "trips": trips, "wall_25": low["wall_s"],
           "high_ms": high["latency_ms"], "wall_high": high["wall_s"], "counts_source": high["counts_source"]}
    with open(os.environ[TABLE_ENV], "a") as fh:
        fh.write(json.dumps(row) + "\n")


def _time_holds(records: dict) -> bool:
    """Wall time at the high latency exceeds wall time at 25 ms by the sequential round trips' added latency."""
    if "low" not in records or "high" not in records:
        return False
    low, high = records["low"], records["high"]
    added = sequential_round_trips(high) * (high["latency_ms"] - low["latency_ms"]) / 1000
    return high["wall_s"] - low["wall_s"] >= TIME_SLACK * added


def test_persisted_locations_name_no_local_host(variants, cloud_env):
    """Whatever a variant stores (kerchunk URLs, Icechunk's repository config) names S3 locations, no host."""
    import icechunk

    from layoutlab.convert.virtual import icechunk_storage

    for (sample, kind), variant in ((k, v) for k, v in variants.items() if isinstance(k, tuple)):
        if kind.startswith("kerchunk"):
            text = json.dumps(variant["refs"])
            assert "127.0.0.1" not in text and "localhost" not in text, (sample, kind)
        if kind == "icechunk-virtual":
            config = icechunk.Repository.fetch_config(icechunk_storage(variant["url"]))
            for container in (config.virtual_chunk_containers or {}).values():
                assert "endpoint_url" not in str(container.store) or "127.0.0.1" not in str(container.store), (
                    sample, str(container.store))


def test_a_read_around_the_link_is_refused_and_the_case_is_not_measured(variants, cloud_env):
    """A reader that reaches the local S3 directly during a case (here: an Icechunk container given the local
    S3's own endpoint, what the converter persisted before issue 24) gives an error record naming why."""
    from unittest import mock

    from layoutlab.convert import virtual

    def around(bucket, endpoint=None):  # the container of before: the local S3's own address
        return real(bucket, cloud_env.moto_endpoint)

    real = virtual.virtual_container
    with mock.patch.object(virtual, "virtual_container", around):
        record = run_case({"target": variants[("atl03", "icechunk-virtual")]["url"], "pattern": "beam-read",
                           "reader": "icechunk", "variant": "icechunk-virtual", "latency_ms": 0, "bandwidth_mbps": 0})
    assert record["status"] == "error"
    assert "local S3" in record["error"] or "AccessDenied" in record["error"] or "around" in record["error"], \
        record["error"]


def test_xarray_opens_once_as_its_users_do(variants, cloud_env):
    """The reader's record moves what one ``xr.open_dataset(url, group=...)`` of a scientist moves."""
    import xarray as xr

    from layoutlab import storage
    from layoutlab.bench import accounting

    url = variants[("atl03", "original")]["url"]
    record = run_case({"target": url, "pattern": "beam-read", "reader": "xarray-h5netcdf", "variant": "original",
                       "latency_ms": 0, "bandwidth_mbps": 0, "check_values": False})
    assert record["status"] == "ok", record["error"]
    assert record["reader_settings"]["opened"] == "open_dataset(url, group='gt1l/heights')"
    # the cache xarray chose, found by looking after the timed region (the look scans every object)
    assert record["reader_settings"]["cache_seen"] == "on the file object xarray opened", record["reader_settings"]
    client = cloud_env.new_client(latency_ms=0, bandwidth_mbps=0, name="scientist")
    counter = accounting.RequestCounter()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("AWS_ENDPOINT_URL_S3", client["endpoint"])
            fs = storage.s3fs_filesystem(skip_instance_cache=True, session=accounting.aiobotocore_session(counter))
            options = {"skip_instance_cache": True, "session": fs.session, "client_kwargs": dict(fs.client_kwargs)}
            with xr.open_dataset(url, engine="h5netcdf", group="gt1l/heights", phony_dims="access",
                                 decode_times=False, storage_options=options) as ds:
                ds["h_ph"].values
    finally:
        scientist = cloud_env.close_client(client["id"])
    assert record["head_requests"] == scientist["head_requests"] == 1  # one file opened
    assert (record["proxy_counts"]["requests"], record["proxy_counts"]["bytes_transferred"]) == (
        scientist["requests"], scientist["bytes_out"])


def test_xarray_lists_a_zarr_store_from_its_consolidated_metadata(variants):
    """xarray's users leave ``consolidated`` at its default, which reads the consolidated metadata layoutlab's
    stores hold: listing the ATL03-like table's store takes fewer requests than it has arrays. (With
    ``consolidated=False`` the reader read every array's zarr.json and listed every group: ATL06's store took
    2,720 requests and 24-28 s a case in its study.)"""
    local = variants[("atl03", "zarr-rows")]["local"]
    arrays = sum(1 for path in Path(local).rglob("zarr.json") if json.loads(path.read_text())["node_type"] == "array")
    record = run_case({"target": variants[("atl03", "zarr-rows")]["url"], "pattern": "open-list",
                       "reader": "xarray-zarr", "variant": "zarr-rows", "latency_ms": LOW_MS, "bandwidth_mbps": 0,
                       "params": family_params(variants["samples"]["atl03"], "open-list")})
    assert record["status"] == "ok", record["error"]
    assert arrays >= 20
    assert record["proxy_counts"]["requests"] < arrays, (record["proxy_counts"]["requests"], arrays)
