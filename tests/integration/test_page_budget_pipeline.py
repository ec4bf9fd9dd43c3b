"""``page_size: auto`` through the local cloud (issue 17): a granule gets the page chosen for it and its
VARIANT item reports the overhead against the budget; a grid too small for pages to help gets a
SKIPPED variant, the references planned over it are skipped too, and its cases are not measured,
while the run succeeds with no FAILURE item."""

from __future__ import annotations

import json

import pytest

from layoutlab.convert.page_budget import choose_page_size
from layoutlab.local import dispatch
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


def test_the_cases_of_the_skipped_variants_are_left_out_before_the_bench_and_the_run_says_so(run):
    # each such case used to start a bench invocation that measured nothing (a Fargate task in AWS)
    pipeline, files, outcomes, final = run
    grid, granule = outcomes["grid"], outcomes["granule"]
    [run_item] = _items(pipeline, grid, "RUN")
    left_out = {entry["variant"]: entry for entry in run_item["cases_left_out"]}
    assert set(left_out) == {"paged-auto", "kerchunk-paged-auto"}
    assert left_out["paged-auto"]["cases"] == 2 and left_out["paged-auto"]["why"].startswith("paging skipped: the file")
    assert left_out["kerchunk-paged-auto"]["cases"] == 1
    assert left_out["kerchunk-paged-auto"]["why"].startswith("references over paged-auto, which was not made")
    results = _items(pipeline, grid, "RESULT")
    assert run_item["cases"] == len(results) == 3  # original x 2 readers, kerchunk-original: every case planned ran
    body = pipeline.s3.get_object(Bucket=dispatch.OUTPUTS_BUCKET,
                                  Key=f"runs/{grid['dataset_id']}/cases-of-made-variants.json")["Body"].read()
    assert {case["variant"] for case in json.loads(body)} == {"original", "kerchunk-original"}
    [granule_run] = _items(pipeline, granule, "RUN")
    assert "cases_left_out" not in granule_run  # every variant made: the plan's list, unchanged
