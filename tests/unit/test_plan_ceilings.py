"""Plans against their schema and the environment's cost ceilings (issue 23 rows 4, 5, 11, 12).

Any JSON value as a plan is refused naming the field, or runs; what a plan can cost (cases,
variants, repetitions, workers, chunk objects, page size against the input) is bounded before
anything runs; a conversion counts the objects and bytes the declared shapes make.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layoutlab.ceilings import Ceilings
from layoutlab.convert import rechunk_plan as planner
from layoutlab.errors import UserError
from layoutlab import kinds
from layoutlab.pipeline import plan as plans
from layoutlab.pipeline.ingest import unreadable_key_reason
from layoutlab.pipeline.plan import DatasetFacts, PlanError
from layoutlab.settings import Settings
from layoutlab.storage import S3Location, versioned_url

GRID = DatasetFacts(kind="grid", grid_shape=(240, 181, 288))
GRANULE = DatasetFacts(kind="granule", beams=("gt1l",))

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
PLAN_KEYS = list(plans.plan_schema()["properties"])
VARIANT_KEYS = list(plans.plan_schema()["$defs"]["variant"]["properties"])


def test_the_schema_is_a_valid_draft_2020_12_schema_and_the_default_plans_follow_it():
    jsonschema.Draft202012Validator.check_schema(plans.plan_schema())
    from importlib import resources

    for name in ("default_plan.json", "demo_plan.json"):
        plan = json.loads(resources.files("layoutlab.pipeline").joinpath(name).read_text())
        assert plans.schema_problems(plan) == [], name
        plans.validate_plan(plan, input_bytes=10**6)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES)
def test_any_json_value_as_a_plan_is_refused_naming_the_field_or_runs(value):
    try:
        plans.merge_plan(value)
    except PlanError as error:
        assert "\n" not in str(error)


@settings(max_examples=300, deadline=None)
@given(fields=st.dictionaries(st.sampled_from(PLAN_KEYS), JSON_VALUES, max_size=4))
def test_any_json_value_in_any_field_is_refused_naming_the_field_or_runs(fields):
    try:
        plans.merge_plan(fields)
    except PlanError as error:
        message = str(error)
        assert "\n" not in message and message.startswith("plan ")


@settings(max_examples=300, deadline=None)
@given(variant=st.fixed_dictionaries({"kind": st.sampled_from(plans.VARIANT_KINDS)},
                                     optional={k: JSON_VALUES for k in VARIANT_KEYS if k != "kind"}))
def test_any_option_of_any_variant_kind_is_refused_naming_the_variant_or_resolves(variant):
    """Whatever the options, a plan that validates resolves to named variants on a grid and a granule
    (before the fix, {"time": -5} made 'zarr--5x10x12' and {"time": "abc"} failed in the plan step)."""
    try:
        plan = plans.merge_plan({"variants": [variant]})
    except PlanError as error:
        assert "variants[0]" in str(error) or "variants:" in str(error) or "plan 'default'" in str(error)
        return
    for facts in (GRID, GRANULE):
        for spec in plans.variant_specs(plan, facts):
            assert "--" not in spec["name"] and spec["name"]
            if kinds.get(spec["kind"]).needs_grid:
                assert all(isinstance(c, int) and c >= 1 for c in spec["chunks"].values())


@pytest.mark.parametrize("plan, field", [
    (None, None), ([1, 2], "got an array"), ("plan", "got a string"), (7, "got a number"),
    ({"variants": ["original"]}, "variants[0]: 'original' is not of type 'object'"),
    ({"variants": [{"kind": "rechunk-zarr", "chunks": {"time": "abc"}}]}, "variants[0].chunks.time: 'abc'"),
    ({"variants": [{"kind": "rechunk-zarr", "chunks": {"time": -5}}]}, "variants[0].chunks.time: -5 is less than"),
    ({"variants": [{"kind": "rechunk-zarr", "chunks": {"time": True}}]}, "variants[0].chunks.time: True"),
    ({"repetitons": 3}, "repetitons: unknown field"),
])
def test_hostile_plans_name_the_field(plan, field):
    if plan is None:  # no plan named: the default one
        assert plans.merge_plan(None)["name"] == "default"
        return
    with pytest.raises(PlanError) as caught:
        plans.merge_plan(plan)
    assert field in str(caught.value)


@pytest.mark.parametrize("override, field, ceiling", [
    ({"scaling": {"workers": [1000] * 5}}, "scaling.workers: a study of 1,000", "max_scaling_workers = 256"),
    ({"repetitions": 100, "max_repetitions": 100}, "repetitions: asks for 100", "max_repetitions = 20"),
    # (7 x 232 grid cases: the default plan's h5coro, xarray-zarr and xarray-icechunk add 4 patterns x 2 platforms x
    # 8 variant readers; the estimate is a bound: it counts h5coro on the paged copies the plan leaves it off)
    ({"scaling": {"workers": [200] * 5}}, "cases: up to 155,624", "max_cases = 20,000"),
    ({"variants": [{"kind": "rechunk-zarr", "chunks": [1, 1, 1]}]}, "variants[0].chunks: a chunk of 1",
     "minimum min_chunk_elements = 16"),
    ({"variants": [{"kind": "rechunk-zarr", "chunks": [i + 1, 10, 10]} for i in range(17)]},
     "variants: a count of 17", "max_variants = 16"),
    ({"variants": [{"kind": "repack-paged", "page_size": "1GiB"}]}, "variants[0].page_size: 1GiB = 1,073,741,824",
     "max_page_size_input_ratio x the input = 8,388,608 (cdk.json ceilings, LAYOUTLAB_CEILINGS; a 28,925-byte "
     "input, ratio 1, and 8MiB always)"),
])
def test_a_plan_over_a_ceiling_names_the_field_the_estimate_and_the_ceiling(override, field, ceiling):
    ceilings = Ceilings(max_repetitions=20)
    with pytest.raises(PlanError) as caught:
        plans.merge_plan({"name": "big", **override}, ceilings=ceilings, input_bytes=28_925)
    message = str(caught.value)
    assert message.startswith(f"plan 'big': {field}") and ceiling in message, message


def test_ceilings_are_the_environments():
    """The same plan passes where the environment allows it: the ceilings are settings, not constants."""
    plan = {"scaling": {"workers": [200] * 5}}
    with pytest.raises(PlanError, match="max_cases"):
        plans.merge_plan(plan)
    assert plans.merge_plan(plan, ceilings=Ceilings(max_cases=210_000))["scaling"]["workers"] == [200] * 5
    paged = {"variants": [{"kind": "repack-paged", "page_size": "16MiB"}]}
    with pytest.raises(PlanError, match="page_size"):
        plans.merge_plan(paged, input_bytes=2**20)
    plans.merge_plan(paged, input_bytes=2**24)
    plans.merge_plan(paged, input_bytes=2**20, ceilings=Ceilings(max_page_size_input_ratio=16))


@settings(max_examples=100, deadline=None)
@given(
    variants=st.lists(st.sampled_from([
        {"kind": "original"}, {"kind": "repack-paged", "page_size": "1MiB"},
        {"kind": "rechunked-paged", "page_size": "2MiB"}, {"kind": "virtual-kerchunk"},
        {"kind": "virtual-kerchunk", "over": "paged"}, {"kind": "icechunk-virtual"},
        {"kind": "rechunk-zarr", "chunks": "map"}, {"kind": "icechunk", "chunks": "timeseries"},
        {"kind": "rechunk-zarr", "chunks": "balanced", "applies_to": "granule"},
    ]), min_size=1, max_size=6, unique_by=lambda v: json.dumps(v, sort_keys=True)),
    platforms=st.lists(st.sampled_from(["local-lambda", "local-fargate", "lambda-1769"]), min_size=1, max_size=3,
                       unique=True),
    repetitions=st.integers(1, 3), workers=st.lists(st.integers(1, 5), max_size=3),
)
def test_the_case_bound_is_never_below_the_cases_a_plan_expands_to(variants, platforms, repetitions, workers):
    override = {"variants": variants, "platforms": platforms, "repetitions": repetitions}
    if workers:
        override["scaling"] = {"workers": workers, "modes": ["strong", "weak"]}
    try:
        plan = plans.merge_plan(override)
    except PlanError as error:  # two entries resolving to one name
        assert "resolve to the same name" in str(error) or "variants" in str(error)
        return
    bound, _ = plans.case_bound(plan)
    for facts in (GRID, GRANULE):
        try:
            specs = plans.variant_specs(plan, facts)
        except PlanError:
            continue
        produced = [{**s, "uri": f"s3://o/{s['name']}"} for s in specs]
        assert len(plans.expand_cases(plan, facts, "d", produced)) <= bound


def test_the_plan_step_refuses_chunks_that_make_too_many_objects_from_the_grid():
    ceilings = Ceilings(max_objects_per_variant=1000)
    plan = plans.merge_plan({"variants": [{"kind": "rechunk-zarr", "chunks": "timeseries"}]})
    specs = plans.variant_specs(plan, GRID)  # 240 x 10 x 10 chunks of a 240 x 181 x 288 grid: 19 x 29
    plans.check_dataset_ceilings(plan, specs, GRID, ceilings)  # 551 objects
    with pytest.raises(PlanError) as caught:
        plans.check_dataset_ceilings(plan, specs, GRID, Ceilings(max_objects_per_variant=500))
    assert "variant zarr-240x10x10: chunks: the 240x181x288 grid in chunks of 240x10x10: 551 is over" in str(caught.value)
    # a chunk dimension the plan leaves out is the whole axis: only the grid tells how small a chunk is
    tiny = plans.merge_plan({"variants": [{"kind": "rechunk-zarr", "chunks": {"time": 1, "lat": 2}}]})
    tiny_specs = plans.variant_specs(tiny, DatasetFacts(kind="grid", grid_shape=(10, 10, 3)))
    with pytest.raises(PlanError, match="a chunk of 6 is under this environment's minimum min_chunk_elements = 16"):
        plans.check_dataset_ceilings(tiny, tiny_specs, DatasetFacts(kind="grid", grid_shape=(10, 10, 3)), Ceilings())
    # an array smaller than the minimum is one chunk, and that is fine
    small = DatasetFacts(kind="grid", grid_shape=(2, 3, 4))
    plans.check_dataset_ceilings(plan, plans.variant_specs(plan, small), small, Ceilings())


# --- declared shapes: objects and bytes before a conversion writes ------------------------------------------

@settings(max_examples=200, deadline=None)
@given(shape=st.lists(st.integers(0, 40), min_size=1, max_size=3), data=st.data())
def test_the_object_count_is_the_write_blocks_tiling_the_array_plus_metadata(shape, data):
    chunks = tuple(data.draw(st.integers(1, 50)) for _ in shape)
    spec = planner.ArraySpec(name="v", shape=tuple(shape), itemsize=4, source_chunks=chunks, target_chunks=chunks)
    expected = 1 if 0 in shape else 1 + len(planner.tile(tuple(shape), chunks))
    assert planner.output_objects(spec) == expected


def test_a_tally_refuses_the_array_that_crosses_a_bound_naming_it():
    huge = planner.ArraySpec(name="T", shape=(10**5, 10**3, 10**4), itemsize=4, source_chunks=(100, 100, 100),
                             target_chunks=(1, 1000, 10000))
    tally = planner.output_tally(Ceilings(), input_bytes=24_000)
    with pytest.raises(planner.OutputTooLarge) as caught:
        tally.add(huge)
    assert str(caught.value) == (
        "T (100000x1000x10000 of 4-byte items) brings the copy to 4,000,000,000,000 bytes uncompressed from the "
        "shapes the file declares, over this environment's bound of 1,073,741,824 bytes (ceiling max_expansion = "
        "1000 x the 24,000-byte input, at least 1,073,741,824; LAYOUTLAB_CEILINGS)")
    objects = planner.output_tally(Ceilings(max_objects_per_variant=99_999), input_bytes=None)
    with pytest.raises(planner.OutputTooLarge, match="100,001 objects .* max_objects_per_variant = 99,999"):
        objects.add(huge)
    # the bound grows with the input (up to max_variant_bytes): a big file may declare more
    assert Ceilings().max_declared_bytes(10 * 2**30) == 2**40
    assert Ceilings().max_declared_bytes(None) == 2**40


# --- the settings route, keys and versions ------------------------------------------------------------------

def test_settings_read_the_ceilings_once_and_give_them_back():
    env = {"LAYOUTLAB_RESULTS_TABLE": "r", "LAYOUTLAB_OUTPUTS_BUCKET": "o", "LAYOUTLAB_INGEST_BUCKET": "i",
           "LAYOUTLAB_CEILINGS": json.dumps({"max_cases": 10, "max_expansion": 2.5})}
    settings_ = Settings.from_env(environ=env)
    assert settings_.ceilings == Ceilings(max_cases=10, max_expansion=2.5)
    assert Settings.from_env(environ=settings_.as_environment()).ceilings == settings_.ceilings
    with pytest.raises(UserError, match="LAYOUTLAB_CEILINGS: unknown ceiling"):
        Settings.from_env(environ={**env, "LAYOUTLAB_CEILINGS": '{"max_cakes": 1}'})
    with pytest.raises(UserError, match="LAYOUTLAB_CEILINGS: not JSON"):
        Settings.from_env(environ={**env, "LAYOUTLAB_CEILINGS": "{"})


KEYS = ["incoming/a?versionId=b.nc", "incoming/x?versionId=1?versionId=2", "k", "incoming/a b+c%2e.nc",
        "incoming/?versionId="]
VERSIONS = [None, "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY+MTRCxf3vjVBH40Nr8X8gdRQBpUMLUo", "v/1"]


# Without a version, a key's own '?versionId=<text>' cannot be told from a version (ingest refuses such keys).
@pytest.mark.parametrize("key, version", [(k, v) for k in KEYS for v in VERSIONS
                                          if v is not None or "?versionId=" not in k or k.endswith("=")])
def test_a_versioned_url_parses_back_to_its_key_and_version(key, version):
    """The version query is the one versioned_url appends, the last (before the fix, the first: a key
    holding '?versionId=' lost its end and read as another object)."""
    location = S3Location.parse(versioned_url("bucket", key, version))
    assert (location.bucket, location.key, location.version_id) == ("bucket", key, version)


@pytest.mark.parametrize("key, refused", [
    ("incoming/../escape.nc", "'..' segment"), ("incoming/./x.nc", "'.' segment"), ("incoming/a/../../b", "'..'"),
    ("incoming/a?versionId=b.nc", "'?versionId='"), ("incoming/..nc", None), ("incoming/a..b/c.nc", None),
    ("incoming/%2e%2e/x.nc", None), ("incoming/a b.nc", None),
])
def test_keys_the_readers_cannot_address_are_named(key, refused):
    reason = unreadable_key_reason(key)
    assert (reason is None) if refused is None else (refused in reason)


def test_the_default_page_size_is_allowed_for_any_input_and_larger_pages_follow_the_input():
    """8 MiB (repack-paged's default) whatever the size: the plans of the test suite page 80 KB samples at 1 MiB."""
    assert Ceilings().max_page_size(100) == 8 * 2**20
    assert Ceilings(max_page_size_input_ratio=0.5).max_page_size(2**30) == 2**29
    plans.merge_plan({"variants": [{"kind": "repack-paged"}]}, input_bytes=27_294)  # 8MiB by default


# --- what one case reads, from the declared shapes -----------------------------------------------------------

def _cases(plan, facts):
    specs = plans.variant_specs(plan, facts)
    produced = [{**s, "uri": f"s3://o/{s['name']}"} for s in specs]
    return plans.expand_cases(plan, facts, "d", produced)


def test_the_plan_step_refuses_a_case_that_would_read_more_than_the_ceiling_from_the_declared_grid():
    """A few kilobytes declaring a (10^5, 10^3, 10^4) float grid: its full read is 4 TB per case; before,
    only the case timeout x max_cases bounded it. The pattern, the estimate and the ceiling are named."""
    from layoutlab.pipeline.case_reads import check_case_reads, declared_read_bytes

    plan = plans.merge_plan({"name": "big", "variants": [{"kind": "original"}],
                             "patterns": ["timeseries-point", "full-read-throughput"]})
    huge = DatasetFacts(kind="grid", grid_shape=(100_000, 1_000, 10_000), variable="T")
    with pytest.raises(PlanError) as caught:
        check_case_reads(plan, _cases(plan, huge), huge, Ceilings())
    assert str(caught.value) == (
        "plan 'big': patterns: full-read-throughput: a case reads all of the declared 100000x1000x10000 grid of "
        "4-byte items: 4,000,000,000,000 is over this environment's ceiling max_case_read_bytes = 17,179,869,184 "
        "(cdk.json ceilings, LAYOUTLAB_CEILINGS)")
    # the same plan on the paper's grid, and a time series of the huge grid, are well under it
    check_case_reads(plan, _cases(plan, GRID), GRID, Ceilings())
    series = plans.merge_plan({"variants": [{"kind": "original"}], "patterns": ["timeseries-point"]})
    check_case_reads(series, _cases(series, huge), huge, Ceilings())
    assert declared_read_bytes("timeseries-point", {"variable": "T"}, huge) == (
        400_000, "one time series of the declared 100000x1000x10000 grid of 4-byte items")
    # the ceiling is the environment's
    check_case_reads(plan, _cases(plan, huge), huge, Ceilings(max_case_read_bytes=4 * 10**12))


def test_case_read_estimates_follow_what_the_patterns_select():
    from layoutlab.pipeline.case_reads import declared_read_bytes

    grid = DatasetFacts(kind="grid", grid_shape=(240, 181, 288), itemsize=4, variable="V")
    t, y, x = 240, 181, 288
    assert declared_read_bytes("map-timestep", {"variable": "V"}, grid)[0] == y * x * 4
    assert declared_read_bytes("map-time-mean", {"variable": "V", "hours": 6}, grid)[0] == 6 * y * x * 4
    assert declared_read_bytes("slab-read", {"workers": 4, "worker": 3}, grid)[0] == 60 * y * x * 4
    assert declared_read_bytes("slab-read", {"workers": 2, "scaling": "weak", "rows_per_worker": 7}, grid)[0] == 7 * y * x * 4
    assert declared_read_bytes("timeseries-region-mean", {"variable": "V"}, grid) is None  # (a box of coordinates)
    assert declared_read_bytes("full-read-throughput", {"variable": "other"}, grid) is None  # (not the grid)
    granule = DatasetFacts(kind="granule", beams=("gt1l",), beam_elements=10**12, beam_bytes=4 * 10**12,
                           beam_lat_bytes=8 * 10**12)
    assert declared_read_bytes("beam-read", {"beam": "gt1l"}, granule)[0] == 4 * 10**12
    assert declared_read_bytes("beam-subset", {"beam": "gt1l"}, granule)[0] == 12 * 10**12
    assert declared_read_bytes("granule-open-list", {}, granule)[0] == 0
