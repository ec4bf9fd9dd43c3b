"""Request accounting: what each reader counts at its client equals what the local S3 proxy counted.

Every reader in ``READERS`` runs every pattern it supports on small generated
data (GEOS-like NetCDF and Zarr, unsharded and sharded; ATL03-like HDF5, paged
HDF5 and Zarr) behind a proxy client of its own (``run_case``), and the
record's ``client_counts`` must equal its ``proxy_counts``: requests (GET and
LIST together, since the proxy counts HTTP methods; HEAD), response bytes, per
phase and in total. One tolerance: obstore does not expose the XML of a LIST
answer, so for zarr-obstore cases that list, the proxy may count more bytes
than the client, by no more than those answers can weigh (checked per LIST).

Then: a record on "real S3" (moto without the proxy) has requests, bytes and
over-read from the client alone; boto3, s3fs listings past one page and
obstore's coalesced ranges agree with the proxy; with faults injected the
client's errors are the proxy's 503s and resets.
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
    paged = root / "atl03-paged.h5"
    subprocess.run(["h5repack", "-S", "PAGE", "-G", str(2**20), str(atl03), str(paged)], check=True)
    return {"geos": geos, "zarr": root / "geos.zarr", "sharded": root / "geos-sharded.zarr", "atl03": atl03,
            "paged": paged, "atl03-zarr": _atl03_zarr(atl03, root / "atl03.zarr")}


# reader -> [(data, variant, patterns)]; every pattern each reader supports on this data
HDF5 = [("geos", "original", GRID), ("atl03", "original", GRANULE)]
MATRIX = {
    "h5py-s3fs-default": HDF5 + [("paged", "paged-1MiB", GRANULE)],
    "h5py-s3fs-aligned": HDF5 + [("paged", "paged-1MiB", GRANULE)],
    "h5py-ros3": HDF5,
    # h5netcdf refuses the ATL03 tree as a whole (dimension scales mixed with phony dimensions, README)
    "xarray-h5netcdf": [("geos", "original", GRID), ("atl03", "original", tuple(p for p in GRANULE
                                                                                if p != "granule-open-list"))],
    "zarr-obstore": [("zarr", "zarr-24x8x8", GRID), ("sharded", "zarr-sharded", GRID),
                     ("atl03-zarr", "zarr-gt1l", GRANULE)],
    "zarr-fsspec": [("zarr", "zarr-24x8x8", GRID), ("sharded", "zarr-sharded", GRID),
                    ("atl03-zarr", "zarr-gt1l", GRANULE)],
}
CASES = [(reader, data, variant, pattern) for reader, rows in MATRIX.items()
         for data, variant, patterns in rows for pattern in patterns]


def test_the_matrix_covers_every_reader():
    assert set(MATRIX) == set(READERS)


@pytest.fixture(scope="module")
def cloud_env(local_cloud):
    """The local cloud's environment for the whole module (``cloud`` would empty moto after every test)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in local_cloud.env().items():
            patch.setenv(key, value)
        try:
            yield local_cloud
        finally:
            local_cloud.reset()


@pytest.fixture(scope="module")
def uploaded(cloud_env, files):
    return {name: upload_target(path, cloud_env, prefix="accounting") for name, path in files.items()}


def _unseen_bound(reader: str, client: dict) -> int:
    """Bytes the client may not see: for obstore, the XML of LIST answers and of 404 answers; else none."""
    if reader != "zarr-obstore":
        return 0
    return client["list_requests"] * LIST_BODY_BOUND + client["not_found"] * ERROR_BODY_BOUND


@pytest.mark.parametrize("reader, data, variant, pattern", CASES)
def test_client_counts_equal_proxy_counts(uploaded, reader, data, variant, pattern):
    if reader == "h5py-ros3" and not ros3_available():
        pytest.skip("this h5py has no ros3 driver (README: h5py with ros3)")
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
