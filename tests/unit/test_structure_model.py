"""The structure model on files made to test its walk: a hard-link cycle walked once, an array whose values
live outside the file listed but never read nor chosen, dimension scales and CF coordinates found."""

from __future__ import annotations

import h5py
import numpy as np

from layoutlab.pipeline.families import plan_families
from layoutlab.structure import read_structure


def test_a_hard_link_cycle_is_walked_once_and_data_outside_the_file_is_never_chosen(tmp_path):
    path = tmp_path / "loop.h5"
    outside = tmp_path / "values.bin"
    outside.write_bytes(np.arange(4000, dtype="<f8").tobytes())
    with h5py.File(path, "w") as f:
        track = f.create_group("track")
        track["latitude"] = np.linspace(-60, 60, 500)
        track["longitude"] = np.linspace(0, 90, 500)
        track["height"] = np.random.default_rng(0).normal(size=500).astype("f4")
        track["loop"] = track  # a hard link back to its own group: a cycle
        f.create_dataset("big_outside", shape=(4000,), dtype="<f8", external=[(str(outside), 0, 4000 * 8)])
    outside.unlink()  # (never read: a read would fail)
    with h5py.File(path, "r") as f:
        structure = read_structure(f, str(path))
        assert sorted(structure.arrays) == ["big_outside", "track/height", "track/latitude", "track/longitude"]
        assert structure.arrays["big_outside"].outside_file
        assert structure.role == "table"
        table = structure.unit_of("table")
        assert table.variables == ["track/height"]
        assert table.coordinates["Y"] == "track/latitude" and table.coordinates["X"] == "track/longitude"
        planned = plan_families(f, structure)
        assert all("big_outside" not in c.variable for c in planned.cases)
        assert {c.pattern for c in planned.cases} >= {"column-read", "row-subset", "multi-variable"}


def test_dimension_scales_and_cf_attributes_make_a_grid_with_its_record_axis(tmp_path):
    path = tmp_path / "grid.nc"
    with h5py.File(path, "w") as f:
        for name, values, attrs in (("time", np.arange(5.0), {"units": "hours since 2000-01-01"}),
                                    ("plev", np.array([1000.0, 500.0]), {"positive": "down"}),
                                    ("y", np.linspace(-80, 80, 9), {"standard_name": "latitude"}),
                                    ("x", np.linspace(0, 350, 36), {"units": "degrees_east"})):
            f[name] = values
            f[name].make_scale(name)
            f[name].attrs.update(attrs)
        f["ta"] = np.zeros((5, 2, 9, 36), "f4")
        f["ta_flag"] = np.zeros((5, 2, 9, 36), "i1")
        f["ta_flag"].attrs["flag_values"] = np.array([0, 1], "i1")
        for ds in (f["ta"], f["ta_flag"]):
            for axis, name in enumerate(("time", "plev", "y", "x")):
                ds.dims[axis].attach_scale(f[name])
    with h5py.File(path, "r") as f:
        structure = read_structure(f, str(path))
    grid = structure.unit_of("grid")
    assert structure.role == "grid" and grid.dims == ("time", "plev", "y", "x")
    assert grid.variables == ["ta"]  # the flag is not data
    assert grid.coordinates == {"T": "time", "Z": "plev", "Y": "y", "X": "x"} and grid.record_axis == 0
