"""A paged-HDF5 variant made by the pipeline records which repack engine wrote it, and why."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from layoutlab.pipeline.variants import convert_variant
from repack_helpers import require_c_code
from variant_helpers import PAGED_SPEC as SPEC
from variant_helpers import pipeline_cloud, uploaded_variant_task


@pytest.fixture
def cloud():
    with pipeline_cloud() as (s3, store):
        yield s3, store


@pytest.mark.parametrize("soft_link", [False, True])
def test_the_variant_item_says_which_engine_wrote_the_copy(cloud, tmp_path, soft_link):
    require_c_code()
    s3, store = cloud
    source = tmp_path / "a.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("v", data=np.arange(10_000.0), chunks=(1000,), compression="gzip")
        if soft_link:
            f["alias"] = h5py.SoftLink("/v")
    convert_variant(uploaded_variant_task(s3, source), s3=s3, store=store)
    item = store.get_variant("ds", SPEC["name"])
    assert item["status"] == "READY" and item["repack"]["verified"]
    assert item["repack"]["chunks_copied_raw"] == 10
    if soft_link:  # the native engine declines a soft link: the Python engine wrote it, and the item says why
        assert item["repack"]["engine"] == "python"
        assert item["repack"]["notes"] == ["written by the Python engine: the native engine declined: "
                                           "/alias is a soft, external or user-defined link"]
    else:
        assert item["repack"]["engine"] == "native" and item["repack"]["notes"] == []
