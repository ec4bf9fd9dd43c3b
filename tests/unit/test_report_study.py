"""A study's line for the docs' product tables, from the dataset's items."""

from __future__ import annotations

from layoutlab.report.study import study_row


def _result(pattern, variant, ok=True, checked=True):
    return {"kind": "RESULT", "pattern": pattern, "variant": variant, "reader": "h5py-s3fs-aligned",
            "platform": "local-lambda", "status": "ok" if ok else "error", "checksum_ok": checked}


def test_the_line_counts_cases_and_checked_values_and_times_the_study_from_its_run_item():
    items = [{"kind": "RUN", "status": "SUCCEEDED", "structure": {"role": "swath"},
              "started": "2026-11-28T00:14:00+00:00", "finished": "2026-11-28T00:29:30+00:00"},
             {"kind": "SUMMARY", "variables": {"box": ["product/vertical_column_troposphere"]},
              "choice": {"box": {"variant": "zarr-lines132"}}, "recommendation": "keep zarr-lines132"},
             _result("box", "original"), _result("box:2", "zarr-lines132"), _result("open-list", "original", checked=None),
             _result("record-slice", "zarr-lines132", ok=False, checked=False),
             {"kind": "FAILURE", "error": "bench case timed out"}]
    row = study_row(items, "TEMPO.nc4")
    assert row["seconds"] == 930.0 and row["role"] == "swath" and row["status"] == "SUCCEEDED"
    assert row["families"] == ["box", "open-list", "record-slice"]
    assert (row["cases"], row["cases_ok"], row["values_checked"], row["values_equal"]) == (4, 3, 3, 2)
    assert row["choice"] == {"box": "zarr-lines132"} and row["failures"] == ["bench case timed out"]


def test_a_study_still_running_has_no_time():
    assert study_row([{"kind": "RUN", "status": "RUNNING", "started": "2026-11-28T00:14:00+00:00"}], "f")["seconds"] is None


def test_the_values_checked_are_the_summarys_comparison_with_the_original_where_there_is_one():
    # a real product has no generated checksum (checksum_ok None); the summary compared 278 cases' values
    items = [{"kind": "RUN", "status": "SUCCEEDED"},
             {"kind": "SUMMARY", "values_check": {"checked": 278, "equal": 277, "sentence": "1 differs"}},
             *[_result("box", "original", checked=None) for _ in range(3)]]
    row = study_row(items, "ATL16.nc4")
    assert (row["values_checked"], row["values_equal"], row["values_check"]) == (278, 277, "1 differs")


def test_a_failure_is_named_by_its_case_and_reason_not_its_error_class():
    items = [{"kind": "RUN", "status": "SUCCEEDED"},
             {"kind": "FAILURE", "error": "States.TaskFailed", "detail": "original#open-list#h5coro#local-lambda#000",
              "reason": "RuntimeError: can't start new thread"}]
    assert study_row(items, "f")["failures"] == ["original#open-list#h5coro#local-lambda#000: RuntimeError: can't "
                                                 "start new thread"]
