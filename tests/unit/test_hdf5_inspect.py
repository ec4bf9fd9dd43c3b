"""inspect: what a user learns about a file's cloud-readiness, before and after repack."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from layoutlab import cli
from layoutlab.convert.repack_hdf5 import repack
from layoutlab.errors import BadInputFile
from layoutlab.formats.inspect import format_report, inspect_file
from layoutlab.samples import atl03, geos


@pytest.fixture(scope="module")
def granules(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect")
    original = atl03.write_atl03(root / "atl03.h5", photons=12_000, chunk=2_000)
    paged = root / "paged.h5"
    repack(original, paged, page_size=1 << 20)
    return original, paged


def _fixes(report):
    return " | ".join(p["fix"] for p in report["verdict"]["problems"])


@pytest.mark.slow  # shares one ATL03-like granule (~1,000 objects) written and repacked once
def test_original_granule_is_diagnosed_with_the_nsidc_fixes(granules):
    report = inspect_file(granules[0])
    json.dumps(report)  # the pipeline stores it as JSON
    h = report["hdf5"]
    assert report["format"] == "hdf5"
    assert h["file_space"]["paged"] is False
    assert h["counts"]["datasets"] > 900 and h["counts"]["attributes"] > 5000
    assert h["compact_datasets"]["count"] > 100
    assert h["unlimited_datasets"]["count"] > 500
    assert h["filters"]["gzip"] == h["layouts"]["chunked"]
    assert h["chunks"]["count"] > 0 and h["chunks"]["stored_bytes"]["median"] < 64 * 1024
    assert h["metadata_scatter"]["regions"] > 10
    assert not report["verdict"]["ready"]
    fixes = _fixes(report)
    assert "--page-size 8MiB" in fixes and "--target-chunk-bytes" in fixes
    problems = " | ".join(p["problem"] for p in report["verdict"]["problems"])
    assert "not paged" in problems and "unlimited" in problems and "COMPACT" in problems


@pytest.mark.slow  # shares one ATL03-like granule (~1,000 objects) written and repacked once
def test_repacked_granule_reports_pages_and_no_compact_or_unlimited(granules):
    report = inspect_file(granules[1])
    h = report["hdf5"]
    assert h["file_space"] == {"strategy": "PAGE", "paged": True, "page_size": 1 << 20,
                               "persist_free_space": True, "threshold": 1}
    assert h["compact_datasets"]["count"] == 0 and h["unlimited_datasets"]["count"] == 0
    problems = " | ".join(p["problem"] for p in report["verdict"]["problems"])
    assert "not paged" not in problems and "COMPACT" not in problems
    text = format_report(report)
    assert "PAGE, 1.0 MiB pages, persist=yes" in text


def test_netcdf4_unlimited_dimension_is_named_with_its_length(tmp_path):
    path = geos.write_geos(tmp_path / "g.nc", shape=(5, 10, 16))
    report = inspect_file(path)
    assert report["format"] == "netcdf4"
    assert report["hdf5"]["netcdf_unlimited_dimensions"] == [{"name": "/time", "length": 5}]


def test_cloud_ready_file_gets_a_clean_verdict(tmp_path):
    path = tmp_path / "ready.h5"
    with h5py.File(path, "w", fs_strategy="page", fs_page_size=1 << 20, fs_persist=True, fs_threshold=1) as f:
        f.create_dataset("v", data=np.random.default_rng(0).normal(size=(64, 512, 64)).astype("f4"),
                         chunks=(8, 512, 64))
    report = inspect_file(path)
    assert report["verdict"]["ready"], report["verdict"]
    assert report["hdf5"]["chunks"]["histogram"]["1-4MiB"] == 8


def test_user_block_is_reported(tmp_path):
    path = tmp_path / "ub.h5"
    with h5py.File(path, "w", userblock_size=1024) as f:
        f["x"] = np.arange(4)
    assert inspect_file(path)["hdf5"]["userblock_bytes"] == 1024


@pytest.mark.parametrize("content, fmt, words", [(b"CDF\x01" + bytes(100), "netcdf3", "NetCDF-3"),
                                                 (b"a,b\n1,2\n", "unknown", "text"),
                                                 (b"", "unknown", "empty")])
def test_non_hdf5_files_get_a_verdict_not_an_exception(tmp_path, content, fmt, words):
    path = tmp_path / "f"
    path.write_bytes(content)
    report = inspect_file(path)
    assert report["format"] == fmt and report["hdf5"] is None
    assert words in report["verdict"]["summary"] and not report["verdict"]["ready"]


def test_truncated_hdf5_is_a_bad_input(tmp_path):
    full = tmp_path / "full.h5"
    with h5py.File(full, "w") as f:
        f.create_dataset("v", data=np.arange(100_000.0), chunks=(1000,))
    cut = tmp_path / "cut.h5"
    cut.write_bytes(full.read_bytes()[:4096])
    with pytest.raises(BadInputFile, match="truncated"):
        inspect_file(cut)
    with pytest.raises(BadInputFile, match="no such file"):
        inspect_file(tmp_path / "missing.h5")


@pytest.mark.slow  # shares one ATL03-like granule (~1,000 objects) written and repacked once
def test_inspect_command_text_and_json(granules, capsys):
    assert cli.main(["inspect", str(granules[0])]) == 0
    text = capsys.readouterr().out
    assert "verdict:" in text and "fix: layoutlab repack" in text
    assert cli.main(["inspect", str(granules[1]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hdf5"]["file_space"]["paged"] is True


def test_unlimited_dimension_without_coordinate_reports_the_length_ncdump_reports(tmp_path):
    """Issue 15: a dimension scale with no coordinate variable stays at length 0 in HDF5
    while its variables grow; ncdump reports the longest variable along it (`time = 2`)."""
    import netCDF4

    path = tmp_path / "unlim.nc"
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)  # no 'time' variable
        nc.createDimension("rec", None)
        nc.createDimension("x", 3)
        nc.createDimension("empty", None)  # used by nothing: 0
        short = nc.createVariable("short", "f4", ("time", "x"))
        short[0:2] = np.ones((2, 3))
        longer = nc.createVariable("longer", "i4", ("rec", "time"))
        longer[0:4, 0:5] = np.ones((4, 5), "i4")  # time is now 5 long, rec 4
        child = nc.createGroup("child")
        child.createDimension("t2", None)
        inner = child.createVariable("inner", "f8", ("t2", "rec"))
        inner[0:7, 0:6] = np.zeros((7, 6))  # a sub-group variable makes the root's rec 6
    report = inspect_file(path)
    lengths = {d["name"]: d["length"] for d in report["hdf5"]["netcdf_unlimited_dimensions"]}
    assert lengths == {"/time": 5, "/rec": 6, "/empty": 0, "/child/t2": 7}
    assert "time=5" in format_report(report)
