"""The two samples' case lists, pinned: patterns generalised to any product must leave them as they were.

``data/sample_case_lists.json`` was written from the code before the structure model existed (the
GEOS-like grid and the ATL03-like granule, small, through ``dataset_facts`` and the demo and default
plans). Published comparisons (Nguyen et al., NSIDC) keep their numbers only if the cases stay the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layoutlab.pipeline import plan as plans
from layoutlab.pipeline.facts import dataset_facts
from layoutlab.samples.atl03 import write_atl03
from layoutlab.samples.geos import write_geos

PINNED = Path(__file__).parent / "data" / "sample_case_lists.json"
# the readers the default plan added after the lists were pinned (issue 34)
USERS_READERS = ("xarray-h5netcdf", "xarray-zarr", "xarray-icechunk", "h5coro")


def _case_keys(plan_name: str, path: Path) -> list[list]:
    plan = plans.merge_plan(None if plan_name == "default" else json.loads(
        (Path(plans.__file__).parent / f"{plan_name}_plan.json").read_text()))
    facts = dataset_facts(str(path))
    specs = [{**s, "uri": f"s3://out/{s['name']}"} for s in plans.variant_specs(plan, facts)]
    cases = plans.expand_cases(plan, facts, "d1", specs)
    return [[c["variant"], c["pattern"], c["reader"], c["platform"], c["repetition"],
             json.dumps(c["params"], sort_keys=True)] for c in cases]


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    root = tmp_path_factory.mktemp("samples")
    return {"geos": write_geos(root / "geos.nc", shape=(24, 19, 36)),
            "atl03": write_atl03(root / "atl03.h5", photons=2000, chunk=500)}


def current_lists(samples) -> dict:
    return {f"{sample}/{plan}": _case_keys(plan, path)
            for sample, path in samples.items() for plan in ("demo", "default")}


def test_the_two_samples_case_lists_are_unchanged(samples):
    pinned = json.loads(PINNED.read_text())
    now = current_lists(samples)
    assert sorted(now) == sorted(pinned)
    for key in pinned:
        # the default plan now reads every layout as its users do too (issue 34: the readers users use most,
        # in every study): xarray on HDF5, Zarr and Icechunk, h5coro where it reads the file; their cases are
        # added; every pinned case stays, in the same order
        assert [c for c in now[key] if c[2] not in USERS_READERS] == pinned[key], key


def test_the_default_plan_reads_every_hdf5_case_with_xarray_too(samples):
    pinned = json.loads(PINNED.read_text())
    now = current_lists(samples)
    for sample in samples:
        key = f"{sample}/default"
        added = {tuple(c[:2] + c[3:]) for c in now[key] if c[2] == "xarray-h5netcdf"}
        hdf5 = {tuple(c[:2] + c[3:]) for c in pinned[key] if c[2] == "h5py-s3fs-aligned"}
        assert added == hdf5 and hdf5, key


def test_the_default_plan_reads_zarr_and_icechunk_with_xarray_too(samples):
    pinned = json.loads(PINNED.read_text())
    now = current_lists(samples)
    for sample, zarr_reader in (("geos", "zarr-obstore"), ("atl03", "icechunk")):
        key = f"{sample}/default"
        for added_reader, existing in (("xarray-zarr", "zarr-obstore"), ("xarray-icechunk", "icechunk")):
            added = {tuple(c[:2] + c[3:]) for c in now[key] if c[2] == added_reader}
            assert added == {tuple(c[:2] + c[3:]) for c in pinned[key] if c[2] == existing}, (key, added_reader)
        assert any(c[2] == zarr_reader for c in pinned[key]), key


def test_h5coro_reads_the_original_where_it_parses_it_and_never_a_paged_copy(samples):
    now = current_lists(samples)
    h5coro = {sample: {c[0] for c in now[f"{sample}/default"] if c[2] == "h5coro"} for sample in samples}
    # the plan step's probe: h5coro parses the granule (never a paged copy: superblock version 3), not the
    # NetCDF-4 grid's root attributes (which the bench's value check reads)
    assert h5coro == {"atl03": {"original"}, "geos": set()}, h5coro
