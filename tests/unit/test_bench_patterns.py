"""Access patterns on local files (no sockets): right values, right errors."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layoutlab.bench.patterns import PATTERNS, PatternMismatch, check_values, get_pattern
from layoutlab.bench.readers import H5pyHandle, ZarrHandle
from layoutlab.errors import UserError
from layoutlab.samples.atl03 import photon_values, write_atl03
from layoutlab.samples.geos import GeosGrid, geos_values, write_geos

SHAPE = (24, 19, 36)  # 10 degree grid: lat -90..90, lon -180..170


@pytest.fixture(scope="module")
def geos(tmp_path_factory):
    path = write_geos(tmp_path_factory.mktemp("geos") / "g.nc", shape=SHAPE, chunks=(6, 19, 36))
    with h5py.File(path, "r") as f:
        yield H5pyHandle("hdf5", f)


@pytest.fixture(scope="module")
def atl03(tmp_path_factory):
    path = write_atl03(tmp_path_factory.mktemp("atl03") / "a.h5", photons=3000, chunk=1000, seed=3)
    with h5py.File(path, "r") as f:
        yield H5pyHandle("hdf5", f)


def run(handle, name, **params):
    pattern = get_pattern(name)
    selection = pattern.select(handle, pattern.params(params))
    loaded = pattern.load(handle, selection)
    return selection, loaded, check_values(handle, selection, loaded)


def test_gridded_patterns_return_the_source_values(geos):
    full = geos_values(GeosGrid(SHAPE), 0, SHAPE[0])
    sel, loaded, ok = run(geos, "timeseries-point", lat=47.61, lon=-122.19)
    i, j = sel.info["lat_index"], sel.info["lon_index"]
    assert (i, j) == (14, 6)  # 50N is nearest to 47.61; 120W nearest to -122.19
    np.testing.assert_array_equal(loaded.values[0], full[:, i, j])
    assert ok is True and loaded.points == SHAPE[0] and loaded.bytes_needed == SHAPE[0] * 4

    sel, loaded, ok = run(geos, "map-timestep")
    assert sel.info["time_index"] == 12 and ok is True
    np.testing.assert_array_equal(loaded.values[0], full[12])

    sel, loaded, ok = run(geos, "timeseries-region-mean")  # Ohio box is smaller than a cell: nearest cell
    assert ok is True and loaded.values[0].shape == (SHAPE[0],)

    sel, loaded, ok = run(geos, "map-time-mean", time_start=3, hours=6)
    np.testing.assert_allclose(loaded.values[0], full[3:9].mean(axis=0, dtype="f8"))
    assert ok is True and loaded.points == 6 * 19 * 36


def test_a_wrong_source_fails_the_checksum(geos):
    pattern = get_pattern("map-timestep")
    selection = pattern.select(geos, pattern.params({}))
    loaded = pattern.load(geos, selection)
    assert check_values(geos, selection, loaded, seed=1) is False


@pytest.mark.parametrize("name, params, says", [
    ("timeseries-point", {"lat": 95.0}, "outside the grid"),
    ("map-timestep", {"time_index": 24}, "outside 0..23"),
    ("map-time-mean", {"time_start": 20, "hours": 6}, "does not fit 24 time steps"),
    ("timeseries-region-mean", {"lat_min": 10, "lat_max": 5}, "outside the grid"),
    ("map-timestep", {"variable": "lat"}, "needs \\(time, lat, lon\\)"),
    ("beam-read", {}, "no array 'gt1l/heights/h_ph'"),
    ("slab-read", {"workers": 4, "scaling": "weak", "rows_per_worker": 7}, "exceed the 24 rows"),
])
def test_patterns_that_do_not_fit_say_why(geos, name, params, says):
    with pytest.raises(PatternMismatch, match=says):
        run(geos, name, **params)


def test_unknown_pattern_and_parameter():
    with pytest.raises(UserError, match="choose from"):
        get_pattern("heatmap")
    with pytest.raises(UserError, match="unknown parameter"):
        get_pattern("map-timestep").params({"timestep": 3})


def test_atl03_patterns(atl03):
    expected = photon_values("gt1l", 0, 3000, seed=3)
    sel, loaded, ok = run(atl03, "beam-read")
    np.testing.assert_array_equal(loaded.values[0], expected["h_ph"])
    assert ok is True

    sel, loaded, ok = run(atl03, "beam-subset")
    start, stop = sel.info["photon_slice"]
    lat = expected["lat_ph"]
    inside = np.nonzero((lat >= sel.info["lat_min"]) & (lat <= sel.info["lat_max"]))[0]
    assert (start, stop) == (inside[0], inside[-1] + 1) and 0 < stop - start < 3000
    np.testing.assert_array_equal(loaded.values[0], expected["h_ph"][start:stop])
    assert ok is True

    sel, loaded, ok = run(atl03, "granule-open-list")
    assert ok is None and loaded.summary["arrays"] > 100 and loaded.summary["attributes"] > loaded.summary["arrays"]

    sel, loaded, ok = run(atl03, "full-read-throughput")
    assert sel.info["path"] == "gt1l/heights/h_ph" and ok is True

    with pytest.raises(PatternMismatch, match="no photons"):
        run(atl03, "beam-subset", lat_min=10, lat_max=11)


@pytest.mark.parametrize("name, params", [("beam-read", {}), ("beam-read", {"mean": True}), ("beam-subset", {})])
def test_atl03_reads_are_checked_block_by_block(atl03, monkeypatch, name, params):
    """The values check regenerates a beam in blocks (a whole beam of a 7 GB granule, made at once,
    needed more than the case's 1769 MB): the verdict is the same across block boundaries, and one
    photon changed, or the mean off by 1e-5, is still caught."""
    from layoutlab.bench import patterns

    monkeypatch.setattr(patterns, "ATL03_CHECK_BLOCK", 700)  # 3000 photons: five blocks, a partial last one
    sel, loaded, ok = run(atl03, name, **params)
    assert ok is True
    value = np.array(loaded.values[0], copy=True)
    if params.get("mean"):
        value = value * (1 + 1e-5)
    else:
        value[-1] += 0.5  # the last photon: in the last, partial block of a whole beam
    assert check_values(atl03, sel, type(loaded)([value], loaded.points, loaded.bytes_needed)) is False


def test_checking_a_beam_mean_holds_one_block_not_the_beam():
    import tracemalloc

    from layoutlab.bench.patterns import ATL03_CHECK_BLOCK, Read, _atl03_expected

    photons = 4 * ATL03_CHECK_BLOCK
    tracemalloc.start()
    try:
        mean = _atl03_expected(Read("gt1l/heights/h_ph", (slice(None),), mean_axes=(0,)), (photons,), 3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # photon_values makes ~100 bytes a photon: the whole beam at once would peak near 400 MB here
    assert peak < 40 * photons, peak
    whole = photon_values("gt1l", 0, photons, seed=3)["h_ph"]
    assert float(mean) == pytest.approx(float(whole.mean(dtype="f8")), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 500), workers=st.integers(1, 40))
def test_strong_scaling_shares_tile_the_variable_exactly_once(rows, workers):
    class Fake:
        def __init__(self):
            self.a = np.zeros((rows, 2))

        def array(self, path):
            return self.a

        def has(self, path):
            return True

    pattern = PATTERNS["slab-read"]
    seen = np.zeros(rows, int)
    for k in range(workers):
        sel = pattern.select(Fake(), pattern.params({"variable": "x", "workers": workers, "worker": k}))
        start, stop = sel.info["rows"]
        seen[start:stop] += 1
    assert (seen == 1).all()


def test_zarr_handle_lists_and_reads(tmp_path, geos):
    import zarr

    group = zarr.open_group(tmp_path / "z.zarr", mode="w", zarr_format=3)
    group.attrs["Title"] = "GEOS-FP-like test"
    values = geos_values(GeosGrid(SHAPE), 0, SHAPE[0])
    array = group.create_array("BCEXTTAU", shape=SHAPE, chunks=(24, 5, 5), dtype="f4")
    array[:] = values
    group.create_array("lat", shape=(19,), dtype="f8")[:] = GeosGrid(SHAPE).lat
    group.create_array("lon", shape=(36,), dtype="f8")[:] = GeosGrid(SHAPE).lon
    handle = ZarrHandle("zarr", zarr.open_group(tmp_path / "z.zarr", mode="r"))
    sel, loaded, ok = run(handle, "timeseries-point", lat=0, lon=0)
    assert ok is True
    assert handle.listing() == {"objects": 3, "arrays": 3, "attributes": 1}
