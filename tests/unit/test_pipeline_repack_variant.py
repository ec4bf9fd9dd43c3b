"""A paged-HDF5 variant made by the pipeline records which repack engine wrote it, and why."""

from __future__ import annotations

import boto3
import h5py
import numpy as np
import pytest
from moto import mock_aws

from layoutlab.pipeline.variants import convert_variant
from layoutlab.results.store import ResultsStore
from repack_helpers import require_c_code

SPEC = {"name": "paged-1MiB", "kind": "repack-paged", "format": "hdf5", "page_size": 1 << 20,
        "uri": "s3://outputs/variants/ds/paged-1MiB.h5"}


@pytest.fixture
def cloud():
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        for bucket in ("ingest", "outputs"):
            s3.create_bucket(Bucket=bucket)
        store = ResultsStore("results-test")
        store.create_table()
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
    s3.upload_file(str(source), "ingest", "incoming/a.h5")
    task = {"dataset_id": "ds", "source": {"bucket": "ingest", "key": "incoming/a.h5", "size": source.stat().st_size},
            "variant": SPEC}
    convert_variant(task, s3=s3, store=store)
    item = store.get_variant("ds", SPEC["name"])
    assert item["status"] == "READY" and item["repack"]["verified"]
    assert item["repack"]["chunks_copied_raw"] == 10
    if soft_link:  # the native engine declines a soft link: the Python engine wrote it, and the item says why
        assert item["repack"]["engine"] == "python"
        assert item["repack"]["notes"] == ["written by the Python engine: the native engine declined: "
                                           "/alias is a soft, external or user-defined link"]
    else:
        assert item["repack"]["engine"] == "native" and item["repack"]["notes"] == []
