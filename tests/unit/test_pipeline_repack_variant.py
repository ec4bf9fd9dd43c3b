"""A paged-HDF5 variant made by the pipeline records what the repack did: verified, chunks copied and decoded, notes."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from layoutlab.pipeline.variants import convert_variant
from variant_helpers import PAGED_SPEC as SPEC
from variant_helpers import pipeline_cloud, uploaded_variant_task


@pytest.fixture
def cloud():
    with pipeline_cloud() as (s3, store):
        yield s3, store


def test_the_variant_item_says_what_the_repack_did(cloud, tmp_path):
    s3, store = cloud
    source = tmp_path / "a.h5"
    with h5py.File(source, "w") as f:
        f.create_dataset("v", data=np.arange(10_000.0), chunks=(1000,), compression="gzip")
    convert_variant(uploaded_variant_task(s3, source), s3=s3, store=store)
    item = store.get_variant("ds", SPEC["name"])
    assert item["status"] == "READY" and item["repack"]["verified"]
    assert item["repack"]["chunks_copied_raw"] == 10
    assert item["repack"]["decode_check"]["chunks"] == 10 and item["repack"]["notes"] == []
