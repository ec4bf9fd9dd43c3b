"""The rechunk planner: memory bound, exact tiling, chunk/shard alignment (property tests)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layoutlab.convert.rechunk_plan import (
    ArraySpec,
    PlanError,
    auto_chunks,
    minimum_memory,
    plan_array,
    seed_grid,
    tile,
    unit_memory,
)

MiB = 2**20


@st.composite
def rechunk_cases(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 40)) for _ in range(ndim))
    source = tuple(draw(st.integers(1, n)) for n in shape)
    target = tuple(draw(st.integers(1, n)) for n in shape)
    sharded = draw(st.booleans())
    shards = tuple(min(n, c * draw(st.integers(1, 4))) for c, n in zip(target, shape)) if sharded else None
    # Fix up shards so they stay whole multiples of chunks (or the whole extent).
    if shards is not None:
        shards = tuple(s if s == n or s % c == 0 else n for s, c, n in zip(shards, target, shape))
    itemsize = draw(st.sampled_from([1, 2, 4, 8]))
    spec = ArraySpec("v", shape, itemsize, source, target, shards)
    floor = minimum_memory(spec)
    max_mem = draw(st.integers(floor, max(floor, math.prod(shape) * itemsize * 3)))
    concurrency = draw(st.sampled_from([1, 4, 16]))
    return spec, max_mem, concurrency


def _aligned(start, stop, block, shape):
    return all(a % b == 0 and (c % b == 0 or c == n) for a, c, b, n in zip(start, stop, block, shape))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rechunk_cases())
def test_every_plan_keeps_the_memory_bound_tiles_exactly_once_and_aligns_to_what_it_writes(case):
    spec, max_mem, concurrency = case
    plan = plan_array(spec, max_mem, concurrency)
    assert 1 <= len(plan.stages) <= 2
    for stage in plan.stages:
        # The bound holds for the unit shape the stage uses, with its concurrency.
        recomputed = unit_memory(
            stage.unit_shape, stage.read_block, stage.write_block, spec.itemsize,
            stage.read_concurrency, stage.write_concurrency, spec.shape,
        )
        assert recomputed == stage.unit_memory <= max_mem
        # Every element is covered by exactly one unit of the stage.
        cover = np.zeros(spec.shape, dtype=np.int32)
        units = [u for u in plan.units if u["stage"] == stage.index]
        for unit in units:
            region = tuple(slice(a, b) for a, b in zip(unit["start"], unit["stop"]))
            assert all(b - a <= u for a, b, u in zip(unit["start"], unit["stop"], stage.unit_shape))
            cover[region] += 1
            # No two units write into the same chunk or shard.
            assert _aligned(unit["start"], unit["stop"], stage.write_block, spec.shape)
            if stage.writes == "target":
                assert _aligned(unit["start"], unit["stop"], spec.target_chunks, spec.shape)
                if spec.target_shards:
                    assert _aligned(unit["start"], unit["stop"], spec.target_shards, spec.shape)
        assert (cover == 1).all()
    assert plan.stages[-1].writes == "target"
    if len(plan.stages) == 2:
        assert plan.stages[0].write_block == plan.intermediate_chunks == plan.stages[1].read_block


def test_worst_case_of_the_paper_goes_through_an_intermediate_and_decodes_each_chunk_about_once():
    # Source as distributed (1 x lat x lon), target full-time x 10 x 10, GEOS-FP's full shape, 512 MiB.
    spec = ArraySpec("BCEXTTAU", (5136, 721, 1152), 4, (1, 721, 1152), (5136, 10, 10))
    direct_only = plan_array(ArraySpec("x", spec.shape, 4, spec.source_chunks, spec.target_chunks), 512 * MiB, 1)
    plan = direct_only
    assert len(plan.stages) == 2
    assert plan.peak_unit_memory <= 512 * MiB
    assert all(stage.read_amplification <= 2.0 for stage in plan.stages)
    # A direct copy under the same bound would decode every source chunk tens of times.
    from layoutlab.convert.rechunk_plan import _stage

    direct = _stage(0, "source", "target", spec.shape, spec.source_chunks, spec.target_chunks, 4, 512 * MiB, 1)
    assert direct.read_amplification > 10


def test_a_bound_below_one_chunk_plus_one_source_chunk_is_refused_with_the_minimum():
    spec = ArraySpec("v", (100, 100), 8, (100, 100), (10, 10))
    with pytest.raises(PlanError, match=str(minimum_memory(spec))):
        plan_array(spec, minimum_memory(spec) - 1)


def test_shards_must_be_whole_multiples_of_chunks():
    with pytest.raises(PlanError, match="whole multiples"):
        ArraySpec("v", (100, 100), 4, (10, 10), (10, 10), (15, 10))


def test_tile_covers_a_grid_in_c_order():
    assert tile((5, 3), (2, 3)) == [([0, 0], [2, 3]), ([2, 0], [4, 3]), ([4, 0], [5, 3])]


@pytest.mark.parametrize("shape,target", [((5136, 721, 1152), 4_000_000), ((240, 181, 288), 4_000_000), ((100, 100), 4000)])
def test_auto_chunks_are_near_the_target_size_and_balanced(shape, target):
    chunks = auto_chunks(shape, 4, target)
    nbytes = math.prod(chunks) * 4
    assert 0.7 * target <= nbytes <= 1.3 * target
    # Balanced: the same number of chunks (within rounding) along every dimension.
    counts = [n / c for n, c in zip(shape, chunks)]
    assert max(counts) / min(counts) < 1.3


def test_auto_chunks_of_a_small_array_is_the_whole_array():
    assert auto_chunks((10, 20), 4, 10**6) == (10, 20)


def test_seed_grid_at_full_scale_is_the_papers_grid():
    grid = seed_grid((5136, 721, 1152))
    assert len(grid) == 10 * 4 * 4
    assert {g[0] for g in grid} == {1, 6, 12, 24, 48, 120, 720, 1440, 2160, 5136}
    assert {g[1] for g in grid} == {10, 50, 100, 721}
    assert {g[2] for g in grid} == {10, 50, 100, 1152}
    assert (120, 50, 100) in grid


def test_seed_grid_at_the_demo_shape_clips_to_the_extent():
    grid = seed_grid((240, 181, 288))
    assert {g[0] for g in grid} == {1, 6, 12, 24, 48, 120, 240}  # 720, 1440, 2160 and full collapse to 240
    assert {g[1] for g in grid} == {10, 50, 100, 181}
    assert {g[2] for g in grid} == {10, 50, 100, 288}
    assert len(grid) == 7 * 4 * 4


def test_seed_grid_proportional_keeps_the_fraction_of_each_dimension():
    grid = seed_grid((240, 181, 288), mode="proportional")
    assert {g[0] for g in grid} == {1, 2, 6, 34, 67, 101, 240}  # v * 240 / 5136, at least 1, deduplicated
    assert {g[1] for g in grid} == {3, 13, 25, 181}


def test_read_amplification_counts_every_unit_each_chunk_overlaps():
    """The closed form the planner scores with counts what a walk over the chunks counts: for each chunk,
    the units it overlaps (chunks and units both clipped at the array's end)."""
    import random

    from layoutlab.convert.rechunk_plan import _pairs_along, read_amplification

    def walked(size, chunk, unit):
        return sum((min(size, start + chunk) - 1) // unit - start // unit + 1 for start in range(0, size, chunk))

    rng = random.Random(37)
    cases = [(10, 3, 4), (12, 3, 4), (12, 4, 6), (1, 1, 1), (21_068, 1, 120), (100, 7, 100), (100, 100, 7)]
    cases += [(rng.randint(1, 500), rng.randint(1, 60), rng.randint(1, 80)) for _ in range(2_000)]
    for size, chunk, unit in cases:
        assert _pairs_along(size, chunk, unit) == walked(size, chunk, unit), (size, chunk, unit)
    # a unit of one chunk reads each chunk once; a unit straddling chunk boundaries reads some twice
    assert read_amplification((100, 50), (10, 10), (10, 10)) == 1.0
    assert read_amplification((100,), (10,), (15,)) == walked(100, 10, 15) / 10 == 1.3  # (15, 45, 75 inside chunks)
