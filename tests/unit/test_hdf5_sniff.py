"""sniff: what a file is, from its first bytes (as the ingest Lambda sees an S3 object) or a path."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from layoutlab.formats import sniff as sniff_module
from layoutlab.formats.sniff import HEAD_BYTES, describe_not_hdf5, sniff, sniff_bytes


def _head(path):
    return path.read_bytes()[:HEAD_BYTES]


def test_plain_hdf5_and_netcdf4(tmp_path):
    import netCDF4

    with h5py.File(tmp_path / "plain.h5", "w") as f:
        f["x"] = np.arange(3)
    with netCDF4.Dataset(tmp_path / "nc4.nc", "w", format="NETCDF4") as nc:
        nc.createDimension("x", 3)
        nc.createVariable("v", "f4", ("x",))[:] = [1, 2, 3]
    assert sniff(tmp_path / "plain.h5") == "hdf5"
    assert sniff_bytes(_head(tmp_path / "plain.h5")) == "hdf5"
    assert sniff(tmp_path / "nc4.nc") == "netcdf4"
    assert sniff_bytes(_head(tmp_path / "nc4.nc")) == "netcdf4"


def test_netcdf4_written_by_h5netcdf_is_recognised_from_the_path(tmp_path):
    import h5netcdf

    with h5netcdf.File(tmp_path / "h5n.nc", "w") as f:
        f.dimensions = {"x": 4}
        f.create_variable("v", ("x",), "f4")
    assert sniff(tmp_path / "h5n.nc") == "netcdf4"


@pytest.mark.parametrize("userblock", [512, 1024, 4096])
def test_hdf5_after_a_user_block(tmp_path, userblock):
    path = tmp_path / "ub.h5"
    with h5py.File(path, "w", userblock_size=userblock) as f:
        f["x"] = np.arange(3)
    head = _head(path)
    assert sniff_module.hdf5_signature_offset(head) == userblock
    assert sniff_bytes(head) == "hdf5"


def test_signature_only_counts_at_the_allowed_offsets():
    head = b"x" * 100 + sniff_module.HDF5_SIGNATURE + b"\0" * 1000
    assert sniff_bytes(head) == "unknown"


def test_netcdf3_zarr_and_others(tmp_path):
    import netCDF4

    with netCDF4.Dataset(tmp_path / "nc3.nc", "w", format="NETCDF3_CLASSIC") as nc:
        nc.createDimension("x", 3)
    assert sniff(tmp_path / "nc3.nc") == "netcdf3"
    assert sniff_bytes(b'{"zarr_format": 3, "node_type": "group"}') == "zarr"
    (tmp_path / "store.zarr").mkdir()
    (tmp_path / "store.zarr" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    assert sniff(tmp_path / "store.zarr") == "zarr"
    assert sniff(b"") == "unknown"
    assert sniff(b"hello world\n") == "unknown"
    assert sniff(np.random.default_rng(0).bytes(4096)) == "unknown"


def test_reasons_name_what_the_bytes_are():
    assert "empty" in describe_not_hdf5(b"", 0)
    assert "NetCDF-3" in describe_not_hdf5(b"CDF\x01\0\0\0\0")
    assert "text" in describe_not_hdf5(b"time,value\n1,2\n")
    assert "no HDF5 signature" in describe_not_hdf5(np.random.default_rng(1).bytes(2048))
