"""Issue 36: a READY variant that lacks a variable of the upload says so, in its record and in the report."""

from __future__ import annotations

from layoutlab.pipeline.variants import variables_left_out
from layoutlab.report.budget import budget_rows, budget_text


def test_the_variables_a_converter_left_out_are_listed_and_reported():
    detail = {"rechunk": {"units": 3, "skipped": [
        {"variable": "obs", "reason": "a compound type has no Zarr v3 data type"},
        {"variable": "/", "attribute": "history", "reason": "too large"},  # (an attribute: not a variable)
    ]}, "page_size": 4096}
    assert variables_left_out(detail) == ["obs: a compound type has no Zarr v3 data type"]
    assert variables_left_out({"rechunk": {"skipped": []}}) == []
    variants = {"original": {"status": "READY", "variant_kind": "original", "size_bytes": 100},
                "zarr": {"status": "READY", "variant_kind": "rechunk-zarr", "size_bytes": 90,
                         "lacks": variables_left_out(detail)}}
    rows = {row["variant"]: row for row in budget_rows(variants)}
    assert "LACKS 1 variable(s) of the upload: obs: a compound type" in budget_text(rows["zarr"])
    assert "LACKS" not in budget_text(rows["original"])


def test_a_timed_out_step_is_recorded_naming_the_upload_and_what_happened():
    """Issue 36: the FAILURE of a convert task stopped by its timeout said only "Sandbox.Timedout:
    handler:convert: timed out"."""
    from layoutlab.pipeline.outcomes import record_failure
    from layoutlab.pipeline.payloads import FailureInput

    class Store:
        def __init__(self):
            self.failures, self.runs = [], []

        def put_failure(self, dataset_id, stage, detail, reason, **fields):
            self.failures.append(reason)

        def update_run(self, dataset_id, **fields):
            self.runs.append(fields)

    store = Store()
    source = {"bucket": "ingest", "key": "incoming/cycle.nc", "url": "s3://ingest/incoming/cycle.nc"}
    record_failure(FailureInput.from_event({"stage": "convert", "dataset_id": "d1", "source": source,
                                            "error": {"Error": "Sandbox.Timedout",
                                                      "Cause": "handler:convert: timed out"}}), store=store)
    assert store.failures == ["s3://ingest/incoming/cycle.nc: Sandbox.Timedout: handler:convert: timed out "
                              "(the convert step ran past its time limit and was stopped)"]
    # a reason that names the upload already is kept as it is
    record_failure(FailureInput.from_event({"stage": "convert", "dataset_id": "d1", "source": source,
                                            "error": {"Error": "BadInputFile",
                                                      "Cause": "s3://ingest/incoming/cycle.nc: damaged"}}), store=store)
    assert store.failures[-1] == "BadInputFile: s3://ingest/incoming/cycle.nc: damaged"
