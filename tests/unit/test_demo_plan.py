"""The demo's plan: the built-in one, and --repetitions over it."""

from __future__ import annotations

import json

import pytest

from layoutlab.commands.demo import load_plan
from layoutlab.errors import UserError


def test_the_built_in_demo_plan_has_a_sharded_zarr_a_virtual_and_an_icechunk_variant():
    plan = load_plan(None, None)
    kinds = [(v["kind"], bool(v.get("shards"))) for v in plan["variants"]]
    assert ("rechunk-zarr", True) in kinds and ("virtual-kerchunk", False) in kinds
    assert ("icechunk-virtual", False) in kinds
    assert plan["readers"]["hdf5"] == ["h5py-s3fs-default", "h5py-s3fs-aligned"]


@pytest.mark.parametrize("repetitions", [1, 5, 12])
def test_repetitions_sets_the_first_round_and_never_falls_above_the_plans_cap(tmp_path, repetitions):
    """--repetitions 12 over a plan capped at 9 rounds of repetitions raises the cap (not an error)."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({**load_plan(None, None), "repetitions": 3, "max_repetitions": 9}))
    plan = load_plan(str(path), repetitions)
    assert plan["repetitions"] == repetitions
    assert plan["max_repetitions"] == max(9, repetitions)


def test_a_plan_that_is_not_json_is_one_clear_error(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("{nope")
    with pytest.raises(UserError, match="plan.json: not valid JSON"):
        load_plan(str(path), None)
