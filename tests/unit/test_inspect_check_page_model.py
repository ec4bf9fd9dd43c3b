"""``inspect --check`` and ``repack --page-size auto`` predict a paged copy's size with one model.

Both ask how large a file becomes repacked with paged aggregation at a page size; both now answer
with ``layoutlab.formats.paged_layout`` (``file_allocations`` + ``predict``, calibrated against real
repacks). What a user notices: the estimated size change ``inspect --check`` prints beside its
proposed page is the number ``convert.page_budget`` predicts for that page, and ``choose_page_size``
held to the same pages does not contradict the check's choice.

Their policies differ, legitimately, and the tests say where:
- the check proposes, among the pages that pass its rules, the one that pads the file least (ties:
  the smaller page); ``auto`` takes the largest page within a size budget (ties: the larger page);
- the check's rules bound the pages from below, ``auto``'s do not: every chunk up to ``--max-chunk``
  (and every chunk its small-chunks fix grows) within a page, and the metadata in half the allowed
  metadata GETs (counted from the report's non-raw bytes). So on the ATL03-like sample, whose
  non-raw bytes (2.2 MB) ask for at least 2 MiB, unconstrained ``auto`` takes 1 MiB and the check
  2 MiB; held to the check's pages (``min_page``/``max_page``) ``auto`` agrees with it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from layoutlab.convert import page_budget
from layoutlab.convert.page_budget import choose_page_size
from layoutlab.formats import paged_layout
from layoutlab.formats.inspect import inspect_file
from layoutlab.formats.readiness import Thresholds, check_report, fix_page_candidates
from layoutlab.samples import atl03, geos
from layoutlab.units import size_label


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """The samples test_page_budget uses: an ATL03-like granule (~9 MB) and the demo's GEOS-like grid (9.3 MB)."""
    folder = tmp_path_factory.mktemp("samples")
    return {"atl03": atl03.write_atl03(folder / "atl03.h5", photons=50_000),
            "geos": geos.write_geos(folder / "geos.nc", shape=(240, 91, 144))}


def checked(path) -> dict:
    """``layoutlab inspect --check --json PATH``, as a user runs it: the not-paged problem."""
    done = subprocess.run([sys.executable, "-m", "layoutlab.cli", "inspect", "--check", "--json", str(path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    (result,) = json.loads(done.stdout)
    return {p["rule"]: p for p in result["problems"]}


def check_constraints(path) -> list[int]:
    """The pages the check may propose for ``path`` (its rules' lower bound up to the file's size)."""
    report = inspect_file(path, page_size=8 << 20, per_dataset=True)
    t = Thresholds()
    small = [d for d in report["hdf5"]["chunked_datasets"]
             if d["stored_count"] > 1 and d["stored_median"] < t.min_chunk]
    return fix_page_candidates(report, t, small)


@pytest.mark.parametrize("name", ["atl03", "geos"])
def test_the_checks_estimate_for_its_page_is_page_budgets_prediction(samples, name):
    path = samples[name]
    problem = checked(path)["not-paged"]
    page = problem["page_size"]
    predicted = page_budget.predict(page_budget.file_allocations(path), page)
    assert problem["estimated_overhead"] == round(predicted.overhead, 6)
    assert f"--page-size {size_label(page)} " in problem["fix"]
    assert f"estimated size {predicted.overhead:+.0%})" in problem["fix"]
    # the page is the one that pads least among the pages the check allows, by that same model
    allocations = page_budget.file_allocations(path)
    sizes = {p: page_budget.predict(allocations, p).output_bytes for p in check_constraints(path)}
    assert sizes[page] == min(sizes.values()) and page == min(p for p in sizes if sizes[p] == sizes[page])


@pytest.mark.parametrize("name", ["atl03", "geos"])
def test_auto_held_to_the_checks_pages_does_not_contradict_it(samples, name):
    path = samples[name]
    problem = checked(path)["not-paged"]
    page, estimate = problem["page_size"], problem["estimated_overhead"]
    pages = check_constraints(path)
    # Both samples pad more than 5 % at every page the check allows: auto skips paging, naming the
    # same smallest overhead the check estimates for its page.
    choice = choose_page_size(path, min_page=pages[0], max_page=pages[-1])
    assert estimate > 0.05
    assert choice.skip and choice.reason.startswith("no page size meets the 5% budget")
    assert f"the smallest overhead is {estimate:+.1%}" in choice.reason
    by_page = {p.page_size: p for p in choice.predictions}
    assert round(by_page[page].overhead, 6) == estimate
    # With the budget the check's page needs, auto pages: as large a page as pads as little (the check
    # takes the smaller of equally small copies, auto the larger), never one that pads more.
    choice = choose_page_size(path, estimate + 1e-6, min_page=pages[0], max_page=pages[-1])
    assert not choice.skip and choice.page_size >= page
    assert round(choice.predicted_overhead, 6) == estimate


def test_without_the_checks_rules_auto_may_take_a_smaller_page(samples):
    """The documented difference: the check's metadata bound (non-raw bytes in half the allowed GETs)
    asks the ATL03-like sample for 2 MiB or more; auto, bounded only by its budget, takes 1 MiB."""
    path = samples["atl03"]
    assert checked(path)["not-paged"]["page_size"] == check_constraints(path)[0] == 2 << 20
    free = choose_page_size(path)
    assert free.page_size == 1 << 20 and free.predicted_overhead < 0.05


def test_a_report_without_the_file_proposes_the_smallest_passing_page_and_no_estimate():
    report = {"location": "granule.h5", "format": "hdf5", "size_bytes": 100_000_000, "hdf5": {
        "file_space": {"strategy": "FSM_AGGR", "paged": False, "page_size": None},
        "metadata_scatter": {"metadata_pages": 3, "assumed_page_size": 8 << 20},
        "metadata_bytes_estimate": 10_000_000, "raw_data_bytes": 90_000_000, "chunked_datasets": [],
        "unlimited_datasets": {"with_data": 0, "with_data_names": []},
        "compact_datasets": {"count": 0, "names": []}}}
    (problem,) = check_report(report, Thresholds())
    assert "--page-size 8MiB" in problem["fix"] and "estimated" not in problem["fix"]
    assert problem["page_size"] == 8 << 20 and problem["estimated_overhead"] is None


def test_the_repack_walks_the_groups_the_model_counts():
    from layoutlab.convert import repack_hdf5

    assert repack_hdf5.ancestor_groups is paged_layout.ancestor_groups
    assert paged_layout.ancestor_groups(["/a/b/c", "/d"]) == {"/", "/a", "/a/b"}


def test_an_s3_object_gets_the_local_files_page_and_estimate(samples, monkeypatch):
    """The model reads an s3:// object through inspect's reader (an h5py File on s3fs), not a path.
    (The check runs in a child, as a user runs it: s3fs leaves a thread behind in the process that reads.)"""
    from moto.server import ThreadedMotoServer

    from layoutlab.storage import boto3_s3_client

    path = samples["geos"]
    local = checked(path)["not-paged"]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        s3 = boto3_s3_client()
        s3.create_bucket(Bucket="incoming")
        s3.upload_file(str(path), "incoming", "grids/geos.nc")
        remote = checked("s3://incoming/grids/geos.nc")["not-paged"]
    finally:
        server.stop()
    assert (remote["page_size"], remote["estimated_overhead"]) == (local["page_size"], local["estimated_overhead"])
    assert remote["estimated_overhead"] is not None
    assert remote["fix"].startswith("layoutlab repack geos.nc geos-cloud.nc --page-size ")
