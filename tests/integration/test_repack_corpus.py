"""The whole shared corpus (../shared/corpus): each file's expected outcome, judged from outside.

Every file is repacked by the CLI (verifying, as it does by default) and its output compared with
its input by ncdump / h5dump (tests/repack_corpus.py says what is normalised: record braces of
unlimited -> fixed, attribute order where the input tracks no creation order, phony dimension
names, values the input itself leaves undefined). Refusals are expected only where they are true,
and their reason is asserted. Files run two at a time (~2-3 minutes on 2 cores).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

import repack_corpus

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not repack_corpus.CORPUS.is_dir(), reason="shared corpus not present"),
    pytest.mark.skipif(bool(repack_corpus.tools_missing()), reason="needs hdf5-tools and netcdf-bin"),
]

NETCDF3 = "NetCDF-3 classic file, not HDF5/NetCDF-4"
REFUSED = {  # file -> substring of the one-line reason
    "hdf5-json/notahdf5file.h5": "text file, not HDF5",
    "netcdf-c/nc_test_bad_cdf5_begin.nc": NETCDF3,
    "netcdf-c/ncdump_ref_nccopy3_subset.nc": NETCDF3,
    "netcdf-c/ncdump_ref_null_byte_padding_test.nc": NETCDF3,
    "netcdf-c/ncdump_ref_test_360_day_1900.nc": NETCDF3,
    "netcdf-c/ncdump_ref_test_365_day_1900.nc": NETCDF3,
    "netcdf-c/ncdump_ref_test_366_day_1900.nc": NETCDF3,
    "netcdf-c/nctest_ref_nctest_64bit_offset.nc": NETCDF3,
    "netcdf-c/nctest_ref_nctest_classic.nc": NETCDF3,
    "netcdf4-python/CRM032_test1.nc": NETCDF3,
    "netcdf4-python/netcdf_dummy_file.nc": NETCDF3,
    "netcdf4-python/ubyte.nc": NETCDF3,
    "xarray/bears.nc": NETCDF3,
    "xarray/example_1.nc": NETCDF3,
    # (issue 27) data outside the file, and what HDF5 cannot copy here (h5repack 1.10 refuses the last two too)
    "hdf5-json/h5ex_d_extern.h5": "/DS1 stores its raw data in external file(s) h5ex_d_extern.data: its data lives "
                                  "outside the file",
    "hdf5-tools/tudlink.h5": "/udlink1 is a user-defined link (link class 187) in the root group",
    "hdf5-tools/trefer_obj.h5": "/Dataset3 holds HDF5 1.12-style references (H5R_ref_t)",
}
# Refused on purpose although h5repack copies them: the copy would point at data repack never read.
DATA_OUTSIDE_THE_FILE = {"hdf5-json/h5ex_d_extern.h5"}
NOT_BUILT = {"netcdf-c-cdl/ncdump_ref_tst_econst2.cdl", "netcdf-c-cdl/ncdump_ref_tst_vlen_data2.cdl"}  # ncgen's own


def test_every_corpus_file_is_preserved_or_refused_for_its_true_reason(tmp_path):
    names = repack_corpus.corpus_files()
    assert len(names) >= 160
    with ThreadPoolExecutor(2) as pool:
        rows = list(pool.map(lambda item: repack_corpus.judge(item[1], tmp_path / str(item[0])), enumerate(names)))
    wrong = []
    for row in rows:
        name = row["file"]
        if name in NOT_BUILT:
            expected_ok = row["class"] == "not-built"
        elif name in REFUSED:
            refusal = ("refused", "wrongly-refused") if name in DATA_OUTSIDE_THE_FILE else ("refused",)
            expected_ok = row["class"] in refusal and REFUSED[name] in row.get("reason", "")
        else:
            expected_ok = row["class"] in ("preserved", "better")
        if "failed --verify" in row.get("engine_note", ""):
            expected_ok = False  # the native engine wrote a wrong copy: --verify saved the user, the test must not
            row["reason"] = row["engine_note"]
        if not expected_ok:
            wrong.append(row)
    # Most files are written by the native engine (the default); the Python engine writes what it declines.
    assert sum(row.get("engine") == "native" for row in rows) >= 80
    assert not wrong, "\n".join(f"{r['file']}: {r['class']}: {r.get('reason') or r.get('difference') or r.get('message')}"
                                for r in wrong)
