"""A bench case that fails in a Fargate task keeps its own reason on its FAILURE item: Step Functions hears only
the container's exit ("essential container exited with code 1"; the GPM DPR study's three Fargate failures of
one case said nothing else, where the same case on Lambda said why)."""

from __future__ import annotations

import json

from layoutlab.handlers import task
from layoutlab.pipeline.outcomes import record_failure
from layoutlab.pipeline.payloads import FailureInput

CASE = {"case_id": "icechunk-virtual#open-list#xarray-icechunk#local-fargate#000", "dataset_id": "d1",
        "dataset": "d1", "variant": "icechunk-virtual", "format": "icechunk", "target": "s3://out/v.icechunk",
        "pattern": "open-list", "reader": "xarray-icechunk", "platform": "local-fargate", "platform_kind": "fargate",
        "repetition": 0, "params": {}}
EXITED = {"Error": "States.TaskFailed", "Cause": "essential container exited with code 1"}


def test_the_tasks_own_reason_is_kept_beside_the_containers_exit(store, monkeypatch):
    monkeypatch.setattr("layoutlab.handlers._runtime.results_store", lambda: store)
    said = "s3://out/v.icechunk: not readable as Zarr v3 through xarray (ValueError: group '/NS' is not aligned)"
    task._record_case_failure(json.dumps(CASE), ValueError(said))
    result = record_failure(FailureInput(stage="bench", dataset_id="d1", error=EXITED, case=CASE), store=store)
    [failure] = store.items(dataset="d1", kind="FAILURE")
    assert failure["reason"] == result["reason"]
    assert failure["reason"].startswith(f"ValueError: {said}")
    assert failure["reason"].endswith("(the Fargate task exited: States.TaskFailed: essential container exited "
                                      "with code 1)")


def test_without_the_tasks_record_the_platforms_words_stay(store):
    result = record_failure(FailureInput(stage="bench", dataset_id="d1", error=EXITED, case=CASE), store=store)
    assert result["reason"] == "States.TaskFailed: essential container exited with code 1"
