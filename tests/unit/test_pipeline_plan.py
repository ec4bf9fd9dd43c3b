"""Plans: validation with clear errors, variant names, and the case grid they expand to."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from layoutlab.pipeline import plan as plans
from layoutlab.pipeline.plan import DatasetFacts, PlanError

GRID = DatasetFacts(kind="grid", grid_shape=(240, 181, 288))
GRANULE = DatasetFacts(kind="granule")


def produced(specs):
    return [{**s, "uri": f"s3://out/{s['name']}"} for s in specs]


def test_default_plan_gives_a_grid_dataset_paged_zarr_sharded_and_virtual_variants():
    plan = plans.merge_plan(None)
    specs = plans.variant_specs(plan, GRID)
    names = [s["name"] for s in specs]
    # the page size of the paged copies is chosen from the file, within NSIDC's 5 % size budget
    assert names[:3] == ["original", "paged-auto", "rechunked-paged-auto"]
    zarr = [n for n in names if n.startswith("zarr-") and "sharded" not in n]
    assert zarr[0] == "zarr-240x10x10" and zarr[1] == "zarr-1x181x288" and len(zarr) == 3
    # map-shaped inner chunks, the whole time axis in one shard: a point time series is one
    # shard's run of neighbouring inner chunks, which zarr's coalescing reads in few requests
    sharded = next(s for s in specs if s["name"] == "zarr-sharded-1x181x288")
    assert sharded["shards"] == {"time": 240, "lat": 181, "lon": 288}
    # the 2026 options that copy no data: kerchunk over the original and each paged copy, Icechunk virtual
    assert {"kerchunk-original", "kerchunk-paged-auto", "kerchunk-rechunked-paged-auto", "icechunk-virtual"} <= set(names)
    # read as users read them too (issue 34): xarray's open_zarr beside zarr's own readers
    assert plan["readers"]["zarr"] == ["zarr-obstore", "zarr-obstore-nocoalesce", "xarray-zarr"]


def test_granules_get_no_zarr_variants_and_only_granule_patterns():
    plan = plans.merge_plan(None)
    specs = plans.variant_specs(plan, GRANULE)
    assert {s["format"] for s in specs} == {"hdf5", "kerchunk", "icechunk"}
    cases = plans.expand_cases(plan, GRANULE, "g1", produced(specs))
    assert {c["pattern"] for c in cases} == {"granule-open-list", "beam-read", "beam-subset"}


def test_case_grid_is_the_full_product_with_readers_matched_to_formats():
    plan = plans.merge_plan({"repetitions": 2})
    specs = plans.variant_specs(plan, GRID)
    cases = plans.expand_cases(plan, GRID, "d1", produced(specs))
    per_variant_patterns = len(plan["patterns"]["grid"]) * len(plan["platforms"]) * 2
    # every reader of each format, less those the plan leaves off a variant (h5coro on a paged copy)
    assert len(cases) == per_variant_patterns * sum(
        len(plan["readers"][s["format"]]) - len(plans.readers_not_planned(GRID, s)) for s in specs)
    assert all(c["reader"] in plans.READERS_BY_FORMAT[c["format"]] for c in cases)
    # repetitions are the outer loop: the first half of the list is repetition 0
    assert {c["repetition"] for c in cases[: len(cases) // 2]} == {0}
    keys = {(c["variant"], c["pattern"], c["reader"], c["platform"], c["repetition"]) for c in cases}
    assert len(keys) == len(cases)


@pytest.mark.parametrize(
    "override, message",
    [
        ({"variants": [{"kind": "magic"}]}, "variants[0].kind: 'magic' is not one of ['original', "),
        ({"variants": [{"kind": "repack-paged", "page_size": "3MiB"}]}, "power of two"),
        ({"patterns": ["timeseries-point", "bogus"]}, "patterns[1]: 'bogus' is not a pattern: one of timeseries-point"),
        ({"readers": {"hdf5": ["h5py-magic"]}}, "readers.hdf5[0]: 'h5py-magic' is not one of ['h5py-s3fs-default'"),
        ({"platforms": ["lambda-99999"]}, "128..10240"),
        ({"platforms": ["ec2"]}, "platforms[0]: 'ec2' is not a platform: local-lambda, local-fargate"),
        ({"repetitions": 0}, "repetitions: 0 is less than the minimum of 1"),
        ({"variants": [{"kind": "rechunk-zarr", "chunks": "diagonal"}]}, "variants[0].chunks: 'diagonal' is not chunks: "),
        ({"variants": [{"kind": "rechunk-zarr", "chunks": "map", "max_mem": "lots"}]}, "variants[0].max_mem"),
    ],
)
def test_bad_plans_are_refused_naming_the_field(override, message):
    with pytest.raises(PlanError, match=re.escape(message)):
        plans.merge_plan({"name": "mine", **override})


def test_explicit_chunks_by_dimension_and_sharding_name_the_variant():
    plan = plans.merge_plan({"variants": [
        {"kind": "rechunk-zarr", "chunks": {"time": 120, "lat": 50, "lon": 100}},
        {"kind": "rechunk-zarr", "chunks": [24, 181, 288], "shards": {"time": 48}},
    ]})
    assert [s["name"] for s in plans.variant_specs(plan, GRID)] == ["zarr-120x50x100", "zarr-sharded-24x181x288"]


def test_a_variant_bound_caps_the_rechunk_memory_the_platform_leaves():
    from layoutlab.kinds.rechunk_zarr import rechunk_options

    spec = {"chunks": {"time": 24}, "max_mem": "32KiB"}
    assert rechunk_options(spec)["max_mem"] == 32 * 2**10
    assert rechunk_options(spec, max_mem=16 * 2**10)["max_mem"] == 16 * 2**10
    assert rechunk_options({"chunks": {"time": 24}}, max_mem=2**20)["max_mem"] == 2**20
    assert "max_mem" not in rechunk_options({"chunks": {"time": 24}})


def test_sizes_parse_and_print():
    assert plans.parse_size("8MiB") == 8 * 2**20
    assert plans.parse_size("4 KiB") == 4096
    assert plans.size_label(8 * 2**20) == "8MiB"
    with pytest.raises(ValueError):
        plans.parse_size("eight megs")


@given(
    t=st.integers(1, 6000), y=st.integers(1, 800), x=st.integers(1, 1200),
    target=st.integers(4096, 64 * 2**20),
)
def test_balanced_chunks_fit_the_array_and_the_target(t, y, x, target):
    ct, cy, cx = plans.chunk_preset("balanced", (t, y, x), 4, target)
    assert 1 <= ct <= t and 1 <= cy <= y and 1 <= cx <= x
    assert ct * cy * cx * 4 <= max(target, 4) * 2  # never far above the target


def test_balanced_chunks_balance_series_and_maps_on_the_paper_grid():
    ct, cy, cx = plans.chunk_preset("balanced", (5136, 721, 1152), 4, 4 * 2**20)
    series_chunks = 5136 / ct
    map_chunks = (721 / cy) * (1152 / cx)
    assert 0.5 < series_chunks / map_chunks < 2


def test_a_scaling_study_expands_to_n_adjacent_workers_per_count_and_mode():
    plan = plans.merge_plan({"variants": [{"kind": "repack-paged", "page_size": "8MiB"}], "patterns": {"grid": []},
                             "platforms": ["local-lambda"], "repetitions": 1,
                             "scaling": {"workers": [1, 2, 4], "modes": ["strong", "weak"], "rows_per_worker": 12}})
    specs = plans.variant_specs(plan, GRID)
    cases = plans.expand_cases(plan, GRID, "d1", produced(specs))
    assert len(cases) == (1 + 2 + 4) * 2
    assert {c["pattern"] for c in cases} == {"slab-read"}
    assert len({c["case_id"] for c in cases}) == len(cases)
    four = [c["params"] for c in cases if c["params"]["workers"] == 4 and c["params"]["scaling"] == "weak"]
    assert [p["worker"] for p in four] == [0, 1, 2, 3] and all(p["rows_per_worker"] == 12 for p in four)


def test_bad_scaling_specs_are_refused():
    with pytest.raises(PlanError, match="scaling.workers: \\[\\] should be non-empty"):
        plans.merge_plan({"scaling": {"workers": []}})
    with pytest.raises(PlanError, match=r"scaling.modes\[0\]: 'sideways' is not one of \['strong', 'weak'\]"):
        plans.merge_plan({"scaling": {"workers": [2], "modes": ["sideways"]}})
