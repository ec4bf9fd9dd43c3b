"""``layoutlab inspect --check`` over the shared corpus of third-party HDF5 / NetCDF files.

Every file gets a verdict (no traceback, no file skipped): files that are not HDF5 fail as not
checkable, the others with their problems. Then every HDF5 / NetCDF-4 file is repacked as the
check's own not-paged fix says (its page size) and checked again: the copy must pass the rules
repack is there to fix (paging, metadata in few requests, unlimited dimensions, COMPACT). Chunk
sizes are the producer's choice and repack keeps them unless asked, so those rules may still fail.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from shared_corpus import binary_files, build_cdl, cdl_files, label

from layoutlab.errors import UserError
from layoutlab.formats.readiness import RULE_NAMES

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not binary_files(), reason="shared corpus not found (set LAYOUTLAB_CORPUS)")]

REPACK_FIXES = ("not-paged", "scattered-metadata", "unlimited", "compact")
NOT_HDF5 = {"hdf5-json/notahdf5file.h5", "xarray/bears.nc", "xarray/example_1.nc",
            *(f"netcdf-c/{name}.nc" for name in (
                "nc_test_bad_cdf5_begin", "ncdump_ref_nccopy3_subset", "ncdump_ref_null_byte_padding_test",
                "ncdump_ref_test_360_day_1900", "ncdump_ref_test_365_day_1900", "ncdump_ref_test_366_day_1900",
                "nctest_ref_nctest_64bit_offset", "nctest_ref_nctest_classic")),
            *(f"netcdf4-python/{name}.nc" for name in ("CRM032_test1", "netcdf_dummy_file", "ubyte"))}


def check(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "layoutlab.cli", "inspect", "--check", *map(str, args)],
                          capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, str]:
    """``{corpus label: path to check}``: the stored files and the CDL sources ncgen builds."""
    built = tmp_path_factory.mktemp("corpus-nc4")
    files = {label(p): str(p) for p in binary_files()}
    for cdl in cdl_files():
        path = build_cdl(cdl, built)
        if path is not None:  # (a CDL ncgen cannot build is netcdf-c's, not ours)
            files[label(cdl)] = str(path)
    return files


@pytest.fixture(scope="module")
def checked(corpus):
    paths = list(corpus.values())
    text, as_json = check(*paths), check("--json", *paths)
    return text, as_json, {r["file"]: r for r in json.loads(as_json.stdout)}


def test_every_corpus_file_gets_a_verdict_without_a_traceback(corpus, checked):
    text, as_json, results = checked
    for run in (text, as_json):
        assert "Traceback" not in run.stderr, run.stderr[-3000:]
        assert run.returncode == 1, run.stderr[-3000:]  # some files fail; none is unreadable
    assert set(results) == set(corpus.values())
    lines = text.stdout.splitlines()
    for name, path in corpus.items():
        result = results[path]
        mine = [line for line in lines if line.startswith(f"{path}: ")]
        assert mine, f"{name}: no verdict"
        assert "error" not in result, result
        if result["ok"]:
            assert len(mine) == 1 and "cloud-ready" in mine[0]
        else:
            assert len(mine) == len(result["problems"]) >= 1
            assert all(re.search(r" \(.+ vs .+\) — fix: \S", line) for line in mine), mine
            assert {p["rule"] for p in result["problems"]} <= set(RULE_NAMES)
        if name in NOT_HDF5:
            assert [p["rule"] for p in result["problems"]] == ["not-hdf5"], result
        else:
            assert result["format"] in ("hdf5", "netcdf4"), result


def test_repacked_as_the_fix_says_every_file_passes_the_rules_repack_fixes(corpus, checked, tmp_path):
    from layoutlab.convert.repack import repack  # what `layoutlab repack` runs (native engine, else Python)
    from layoutlab.guard import run_guarded

    _, _, results = checked
    repacked, refused = {}, {}
    for name, path in corpus.items():
        result = results[path]
        if name in NOT_HDF5:
            continue
        fix = next(p["fix"] for p in result["problems"] if p["rule"] == "not-paged")  # (no corpus file is paged)
        page = re.search(r"--page-size (\S+)", fix).group(1)
        out = tmp_path / f"{len(repacked) + len(refused):03d}-{name.replace('/', '-')}"
        try:
            run_guarded(repack, path, out, page_size=page, path=path)
        except UserError as error:
            refused[name] = str(error)
            continue
        repacked[name] = str(out)
    assert not refused, refused  # (tests/integration/test_repack_corpus.py: repack refuses only non-HDF5 files)
    assert len(repacked) == len(corpus) - len(NOT_HDF5)
    done = check("--json", *repacked.values())
    assert "Traceback" not in done.stderr and done.returncode in (0, 1), done.stderr[-3000:]
    after = {r["file"]: r for r in json.loads(done.stdout)}
    still = {name: [p["message"] for p in after[out]["problems"] if p["rule"] in REPACK_FIXES]
             for name, out in repacked.items()}
    still = {name: problems for name, problems in still.items() if problems}
    assert not still, still
