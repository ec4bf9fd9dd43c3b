"""`layoutlab inspect --json` on every file of the shared corpus (third-party HDF5 / NetCDF).

Each file: exit 0 and a JSON report (inspect reports on odd files, it does not refuse
them: NetCDF-3, text and truncated files get a verdict), and for NetCDF-4 files the
unlimited dimensions with the current lengths ``ncdump -h`` prints (issue 15: dimensions
with no coordinate variable were reported as 0).
"""

from __future__ import annotations

import json

import pytest
from shared_corpus import binary_files, build_cdl, cdl_files, label, ncdump_unlimited_lengths

from layoutlab import cli

FILES = binary_files() + cdl_files()
pytestmark = pytest.mark.skipif(not FILES, reason="shared corpus not found (set LAYOUTLAB_CORPUS)")

# Files that are not HDF5 at all: inspect says what they are instead of inspecting them.
NOT_HDF5 = {
    "hdf5-json/notahdf5file.h5": "unknown",
    **{f"netcdf-c/{name}.nc": "netcdf3" for name in (
        "nc_test_bad_cdf5_begin", "ncdump_ref_nccopy3_subset", "ncdump_ref_null_byte_padding_test",
        "ncdump_ref_test_360_day_1900", "ncdump_ref_test_365_day_1900", "ncdump_ref_test_366_day_1900",
        "nctest_ref_nctest_64bit_offset", "nctest_ref_nctest_classic")},
    **{f"netcdf4-python/{name}.nc": "netcdf3" for name in ("CRM032_test1", "netcdf_dummy_file", "ubyte")},
    "xarray/bears.nc": "netcdf3",
    "xarray/example_1.nc": "netcdf3",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return tmp_path_factory.mktemp("corpus-nc4")


@pytest.mark.parametrize("source", FILES, ids=[label(p) for p in FILES])
def test_inspect_reports_every_corpus_file_and_ncdumps_unlimited_lengths(source, built, capsys):
    path = source
    if source.suffix == ".cdl":
        path = build_cdl(source, built)
        if path is None:
            pytest.skip("ncgen cannot build this CDL (netcdf-c's, not ours)")
    assert cli.main(["inspect", "--json", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    expected_format = NOT_HDF5.get(label(source))
    if expected_format:
        assert report["format"] == expected_format and report["hdf5"] is None
        assert not report["verdict"]["ready"]
        return
    assert report["format"] in ("hdf5", "netcdf4") and report["hdf5"] is not None
    if report["format"] != "netcdf4":
        return  # plain HDF5: ncdump invents phony dimensions that are no file's own
    want = ncdump_unlimited_lengths(path)
    if want is None:
        pytest.skip("ncdump cannot read this file")
    got = {d["name"]: d["length"] for d in report["hdf5"]["netcdf_unlimited_dimensions"]}
    assert got == want
