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
