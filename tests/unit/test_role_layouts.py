"""Layouts per role (kinds/_grid.py): Nguyen's presets over a grid of any axes, a table's rows, a swath's scan lines."""

from __future__ import annotations

import math

import pytest

from layoutlab.kinds._grid import chunk_preset, chunk_preset_nd, rows_label
from layoutlab.pipeline import plan as plans
from layoutlab.pipeline.plan import DatasetFacts, PlanError


@pytest.mark.parametrize("shape", [(5136, 721, 1152), (24, 19, 36), (2, 21, 17), (100000, 3, 3), (1, 5, 5)])
@pytest.mark.parametrize("preset", ["timeseries", "map", "balanced"])
def test_over_time_lat_lon_the_n_d_rule_is_nguyens(shape, preset):
    assert chunk_preset_nd(preset, shape, ("T", "Y", "X")) == chunk_preset(preset, shape)
    assert chunk_preset(preset, (5136, 721, 1152)) == {"timeseries": (5136, 10, 10), "map": (1, 721, 1152),
                                                       "balanced": chunk_preset("balanced", (5136, 721, 1152))}[preset]


def test_a_level_axis_is_whole_in_a_map_one_in_a_time_series_and_split_like_space_when_balanced():
    shape, axes = (5136, 72, 361, 576), ("T", "Z", "Y", "X")
    assert chunk_preset_nd("map", shape, axes) == (1, 72, 361, 576)
    assert chunk_preset_nd("timeseries", shape, axes) == (5136, 1, 10, 10)
    ct, cz, cy, cx = chunk_preset_nd("balanced", shape, axes, itemsize=4, target_bytes=4 * 2**20)
    elements = ct * cz * cy * cx
    assert 0.8 * 2**20 <= elements <= 2**20  # about 4 MiB of float32
    # a point's series (T/ct chunks) and one step's volume ((Z/cz)(Y/cy)(X/cx) chunks) touch about as many chunks
    series, volume = math.ceil(5136 / ct), math.ceil(72 / cz) * math.ceil(361 / cy) * math.ceil(576 / cx)
    assert 0.5 <= series / volume <= 2, (series, volume)
    # the space part keeps the grid's proportions
    assert abs(cz / 72 - cy / 361) < 0.05 and abs(cy / 361 - cx / 576) < 0.05


def test_a_grid_without_time_has_no_time_series_and_a_whole_map():
    assert chunk_preset_nd("timeseries", (105, 237), ("Y", "X")) is None
    assert chunk_preset_nd("map", (105, 237), ("Y", "X")) == (105, 237)
    cy, cx = chunk_preset_nd("balanced", (4000, 8000), ("Y", "X"), itemsize=4, target_bytes=4 * 2**20)
    assert cy * cx <= 2**20 and abs(cx / cy - 2) < 0.05


def test_rows_labels():
    assert [rows_label(n) for n in (10_000, 100_000, 1_000_000, 18_361, 73, 100)] == \
        ["1e4", "1e5", "1e6", "18361", "73", "100"]


def _facts(role, length, line_bytes=0):
    return DatasetFacts(kind="structure", role=role, record_length=length, record_bytes=line_bytes,
                        record_arrays=((length, 1), (length, 4), (3, 1)))


def test_a_tables_rows_are_capped_at_its_longest_table_and_identical_layouts_kept_once():
    plan = plans.merge_plan(None)
    names = [s["name"] for s in plans.variant_specs(plan, _facts("table", 250_000)) if s["kind"] == "rechunk-zarr"]
    assert names == ["zarr-rows1e4", "zarr-rows1e5"]
    six = plans.merge_plan({"variants": [{"kind": "rechunk-zarr", "chunks": "rows", "rows": 10**6, "applies_to": "table"}]})
    assert [s["name"] for s in plans.variant_specs(six, _facts("table", 250_000))] == ["zarr-rows250000"]
    short = [s for s in plans.variant_specs(plan, _facts("table", 5000)) if s["kind"] == "rechunk-zarr"]
    assert [(s["name"], s["record_chunk"]) for s in short] == [("zarr-rows5000", 5000)]


def test_a_swaths_scan_lines_make_blocks_of_about_the_target_bytes():
    plan = plans.merge_plan(None)
    specs = [s for s in plans.variant_specs(plan, _facts("swath", 7936, 49 * 176 * 4)) if s["kind"] == "rechunk-zarr"]
    assert [s["name"] for s in specs] == ["zarr-lines121", "zarr-lines7"]
    assert all(s["record_chunk"] * 49 * 176 * 4 <= t for s, t in zip(specs, (4 * 2**20, 256 * 2**10)))
    # a grid, a table or a radar volume gets no scan-line blocks; a swath no row chunks
    assert not [s for s in plans.variant_specs(plan, _facts("radar", 100)) if s["kind"] == "rechunk-zarr"]


def test_the_case_bound_counts_a_roles_layouts():
    plan = plans.merge_plan(None)
    without = plans.merge_plan({"variants": [v for v in plan["variants"] if v.get("applies_to") not in ("table", "swath")]})
    assert plans.case_bound(plan)[0] > plans.case_bound(without)[0]
    assert "for a table" in plans.case_bound(plan)[1]
    assert "for a file of any other structure" in plans.case_bound(without)[1]


@pytest.mark.parametrize("entry, message", [
    ({"kind": "icechunk", "chunks": "rows", "rows": 10}, "is a layout of rechunk-zarr only"),
    ({"kind": "rechunk-zarr", "chunks": "rows", "rows": 10, "applies_to": "swath"}, "is for a table"),
    ({"kind": "rechunk-zarr", "chunks": "map", "rows": 10}, "rows is taken with chunks \"rows\" only"),
])
def test_a_record_layout_where_it_cannot_apply_is_refused_naming_the_field(entry, message):
    with pytest.raises(PlanError, match="variants\\[0\\]") as error:
        plans.merge_plan({"variants": [entry]})
    assert message in str(error.value)


def test_a_record_chunked_variant_says_how_to_make_it_again():
    from layoutlab import kinds

    steps = kinds.get("rechunk-zarr").make_steps("zarr-rows1e5", {"spec": {"record_chunk": 100000}}, {}, None)
    assert steps["commands"] == ["layoutlab rechunk INPUT.h5 OUTPUT.zarr --record-chunk 100000"]


def test_a_row_layout_over_the_object_ceiling_is_refused_before_any_conversion():
    from layoutlab.ceilings import Ceilings

    plan = plans.merge_plan(None)
    facts = DatasetFacts(kind="structure", role="table", record_length=10**8, record_arrays=((10**8, 1),) * 30)
    specs = plans.variant_specs(plan, facts)
    with pytest.raises(PlanError, match="zarr-rows1e4: chunks: 30 arrays in chunks of 10000 along their first axis: "
                                        "300,000 is over"):
        plans.check_dataset_ceilings(plan, specs, facts, Ceilings(max_objects_per_variant=200_000))
    plans.check_dataset_ceilings(plan, [s for s in specs if s["name"] != "zarr-rows1e4"], facts,
                                 Ceilings(max_objects_per_variant=200_000))


def test_rechunk_record_chunk_blocks_every_arrays_first_axis(tmp_path, capsys):
    import h5py
    import numpy as np
    import zarr

    from layoutlab import cli

    src = tmp_path / "t.h5"
    with h5py.File(src, "w") as f:
        f["beam/height"] = np.arange(95, dtype="f4")
        f["beam/counts"] = np.ones((95, 3), dtype="i2")
    assert cli.main(["rechunk", str(src), str(tmp_path / "t.zarr"), "--record-chunk", "20", "--no-progress"]) == 0
    group = zarr.open_group(str(tmp_path / "t.zarr"), mode="r")
    assert group["beam/height"].chunks == (20,) and group["beam/counts"].chunks == (20, 3)
    assert np.array_equal(group["beam/counts"][...], np.ones((95, 3), dtype="i2"))
    capsys.readouterr()
    assert cli.main(["rechunk", str(src), str(tmp_path / "u.zarr"), "--record-chunk", "20", "--chunks", "x=1"]) == 2
    assert "--record-chunk chunks every array by its first axis" in capsys.readouterr().err


@pytest.mark.parametrize("environment", ["dev", "prod"])
def test_the_default_plan_with_its_role_layouts_fits_every_environments_ceilings(environment):
    """The local run and a dev deployment validate every upload's plan against cdk.json's dev ceilings: the role
    layouts must leave the default plan's case bound (counted for a table and a swath too) under them."""
    import json
    from pathlib import Path

    from layoutlab.ceilings import Ceilings

    app = json.loads((Path(__file__).resolve().parents[2] / "cdk.json").read_text())
    ceilings = Ceilings.from_mapping(app["context"]["layoutlab:environments"][environment]["ceilings"])
    plans.merge_plan(None, ceilings=ceilings)
    bound, _ = plans.case_bound(plans.default_plan())
    assert bound <= ceilings.max_cases
