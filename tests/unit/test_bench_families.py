"""The pattern families, fitted by the plan step to the two samples' structures, read the values the samples'
generators make (check_values regenerates them): a family's index, box and row range select what they say."""

from __future__ import annotations

import h5py
import pytest

from layoutlab.bench.patterns import check_values, get_pattern
from layoutlab.bench.readers import H5pyHandle
from layoutlab.pipeline.families import plan_families
from layoutlab.samples.atl03 import write_atl03
from layoutlab.samples.geos import write_geos
from layoutlab.structure import read_structure


@pytest.mark.parametrize("sample, role, families", [
    ("geos", "grid", {"open-list", "variable-read", "record-slice", "point-series", "box"}),
    ("atl03", "table", {"open-list", "column-read", "row-subset", "multi-variable"}),
])
def test_families_on_the_samples_read_the_generated_values(tmp_path, sample, role, families):
    path = (write_geos(tmp_path / "g.nc", shape=(24, 19, 36)) if sample == "geos"
            else write_atl03(tmp_path / "a.h5", photons=6000, chunk=1000))
    with h5py.File(path, "r") as f:
        structure = read_structure(f, str(path))
        assert structure.role == role
        planned = plan_families(f, structure)
        assert {c.pattern for c in planned.cases} == families
        handle = H5pyHandle("hdf5", f)
        for case in planned.cases:
            pattern = get_pattern(case.pattern)
            selection = pattern.select(handle, pattern.params(case.params))
            loaded = pattern.load(handle, selection)
            assert check_values(handle, selection, loaded) is (None if case.pattern == "open-list" else True), case
