"""The whole shared corpus (../shared/corpus): each file's expected outcome, judged from outside.

Every file is repacked by the CLI (verifying, as it does by default) and its output compared with
its input by ncdump / h5dump (tests/repack_corpus.py says what is normalised: record braces of
unlimited -> fixed, attribute order where the input tracks no creation order, phony dimension
names, values the input itself leaves undefined). Refusals are expected only where they are true,
and their reason is asserted. One many-files run of the CLI (`layoutlab repack IN... --out-dir DIR`) copies
them all, two at a time.
"""

from __future__ import annotations

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
    """Copied as a user copies many files: one ``layoutlab repack IN... --out-dir DIR`` run over the corpus."""
    names = repack_corpus.corpus_files()
    assert len(names) >= 160
    rows = repack_corpus.judge_all(names, tmp_path, jobs=2)
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
        if not expected_ok:
            wrong.append(row)
    assert not wrong, "\n".join(f"{r['file']}: {r['class']}: {r.get('reason') or r.get('difference') or r.get('message')}"
                                for r in wrong)


REAL_PRODUCTS = ["icesat2/ATL06_20181013235645_02340114_209_01.h5",
                 "gpm/2A-RW-BRS.GPM.Ku.V6-20160118.20141206-S095002-E095137.004383.V04A.HDF5"]


def _fix_printed_by_inspect_check(path) -> list[str]:
    """The options of the ``layoutlab repack IN OUT ...`` fix that ``inspect --check`` prints, the
    most complete of them (the small-chunks fix adds --target-chunk-bytes to the paging one)."""
    import shlex
    import subprocess

    done = subprocess.run([*repack_corpus.layoutlab_command(), "inspect", "--check", str(path)],
                          capture_output=True, text=True)
    assert done.returncode == 1, done.stdout + done.stderr  # (not cloud-ready as published)
    fixes = [shlex.split(line.split("fix: ", 1)[1].split(" (", 1)[0]) for line in done.stdout.splitlines()
             if "fix: layoutlab repack " in line]
    assert fixes, done.stdout
    return max((fix[4:] for fix in fixes), key=len)  # (after "layoutlab repack IN OUT")


@pytest.mark.parametrize("name", REAL_PRODUCTS)
def test_real_nasa_granules_repack_unchanged_and_pass_the_check_after_its_fix(name, tmp_path):
    """Issue 27: ICESat-2 ATL06 (release 209) and GPM DPR 2A Ku (V04A) were refused ("wrong fractal heap
    header signature"). Now the fix inspect --check prints makes a copy that ncdump shows unchanged (but
    for unlimited -> fixed) and that passes the check."""
    import subprocess

    src, out = repack_corpus.CORPUS / name, tmp_path / "cloud.h5"
    if not src.exists():
        pytest.skip(f"{name} not in the shared corpus")
    options = _fix_printed_by_inspect_check(src)
    done = subprocess.run([*repack_corpus.layoutlab_command(), "repack", str(src), str(out), *options],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "verified" in done.stdout, done.stderr
    status, before = repack_corpus.ncdump_view(src)
    assert status == 0
    assert repack_corpus.ncdump_view(out) == (0, before)
    check = subprocess.run([*repack_corpus.layoutlab_command(), "inspect", "--check", str(out)],
                           capture_output=True, text=True)
    assert check.returncode == 0 and "cloud-ready" in check.stdout, check.stdout + check.stderr
