"""More repetitions where an answer is not yet decided, through the local pipeline.

One small granule, the original and a paged copy, each read with two readers, one
repetition first and at most two: after round 1 the paged copy's comparison with the
original cannot be decided (one repetition gives no interval), so round 2 runs the
cases behind it again (both readers of both sides) as repetition 1; then the cap is
reached and the summary says the comparison stayed undecided. Which cases a round
picks is tested with synthetic results in tests/unit/test_pipeline_repetitions.py;
this is the loop itself, through the same ASL and Map as on AWS.
"""

from __future__ import annotations

import json

import pytest

from layoutlab.local import dispatch
from layoutlab.local.pipeline import LocalPipeline
from layoutlab.samples import atl03

pytestmark = pytest.mark.slow

PLAN = {
    "name": "rounds",
    "variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "1MiB"}],
    "patterns": {"grid": [], "granule": ["beam-read"]},
    "readers": {"hdf5": ["h5py-s3fs-default", "h5py-s3fs-aligned"]},
    "platforms": ["local-lambda"],
    "repetitions": 1,
    "max_repetitions": 2,
    "max_concurrency": 1,
}


@pytest.fixture(scope="module")
def run(local_cloud, tmp_path_factory):
    work = tmp_path_factory.mktemp("rounds-run")
    granule = atl03.write_atl03(work / "granule.h5", photons=2000, chunk=1000)
    pipeline = LocalPipeline(local_cloud)
    pipeline.setup()
    pipeline.put_plan("rounds", PLAN)
    [outcome] = pipeline.deliver(pipeline.upload(granule, plan="rounds"))
    final = pipeline.wait([outcome], timeout=600)
    try:
        yield pipeline, outcome["dataset_id"], final[outcome["dataset_id"]]
    finally:
        local_cloud.reset()


def test_the_undecided_comparison_gets_a_second_round_of_exactly_its_cases(run):
    pipeline, dataset_id, status = run
    assert status == "SUCCEEDED", pipeline.store.items(dataset=dataset_id, kind="FAILURE")
    results = pipeline.store.items(dataset=dataset_id, kind="RESULT")
    first = [r for r in results if r["repetition"] == 0]
    second = [r for r in results if r["repetition"] == 1]
    assert len(first) == 4 and all(r["checksum_ok"] is not False for r in results)
    pairs = {(r["variant"], r["reader"]) for r in first}
    assert {(r["variant"], r["reader"]) for r in second} == pairs and len(second) == 4
    assert len({r["case_id"] for r in results}) == len(results) == 8
    listed = pipeline.s3.get_object(Bucket=dispatch.OUTPUTS_BUCKET, Key=f"runs/{dataset_id}/cases-round-2.json")
    assert sorted(c["case_id"] for c in json.loads(listed["Body"].read())) == sorted(r["case_id"] for r in second)
    [run_item] = pipeline.store.items(dataset=dataset_id, kind="RUN")
    assert run_item["cases"] == 8 and run_item["rounds"] == 2


def test_the_summary_says_two_rounds_ran_and_the_comparison_stayed_undecided_at_the_cap(run):
    pipeline, dataset_id, _ = run
    [summary] = pipeline.store.items(dataset=dataset_id, kind="SUMMARY")
    rounds = summary["repetition_rounds"]
    assert rounds["rounds"] == 2 and rounds["stopped"] == "max_repetitions"
    [undecided] = rounds["undecided"]  # two repetitions are still too few for an interval
    assert undecided["variant"] == "paged-1MiB" and undecided["pattern"] == "beam-read"
    assert undecided["repetitions"] == [2, 2] and undecided["interval"] is None
    assert "2 rounds of repetitions" in rounds["text"] and "at the cap of 2 repetitions" in rounds["text"]
    assert summary["cases_planned"] == 8
