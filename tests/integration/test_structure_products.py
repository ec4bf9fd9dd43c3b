"""The structure model over the real products of the shared corpus: each found as what it is.

Tables for along-track and event files (GEDI, ICESat-2 ATL06/ATL07, GOES GLM), swaths for L2 imagers
and radars in orbit (TEMPO, OMPS, GPM DPR), grids with or without time (ERA5, MERRA-2, SMAP's EASE grid,
ATL16), ground radar volumes (ODIM_H5, CfRadial) and an ARM station's time series.
"""

from __future__ import annotations

import json

import pytest
from shared_corpus import CORPUS

from layoutlab.structure import file_structure

EXPECTED_ROLE = {
    "products/GEDI02_B_2019108080338_O01964_T05337_02_001_01_sub.h5": "table",
    "products/processed_ATL07-01_20190222003738_08490201_003_02.h5": "table",
    "icesat2/ATL06_20181013235645_02340114_209_01.h5": "table",
    "products/OR_GLM-L2-LCFA_G16_s20181830433000_e20181830433200_c20181830433231.nc": "table",
    "products/TEMPO_NO2_L2_V03_20240601T211614Z_S012G02_subsetted.nc4": "swath",
    "products/OMPS-NPP_NMNO2-L2_2017m0101t000532_o26838_2017m0309t171152.h5": "swath",
    "gpm/2A-RW-BRS.GPM.Ku.V6-20160118.20141206-S095002-E095137.004383.V04A.HDF5": "swath",
    "products/era5_1995-07-14T12.nc": "grid",
    "products/M2T1NXSLV_geo_temporal.nc4": "grid",
    "products/SC_SPL3SMP_009_prefetch.nc4": "grid",
    "products/ATL16_variables.nc4": "grid",
    "products/knmi_polar_volume.h5": "radar",
    "products/cfrad.20211011_223602.712_to_20211011_223612.091_DOW8_RHI.nc": "radar",
    "products/sgpmetE13.b1.20190508.000000.cdf": "timeseries",
}
pytestmark = pytest.mark.skipif(not (CORPUS / "products").is_dir(), reason="shared corpus products not found")


@pytest.mark.parametrize("name", sorted(EXPECTED_ROLE))
def test_each_product_is_found_as_what_it_is(name):
    structure = file_structure(str(CORPUS / name))
    assert structure.role == EXPECTED_ROLE[name], "\n".join(structure.summary_lines())
    main = next(u for u in structure.units if u.role == structure.role)
    json.dumps(structure.to_dict())  # the model goes into the run's record as JSON
    if structure.role in ("grid", "swath"):
        assert {"Y", "X"} <= set(main.coordinates), main
    if structure.role == "table":
        assert len(main.shape) == 1 and main.variables


def test_every_product_of_the_corpus_directory_is_in_the_table():
    assert {f"products/{p.name}" for p in (CORPUS / "products").iterdir()} <= set(EXPECTED_ROLE)


def test_swath_geolocation_and_data_are_tied_through_the_coordinates_attribute():
    tempo = file_structure(str(CORPUS / "products/TEMPO_NO2_L2_V03_20240601T211614Z_S012G02_subsetted.nc4"))
    swath = tempo.unit_of("swath")
    assert swath.variables == ["product/vertical_column_stratosphere"]
    assert swath.coordinates["Y"] == "geolocation/latitude" and swath.coordinates["X"] == "geolocation/longitude"
    assert swath.dims == ("mirror_step", "xtrack") and swath.record_axis == 0
