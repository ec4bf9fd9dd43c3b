"""Request accounting: what each reader counts at its client equals what the local S3 proxy counted.

Every reader in ``READERS`` runs every pattern it supports on small generated
data (GEOS-like NetCDF and Zarr, unsharded and sharded; ATL03-like HDF5, paged
HDF5 and a Zarr copy of one beam) behind a proxy client of its own
(``run_case``), and the record's ``client_counts`` must equal its
``proxy_counts``: requests (GET and LIST together, since the proxy counts HTTP
methods; HEAD) and response bytes, in total and per phase. Exact, with one
tolerance: obstore does not show the XML of a LIST answer or of a 404 answer,
so for zarr-obstore the proxy may count more bytes than the client, at most
16 KiB per LIST and 1 KiB per 404 the client counted (these groups list < 40
entries). ros3 (skipped where h5py has no ros3 driver) is counted by the proxy only.

Then: a record on "real S3" (moto without the proxy) has requests, bytes and
over-read from the client alone; boto3, s3fs listings past one page and
obstore's list pages and coalesced ranges agree with the proxy; with faults
injected, the client's errors plus the GETs aiohttp resent by itself are the
proxy's 503s and resets, and obstore's client sees each request once.
"""

from __future__ import annotations

import subprocess

import h5py
import numpy as np
import pytest

from layoutlab.bench import accounting
from layoutlab.bench.readers import READERS, ros3_available
from layoutlab.bench.runner import run_case, upload_target
from layoutlab.results.record import validate_record
from layoutlab.samples.atl03 import write_atl03
from layoutlab.samples.geos import write_geos

SHAPE = (24, 46, 72)
GRID = ("timeseries-point", "map-timestep", "timeseries-region-mean", "map-time-mean", "granule-open-list",
        "full-read-throughput", "slab-read")
GRANULE = ("granule-open-list", "beam-read", "beam-subset", "full-read-throughput", "slab-read")
# A LIST answer of moto/S3 for a Zarr group of this size: well under 16 KiB (XML of < 40 entries).
LIST_BODY_BOUND = 16 * 1024
# An S3 error answer (NoSuchKey XML with key, request id, host id): well under 1 KiB.
ERROR_BODY_BOUND = 1024


def _atl03_zarr(source, path):
    """The ATL03-like granule's root attributes and its gt1l beam as a Zarr v3 group (what the beam patterns read)."""
    import zarr

    def plain(value):
        if isinstance(value, bytes):
            return value.decode()
        if isinstance(value, np.ndarray):
            return [plain(v) for v in value.tolist()] if value.dtype.kind in "OS" else value.tolist()
        return value.item() if isinstance(value, np.generic) else value

    def attrs(obj):
        return {k: plain(v) for k, v in obj.attrs.items() if k not in ("DIMENSION_LIST", "REFERENCE_LIST", "CLASS",
                                                                       "NAME", "_Netcdf4Dimid")}

    with h5py.File(source, "r") as f:
        root = zarr.open_group(path, mode="w", zarr_format=3, attributes=attrs(f))

        def copy(name, obj):
            if not name.startswith("gt1l"):
                return
            if isinstance(obj, h5py.Group):
                root.create_group(name, attributes=attrs(obj))
            elif obj.dtype.kind in "iufb":
                array = root.create_array(name, shape=obj.shape, dtype=obj.dtype, chunks=obj.chunks or obj.shape,
                                          attributes=attrs(obj))
                array[...] = obj[()]

        f.visititems(copy)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import xarray as xr

    root = tmp_path_factory.mktemp("accounting-files")
    geos = write_geos(root / "geos.nc", shape=SHAPE)
    with xr.open_dataset(geos) as ds:
        ds.to_zarr(root / "geos.zarr", zarr_format=3, mode="w", consolidated=False,
                   encoding={"BCEXTTAU": {"chunks": (24, 8, 8)}})
        ds.to_zarr(root / "geos-sharded.zarr", zarr_format=3, mode="w", consolidated=False,
                   encoding={"BCEXTTAU": {"chunks": (8, 8, 8), "shards": (24, 16, 24)}})
    atl03 = write_atl03(root / "atl03.h5", photons=20000, chunk=2000)
    tree = root / "tree.h5"  # a granule's shape (groups of datasets with attributes), small: h5coro's listing below
    with h5py.File(tree, "w") as f:
        f.attrs["title"] = "groups of datasets"
        for g in range(3):
            group = f.create_group(f"beam{g}")
            group.attrs["beam"] = g
            for d in range(8):
                data = group.create_dataset(f"var{d}", data=np.arange(500.0 * (d + 1)), chunks=(250,), compression="gzip")
                data.attrs["units"] = "m"
    paged = root / "atl03-paged.h5"
    subprocess.run(["h5repack", "-S", "PAGE", "-G", str(2**20), str(atl03), str(paged)], check=True)
    return {"geos": geos, "zarr": root / "geos.zarr", "sharded": root / "geos-sharded.zarr", "atl03": atl03, "tree": tree,
            "paged": paged, "atl03-zarr": _atl03_zarr(atl03, root / "atl03.zarr")}


# reader -> [(data, variant, patterns)]; every pattern each reader supports on this data
HDF5 = [("geos", "original", GRID), ("atl03", "original", GRANULE)]
MATRIX = {
    "h5py-s3fs-default": HDF5 + [("paged", "paged-1MiB", GRANULE)],
    "h5py-s3fs-aligned": HDF5 + [("paged", "paged-1MiB", GRANULE)],
    "h5py-ros3": HDF5,
    # h5netcdf refuses the ATL03 tree as a whole (dimension scales mixed with phony dimensions, docs/bench-and-readers.md)
    "xarray-h5netcdf": [("geos", "original", GRID), ("atl03", "original", tuple(p for p in GRANULE
                                                                                if p != "granule-open-list"))],
    "zarr-obstore": [("zarr", "zarr-24x8x8", GRID), ("sharded", "zarr-sharded", GRID),
                     ("atl03-zarr", "zarr-gt1l", GRANULE)],
    "zarr-fsspec": [("zarr", "zarr-24x8x8", GRID), ("sharded", "zarr-sharded", GRID),
                    ("atl03-zarr", "zarr-gt1l", GRANULE)],
    "zarr-obstore-nocoalesce": [("zarr", "zarr-24x8x8", GRID), ("sharded", "zarr-sharded", GRID),
                                ("atl03-zarr", "zarr-gt1l", GRANULE)],
    # h5coro reads ICESat-2 granules (its purpose); this NetCDF-4 grid's headers and every paged file
    # (superblock v3) it cannot read (tests/integration/test_virtual_variants_local.py). Its listing of the
    # ATL03-like granule's 193 groups takes 45-110 s here (a thread pool per group and dataset): the listing's
    # counts are checked on a smaller tree of groups, the granule's reads on the granule.
    "h5coro": [("atl03", "original", tuple(p for p in GRANULE if p != "granule-open-list")),
               ("tree", "original", ("granule-open-list",))],
}
# Readers whose variants this module does not build: their counts are checked where the variants are made.
COUNTED_ELSEWHERE = {
    "kerchunk-fsspec": "tests/integration/test_virtual_variants_local.py (client = proxy on kerchunk references)",
    "icechunk": "no client hook (Icechunk's requests go out from Rust): proxy-counted, like ros3",
    "xarray-zarr": "tests/integration/test_bench_instrument_invariants.py (its client counts = the proxy's, every "
                   "Zarr kind)",
    "xarray-icechunk": "no client hook (Icechunk's Rust client under xarray): proxy-counted, "
                       "tests/integration/test_bench_instrument_invariants.py",
}
CASES = [(reader, data, variant, pattern) for reader, rows in MATRIX.items()
         for data, variant, patterns in rows for pattern in patterns]


def test_the_matrix_covers_every_reader():
    assert set(MATRIX) | set(COUNTED_ELSEWHERE) == set(READERS) and not set(MATRIX) & set(COUNTED_ELSEWHERE)


@pytest.fixture(scope="module")
def uploaded(cloud_env, files):
    return {name: upload_target(path, cloud_env, prefix="accounting") for name, path in files.items()}


def _unseen_bound(reader: str, client: dict) -> int:
    """Bytes the client may not see: for obstore, the XML of LIST answers and of 404 answers; else none."""
    if not reader.startswith("zarr-obstore"):  # zarr-obstore and zarr-obstore-nocoalesce: the same client
        return 0
    return client["list_requests"] * LIST_BODY_BOUND + client["not_found"] * ERROR_BODY_BOUND


@pytest.mark.parametrize("reader, data, variant, pattern", CASES)
def test_client_counts_equal_proxy_counts(uploaded, reader, data, variant, pattern):
    if reader == "h5py-ros3" and not ros3_available():
        pytest.skip("this h5py has no ros3 driver (docs/bench-and-readers.md: h5py with ros3)")
    record = run_case({"target": uploaded[data], "pattern": pattern, "reader": reader, "variant": variant,
                       "latency_ms": 0, "bandwidth_mbps": 0})
    assert record["status"] == "ok", record["error"]
    assert validate_record(record) == []
    assert record["checksum_ok"] in (True, None)
    proxy = record["proxy_counts"]
    if reader == "h5py-ros3":  # libhdf5's requests: only the proxy sees them
        assert record["client_counts"] is None and record["request_counting"] == "proxy"
        assert record["counts_source"] == "proxy" and record["requests"] == proxy["requests"] > 0
        return
    client = record["client_counts"]
    assert record["request_counting"] == "client+proxy" and record["counts_source"] == "client"
    assert client["requests"] > 0 and client["errors"] == 0 and client["other_requests"] == 0
    # the proxy counts HTTP methods: a LIST is a GET to it
    assert (client["get_requests"] + client["list_requests"], client["head_requests"]) == (
        proxy["get_requests"], proxy["head_requests"])
    assert client["requests"] == proxy["requests"]
    unseen = _unseen_bound(reader, client)
    difference = proxy["bytes_transferred"] - client["bytes_transferred"]
    assert 0 <= difference <= unseen
    for phase in ("open", "select", "load"):
        mine, theirs = client["phases"][phase], proxy["phases"][phase]
        assert mine["requests"] == theirs["requests"], phase
        assert 0 <= theirs["bytes"] - mine["bytes"] <= unseen, phase
    # the record's main fields are the client's
    assert (record["requests"], record["get_requests"], record["head_requests"], record["list_requests"],
            record["bytes_transferred"]) == (client["requests"], client["get_requests"], client["head_requests"],
                                             client["list_requests"], client["bytes_transferred"])
    assert record["phases"] == client["phases"]
    if record["bytes_needed"]:
        assert record["overread_ratio"] == record["bytes_transferred"] / record["bytes_needed"]


# -- "real S3": moto without the proxy --------------------------------------------------------------
REAL_S3_CASES = [("h5py-s3fs-default", "geos", "original", "timeseries-point"),
                 ("h5py-s3fs-aligned", "paged", "paged-1MiB", "beam-read"),
                 ("xarray-h5netcdf", "geos", "original", "map-timestep"),
                 ("zarr-obstore", "zarr", "zarr-24x8x8", "timeseries-region-mean"),
                 ("zarr-fsspec", "sharded", "zarr-sharded", "map-time-mean")]


@pytest.mark.parametrize("reader, data, variant, pattern", REAL_S3_CASES)
def test_a_record_on_real_s3_has_requests_bytes_and_overread(uploaded, cloud_env, monkeypatch, reader, data, variant,
                                                             pattern):
    monkeypatch.delenv("LAYOUTLAB_PROXY_CONTROL")  # no proxy: what a Lambda or Fargate task sees
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", cloud_env.moto_endpoint)
    record = run_case({"target": uploaded[data], "pattern": pattern, "reader": reader, "variant": variant})
    assert record["status"] == "ok", record["error"]
    assert validate_record(record) == []
    assert record["request_counting"] == "client" and record["counts_source"] == "client"
    assert record["proxy_counts"] is None and record["latency_ms"] is None and record.get("faults_seen") is None
    assert record["requests"] > 0 and record["get_requests"] > 0 and record["bytes_transferred"] > 0
    assert record["overread_ratio"] == pytest.approx(record["bytes_transferred"] / record["bytes_needed"])
    assert record["client_counts"]["errors"] == 0
    assert record["retries"] == (None if reader == "zarr-obstore" else 0)  # obstore retries out of sight
    assert record["requests"] == sum(p["requests"] for p in record["phases"].values())
    assert record["bytes_transferred"] == sum(p["bytes"] for p in record["phases"].values())
    assert record["client_counts"]["method"]


def test_ros3_on_real_s3_is_not_counted(uploaded, cloud_env, monkeypatch):
    if not ros3_available():
        pytest.skip("this h5py has no ros3 driver (docs/bench-and-readers.md: h5py with ros3)")
    monkeypatch.delenv("LAYOUTLAB_PROXY_CONTROL")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", cloud_env.moto_endpoint)
    record = run_case({"target": uploaded["geos"], "pattern": "map-timestep", "reader": "h5py-ros3"})
    assert record["status"] == "ok" and record["request_counting"] == "none" and record["requests"] is None


# -- each client library against the proxy, directly ---------------------------------------------
@pytest.fixture
def proxy_client(cloud_env):
    """A proxy port of this test's own (no latency): {"endpoint", "stats": () -> proxy counts}."""
    client = cloud_env.new_client(latency_ms=0, bandwidth_mbps=0, name="accounting")
    client["stats"] = lambda: cloud_env.client_stats(client["id"])
    try:
        yield client
    finally:
        cloud_env.close_client(client["id"])


def _assert_same(counter: accounting.RequestCounter, proxy_stats: dict, list_bytes_seen: bool = True) -> dict:
    mine = counter.snapshot()
    assert mine["other_requests"] == 0
    assert (mine["get_requests"] + mine["list_requests"], mine["head_requests"]) == (
        proxy_stats["by_method"].get("GET", 0), proxy_stats["by_method"].get("HEAD", 0))
    if list_bytes_seen:
        assert mine["bytes_transferred"] == proxy_stats["bytes_out"]
    return mine


@pytest.fixture(scope="module")
def many_keys(cloud_env):
    """A bucket with one 4 MiB object and 1,200 small ones (two LIST pages), uploaded to moto directly."""
    from concurrent.futures import ThreadPoolExecutor

    import boto3

    s3 = boto3.client("s3", endpoint_url=cloud_env.moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="accounting-many")
    s3.put_object(Bucket="accounting-many", Key="big.bin", Body=np.arange(2**20, dtype="u4").tobytes())
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: s3.put_object(Bucket="accounting-many", Key=f"many/{i:05d}", Body=b"x" * (i % 7)),
                      range(1200)))
    return "accounting-many"


def test_boto3_counts_equal_the_proxy(proxy_client, many_keys):
    import boto3
    from botocore.exceptions import ClientError

    counter = accounting.RequestCounter()
    s3 = boto3.client("s3", endpoint_url=proxy_client["endpoint"], region_name="us-east-1")
    accounting.count_botocore(s3, counter)
    s3.head_object(Bucket=many_keys, Key="big.bin")
    assert len(s3.get_object(Bucket=many_keys, Key="big.bin", Range="bytes=100-4195")["Body"].read()) == 4096
    s3.get_object(Bucket=many_keys, Key="many/00006")["Body"].read()
    pages = list(s3.get_paginator("list_objects_v2").paginate(Bucket=many_keys, Prefix="many/"))
    with pytest.raises(ClientError):
        s3.get_object(Bucket=many_keys, Key="absent")
    mine = _assert_same(counter, proxy_client["stats"]())
    assert (mine["get_requests"], mine["head_requests"], mine["list_requests"], mine["not_found"]) == (
        3, 1, len(pages), 1)
    assert len(pages) == 2


def test_s3fs_listing_past_one_page_equals_the_proxy(proxy_client, many_keys):
    from layoutlab import storage

    counter = accounting.RequestCounter()
    import os

    os.environ["AWS_ENDPOINT_URL_S3"], saved = proxy_client["endpoint"], os.environ["AWS_ENDPOINT_URL_S3"]
    try:
        fs = storage.s3fs_filesystem(skip_instance_cache=True, session=accounting.aiobotocore_session(counter))
    finally:
        os.environ["AWS_ENDPOINT_URL_S3"] = saved
    assert len(fs.find(f"{many_keys}/many/")) == 1200
    assert fs.cat_file(f"{many_keys}/big.bin", start=10, end=1010) == np.arange(2**20, dtype="u4").tobytes()[10:1010]
    mine = _assert_same(counter, proxy_client["stats"]())
    assert mine["list_requests"] == 2


def test_obstore_list_pages_and_coalesced_ranges_equal_the_proxy(proxy_client, many_keys, monkeypatch):
    from zarr.abc.store import RangeByteRequest
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from layoutlab import storage

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy_client["endpoint"])
    counter = accounting.RequestCounter()
    store = accounting.counting_object_store(storage.obstore_s3_store(many_keys), counter)

    async def listed():
        return [key async for key in store.list_prefix("many/")], [key async for key in store.list_dir("many/")]

    flat, children = sync(listed())
    assert len(flat) == len(children) == 1200
    stats = proxy_client["stats"]()
    assert counter.snapshot()["list_requests"] == stats["by_method"]["GET"] == 4  # two pages each
    listing_bytes = stats["bytes_out"]

    # object_store merges ranges less than or equal to 1 MiB apart: (0,100)+(1000,2000); the 1 MiB gap is merged too
    gap = accounting.OBJECT_STORE_COALESCE
    ranges = [(0, 100), (1000, 2000), (2_000_000, 2_000_100), (2_000_100 + gap, 2_000_110 + gap),
              (4_100_000, 4_100_010)]
    assert accounting.merged_ranges(ranges) == [(0, 2000), (2_000_000, 2_000_110 + gap), (4_100_000, 4_100_010)]
    buffers = sync(store.get_partial_values(default_buffer_prototype(),
                                            [("big.bin", RangeByteRequest(a, b)) for a, b in ranges]))
    data = np.arange(2**20, dtype="u4").tobytes()
    assert [bytes(b.to_bytes()) for b in buffers] == [data[a:b] for a, b in ranges]
    assert store.exists is not None and sync(store.exists("big.bin")) and not sync(store.exists("absent"))
    assert sync(store.get("absent", default_buffer_prototype())) is None
    stats = proxy_client["stats"]()
    mine = counter.snapshot()
    assert (mine["get_requests"], mine["head_requests"], mine["not_found"]) == (4, 2, 2)
    assert (mine["get_requests"] + mine["list_requests"], mine["head_requests"]) == (
        stats["by_method"]["GET"], stats["by_method"]["HEAD"])
    # bytes: the ranges as fetched; the listing XML and the 404 body are what obstore does not show
    fetched = sum(b - a for a, b in accounting.merged_ranges(ranges))
    assert mine["bytes_transferred"] == fetched
    assert 0 < stats["bytes_out"] - listing_bytes - fetched <= ERROR_BODY_BOUND


# -- faults: the client sees the retried attempts (botocore; not obstore's) --------------------------
FAULTS = {"slowdown_rate": 0.1, "reset_rate": 0.03, "seed": 14}
FAULT_CASES = [("h5py-s3fs-default", "geos", "original", "timeseries-point"),
               ("xarray-h5netcdf", "atl03", "original", "beam-read"),
               ("zarr-fsspec", "zarr", "zarr-24x8x8", "map-timestep"),
               ("zarr-obstore", "zarr", "zarr-24x8x8", "map-timestep")]


@pytest.mark.slow
def test_with_faults_client_errors_are_the_proxys_faults(uploaded, cloud_env):
    from layoutlab.local.proxy import SLOWDOWN_BODY

    met = {"botocore": 0, "obstore": 0}
    cloud_env.set_faults(**FAULTS)
    try:
        records = [run_case({"target": uploaded[data], "pattern": pattern, "reader": reader, "variant": variant,
                             "latency_ms": 0, "bandwidth_mbps": 0}) for reader, data, variant, pattern in FAULT_CASES
                   for _ in range(3)]
    finally:
        cloud_env.set_faults()
    for record in records:
        assert record["status"] == "ok", record["error"]
        client, proxy = record["client_counts"], record["proxy_counts"]
        faults = record["faults_seen"]["slowdown"] + record["faults_seen"]["reset"]
        assert faults == record["retries"]
        if record["reader"] == "zarr-obstore":  # obstore retries inside Rust: the client sees each request once
            met["obstore"] += faults
            assert client["errors"] == 0 and client["requests"] + faults == proxy["requests"]
            continue
        met["botocore"] += faults
        # aiohttp sends a GET/HEAD once more by itself when its connection breaks before an answer (RFC 9112):
        # botocore, hence the client, sees one attempt where the proxy saw two
        hidden = proxy["requests"] - client["requests"]
        assert 0 <= hidden <= record["faults_seen"]["reset"]
        assert client["errors"] + hidden == faults
        # the 503 answers' XML reached the client; the proxy, which made them up, does not count it
        extra = client["bytes_transferred"] - proxy["bytes_transferred"]
        assert extra % len(SLOWDOWN_BODY) == 0 and 0 <= extra <= record["faults_seen"]["slowdown"] * len(SLOWDOWN_BODY)
    assert met["botocore"] > 0 and met["obstore"] > 0  # the faults did meet requests of both kinds of client
