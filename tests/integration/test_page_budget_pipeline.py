"""``page_size: auto`` through the local cloud (issue 17): a granule gets the page chosen for it and its
VARIANT item reports the overhead against the budget; a grid too small for pages to help gets a
SKIPPED variant, the references planned over it are skipped too, and its cases are not measured,
while the run succeeds with no FAILURE item."""

from __future__ import annotations

import pytest

from layoutlab.convert.page_budget import choose_page_size
from layoutlab.local.pipeline import LocalPipeline
from layoutlab.samples import atl03, geos

pytestmark = pytest.mark.slow

PLAN = {
    "name": "budget",
    "variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "auto", "size_budget": "5%"},
                 {"kind": "virtual-kerchunk"}],
    "patterns": {"grid": ["timeseries-point"], "granule": ["granule-open-list"]},
    "readers": {"hdf5": ["h5py-s3fs-default", "h5py-s3fs-aligned"], "kerchunk": ["kerchunk-fsspec"]},
    "platforms": ["local-lambda"],
    "repetitions": 1,
    "max_concurrency": 1,
}


@pytest.fixture(scope="module")
def run(local_cloud, tmp_path_factory):
    work = tmp_path_factory.mktemp("budget-run")
    files = {"granule": atl03.write_atl03(work / "granule.h5", photons=50_000),
             "grid": geos.write_geos(work / "grid.nc", shape=(24, 19, 36))}
    pipeline = LocalPipeline(local_cloud)
    pipeline.setup()
    pipeline.put_plan("budget", PLAN)
    outcomes = {}
    for name, path in files.items():
        outcomes[name] = pipeline.deliver(pipeline.upload(path, plan="budget"))[0]
    final = pipeline.wait([o for o in outcomes.values() if o["status"] == "started"], timeout=900)
    try:
        yield pipeline, files, outcomes, final
    finally:
        local_cloud.reset()


def _items(pipeline, outcome, kind):
    return pipeline.store.items(dataset=outcome["dataset_id"], kind=kind)


def test_the_granule_gets_the_page_chosen_for_it_within_the_budget(run):
    pipeline, files, outcomes, final = run
    outcome = outcomes["granule"]
    assert final[outcome["dataset_id"]] == "SUCCEEDED", _items(pipeline, outcome, "FAILURE")
    variants = {v["variant"]: v for v in _items(pipeline, outcome, "VARIANT")}
    paged = variants["paged-auto"]
    expected = choose_page_size(files["granule"])
    assert paged["status"] == "READY" and paged["page_size"] == expected.page_size < 8 * 2**20
    assert paged["page_size_choice"] == expected.reason
    assert paged["size_budget"] == 0.05 and paged["within_budget"] is True and paged["size_overhead"] <= 0.05
    measured = {(r["variant"], r["reader"]) for r in _items(pipeline, outcome, "RESULT")}
    assert {("paged-auto", "h5py-s3fs-aligned"), ("kerchunk-paged-auto", "kerchunk-fsspec")} <= measured


def test_a_grid_too_small_for_pages_is_skipped_not_failed_and_its_cases_are_not_run(run):
    pipeline, files, outcomes, final = run
    outcome = outcomes["grid"]
    assert final[outcome["dataset_id"]] == "SUCCEEDED"
    assert _items(pipeline, outcome, "FAILURE") == []
    variants = {v["variant"]: v for v in _items(pipeline, outcome, "VARIANT")}
    assert variants["paged-auto"]["status"] == "SKIPPED"
    assert variants["paged-auto"]["reason"].startswith("paging skipped: the file")
    assert variants["kerchunk-paged-auto"]["status"] == "SKIPPED"
    measured = {r["variant"] for r in _items(pipeline, outcome, "RESULT")}
    assert measured == {"original", "kerchunk-original"}
