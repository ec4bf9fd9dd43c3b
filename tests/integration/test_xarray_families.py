"""xarray, a reader of every study, reads the pattern families the same rows and cells as h5py.

xarray decodes CF packing (scale_factor / add_offset, _Unsigned); a plan's row range is in stored units
(what h5py reads). GOES GLM's event_lat is an _Unsigned int16: decoded, it is degrees; to h5py, negative
integers. row-subset on xarray compares the range in stored units and takes the same rows.
"""

from __future__ import annotations

import h5py
import pytest
import xarray as xr
from shared_corpus import CORPUS

from layoutlab.bench.patterns import get_pattern
from layoutlab.bench.readers import H5pyHandle, XarrayHandle
from layoutlab.pipeline import plan as plans
from layoutlab.pipeline.facts import dataset_facts

GLM = sorted((CORPUS / "products").glob("OR_GLM-L2-LCFA_*.nc"))


@pytest.mark.skipif(not GLM, reason="shared corpus products not found")
def test_row_subset_on_xarray_takes_h5pys_rows_of_a_packed_unsigned_coordinate():
    path = str(GLM[0])
    facts = dataset_facts(path)
    [case] = [c for c in plans.family_labels(facts.family_cases) if c["pattern"] == "row-subset"]
    pattern = get_pattern(case["label"])
    params = pattern.params(case["params"])

    def opener(group):
        return xr.open_dataset(path, group=group, engine="h5netcdf", phony_dims="access", decode_times=False)

    handle = XarrayHandle("hdf5", path, {}, [], opener)
    try:
        got = pattern.select(handle, params)
    finally:
        handle.close()
    with h5py.File(path, "r") as f:
        expected = pattern.select(H5pyHandle("hdf5", f), params)
    assert got.info == expected.info and got.info["rows"][1] > got.info["rows"][0]
    assert [r.index for r in got.reads] == [r.index for r in expected.reads]
