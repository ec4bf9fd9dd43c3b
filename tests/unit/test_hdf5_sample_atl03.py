"""The ATL03-like sample: the structure Lopez et al. describe, and values a reader can check."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from layoutlab import cli
from layoutlab.samples import atl03


@pytest.fixture(scope="module")
def granule(tmp_path_factory):
    return atl03.write_atl03(tmp_path_factory.mktemp("atl03") / "atl03.h5", photons=25_000, chunk=10_000, seed=7)


def _walk(f):
    datasets, groups = {}, []

    def visit(name, obj):
        (datasets.__setitem__(name, obj) if isinstance(obj, h5py.Dataset) else groups.append(name))

    f.visititems(visit)
    return datasets, groups


def test_granule_has_six_beams_and_about_a_thousand_datasets(granule):
    with h5py.File(granule, "r") as f:
        datasets, groups = _walk(f)
        assert [b for b in atl03.BEAMS if b in f] == list(atl03.BEAMS)
        assert 900 <= len(datasets) <= 1200
        assert "METADATA/Lineage/ANC01" in groups
        assert f.attrs["short_name"] == b"ATL03"  # fixed-length string attribute
        assert isinstance(f.attrs["identifier_product_type"], str)  # variable-length string attribute


def test_photon_datasets_are_chunked_gzip_unlimited_and_hold_the_seeded_values(granule):
    with h5py.File(granule, "r") as f:
        heights = f["gt2r/heights"]
        h_ph = heights["h_ph"]
        assert h_ph.shape == (25_000,)
        assert h_ph.chunks == (10_000,)
        assert h_ph.compression == "gzip"
        assert h_ph.maxshape == (None,)
        conf = heights["signal_conf_ph"]
        assert conf.shape == (25_000, 5) and conf.dtype == np.int8
        expected = atl03.photon_values("gt2r", 12_345, 23_456, seed=7)
        for name in ("h_ph", "lat_ph", "lon_ph", "delta_time", "signal_conf_ph", "weight_ph"):
            np.testing.assert_array_equal(heights[name][12_345:23_456], expected[name])
        # dimension scales as in ATL03: delta_time labels the photon axis
        assert h_ph.dims[0][0].name == "/gt2r/heights/delta_time"
        assert conf.dims[1][0].name == "/ds_surf_type"
        # heights look like terrain plus noise, not random bytes
        values = h_ph[:]
        assert 200 < np.median(values) < 800


def test_small_ancillary_datasets_are_compact(granule):
    with h5py.File(granule, "r") as f:
        layouts = {}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                layouts[name] = obj.id.get_create_plist().get_layout()

        f.visititems(visit)
        compact = [n for n, layout in layouts.items() if layout == h5py.h5d.COMPACT]
        assert len(compact) > 100
        assert "ancillary_data/data_start_utc" in compact
        assert f["ancillary_data/data_start_utc"][()] == b"2019-06-01T00:00:00.000000Z"


def test_segment_rate_groups_index_the_photons(granule):
    with h5py.File(granule, "r") as f:
        geo = f["gt1l/geolocation"]
        beg = geo["ph_index_beg"][:]
        counts = geo["segment_ph_cnt"][:]
        assert beg[0] == 1 and counts.sum() == 25_000
        assert geo["velocity_sc"].shape == (atl03.Atl03Shape(25_000).segments, 3)


def test_values_do_not_depend_on_the_slice_or_the_chunking(tmp_path):
    whole = atl03.photon_values("gt1l", 0, 30_000, seed=1)
    part = atl03.photon_values("gt1l", 9_999, 20_001, seed=1)
    for name, values in part.items():
        np.testing.assert_array_equal(values, whole[name][9_999:20_001])
    path = atl03.write_atl03(tmp_path / "a.h5", photons=3_000, chunk=700, seed=1)
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["gt3r/heights/h_ph"][:], atl03.photon_values("gt3r", 0, 3_000, 1)["h_ph"])
        assert f["gt3r/heights/h_ph"].chunks == (700,)
    assert not (tmp_path / "a.h5.partial").exists()


def test_sample_command_writes_both_kinds(tmp_path, capsys):
    assert cli.main(["sample", "atl03", str(tmp_path / "a.h5"), "--photons", "2000", "--chunk", "500"]) == 0
    assert cli.main(["sample", "geos", str(tmp_path / "g.nc"), "--shape", "4,10,16", "--chunks", "2,10,16"]) == 0
    with h5py.File(tmp_path / "g.nc", "r") as f:
        assert f["BCEXTTAU"].chunks == (2, 10, 16)
    with h5py.File(tmp_path / "a.h5", "r") as f:
        assert f["gt1l/heights/h_ph"].chunks == (500,)
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["geos", "x.nc", "--shape", "1,2"], ["geos", "x.nc", "--shape", "4,4,4", "--chunks", "8,4,4"],
                                  ["atl03", "x.h5", "--photons", "0"]])
def test_sample_command_rejects_bad_sizes_in_one_line(tmp_path, capsys, argv):
    argv = ["sample", argv[0], str(tmp_path / argv[1]), *argv[2:]]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("layoutlab sample: error:")
    assert not list(tmp_path.iterdir())
