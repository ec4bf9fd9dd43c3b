"""Readers users use, where they can read the file (issue 34): h5coro is planned on an upload only where its own
parse of the cases' datasets succeeds in the plan step, never on a paged copy (superblock version 3); each reader
left out is listed with h5coro's reason, never run as a failed case."""

from __future__ import annotations

import h5py
import numpy as np

from layoutlab.pipeline import plan as plans
from layoutlab.pipeline.facts import dataset_facts
from layoutlab.samples.atl03 import write_atl03


def _granule(path, libver):
    with h5py.File(path, "w", libver=libver) as f:
        for beam in ("gt1l", "gt2l"):
            heights = f.create_group(f"{beam}/heights")
            heights["h_ph"] = np.arange(500, dtype="f4")
            heights["lat_ph"] = np.linspace(-10, 10, 500)
    return path


def _cases(path):
    plan = plans.merge_plan(None)
    facts = dataset_facts(str(path), plan)
    specs = [{**s, "uri": f"s3://out/{s['name']}"} for s in plans.variant_specs(plan, facts)]
    return facts, plans.expand_cases(plan, facts, "d1", specs), plans.not_planned_list(plan, facts, specs)


def test_h5coro_is_not_planned_on_a_file_it_cannot_parse_and_the_run_lists_why(tmp_path):
    # libver="latest" writes superblock version 3, which h5coro does not read
    facts, cases, not_planned = _cases(_granule(tmp_path / "latest.h5", "latest"))
    [(reader, why)] = facts.reader_refusals
    assert reader == "h5coro" and "superblock version: 3" in why, why
    assert not [c for c in cases if c["reader"] == "h5coro"]
    assert {"variant": "original", "reader": "h5coro", "why": why} in not_planned
    assert any(c["reader"] == "h5py-s3fs-default" and c["variant"] == "original" for c in cases)


def test_h5coro_is_planned_on_a_file_it_reads_and_never_on_a_paged_copy(tmp_path):
    facts, cases, not_planned = _cases(write_atl03(tmp_path / "atl03.h5", photons=2000, chunk=500))
    assert facts.reader_refusals == ()
    assert {c["variant"] for c in cases if c["reader"] == "h5coro"} == {"original"}
    paged = {e["variant"] for e in not_planned if e["reader"] == "h5coro"}
    assert paged and all(v.startswith(("paged", "rechunked-paged")) for v in paged), paged
    assert all("superblock version 3" in e["why"] for e in not_planned)


def test_no_probe_when_the_plan_reads_no_hdf5_with_h5coro(tmp_path):
    plan = plans.merge_plan({"readers": {"hdf5": ["h5py-s3fs-default"]}})
    facts = dataset_facts(str(_granule(tmp_path / "latest.h5", "latest")), plan)
    assert facts.reader_refusals == ()
