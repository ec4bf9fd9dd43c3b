"""The GEOS-like sample: the shape, coordinates, chunking and attributes users expect."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from layoutlab.samples import geos


def test_geos_sample_is_a_cf_netcdf4_file_chunked_per_time_step(tmp_path):
    path = geos.write_geos(tmp_path / "geos.nc", shape=(12, 19, 32))
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        var = ds[geos.VARIABLE]
        assert var.dims == ("time", "lat", "lon")
        assert var.dtype == np.float32
        assert var.encoding["chunksizes"] == (1, 19, 32)
        assert float(ds.lat[0]) == -90.0 and float(ds.lat[-1]) == 90.0
        assert float(ds.lon[0]) == -180.0
        assert var.attrs["units"] == "1"
        values = var.values
    assert not (tmp_path / "geos.nc.partial").exists()
    # smooth plus noise: neither constant nor random
    assert values.std() > 1e-3
    neighbour_diff = np.abs(np.diff(values, axis=2)).mean()
    assert neighbour_diff < values.std() / 2


def test_full_resolution_longitudes_match_geos_fp():
    grid = geos.GeosGrid(geos.FULL_SHAPE)
    assert grid.lon[0] == -180.0
    assert grid.lon[-1] == pytest.approx(179.6875)
    assert grid.lat.size == 721


def test_values_are_reproducible_for_any_time_slice(tmp_path):
    grid = geos.GeosGrid((10, 7, 8))
    whole = geos.geos_values(grid, 0, 10, seed=3)
    np.testing.assert_array_equal(whole[4:7], geos.geos_values(grid, 4, 7, seed=3))
    path = geos.write_geos(tmp_path / "g.nc", shape=(10, 7, 8), chunks=(5, 7, 8), seed=3)
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        np.testing.assert_array_equal(ds[geos.VARIABLE].values, whole)


@pytest.mark.parametrize("text", ["1,2", "a,b,c", "0,2,3", "1,-2,3"])
def test_bad_shape_text_is_rejected(text):
    with pytest.raises(ValueError):
        geos.parse_shape(text)
