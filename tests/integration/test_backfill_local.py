"""Backfill on the local cloud: every object under a prefix converted with a decided product's layout by the
backfill state machine's Distributed Map, over an item list written in pages of batches (issue 35); a granule
that fails does not stop the others of its batch."""

from __future__ import annotations

import pytest

from layoutlab.local import backfill, dispatch
from layoutlab.local.pipeline import LocalPipeline
from layoutlab.products import flow, state
from layoutlab.samples import geos

pytestmark = pytest.mark.slow

ARCHIVE = "layoutlab-local-archive"
PLAN = {
    "name": "archive",
    "variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "1MiB"}],
    "patterns": {"grid": ["map-timestep"], "granule": []},
    "readers": {"hdf5": ["h5py-s3fs-aligned"]},
    "platforms": ["local-lambda"],
    "repetitions": 1,
}


def test_a_backfill_converts_every_listed_granule_and_records_the_one_that_is_not_hdf5(local_cloud, tmp_path):
    pipeline = LocalPipeline(local_cloud)
    pipeline.setup()
    try:
        pipeline.s3.create_bucket(Bucket=ARCHIVE)
        sizes = 0
        for i in range(4):
            path = geos.write_geos(tmp_path / f"g{i}.nc", shape=(6 + i, 19, 36))
            pipeline.s3.upload_file(str(path), ARCHIVE, f"geos/2026/g{i}.nc")
            sizes += path.stat().st_size
        pipeline.s3.put_object(Bucket=ARCHIVE, Key="geos/2026/README.txt", Body=b"not a granule\n")
        pipeline.s3.put_object(Bucket=ARCHIVE, Key="other/g9.nc", Body=b"outside the prefix")
        store = pipeline.store
        state.ensure_product(store, "ARCH", signature=None, named_by="uploader",
                             settings=state.ProductSettings(), plan=PLAN)
        flow.decide_by_person(store, "ARCH", "paged-1MiB", by="tester", reason="backfill the archive")

        # pages of 3 listed objects in batches of 2: README.txt (listed first) shares its batch with g0.nc
        started = backfill.start_backfill(pipeline.s3, pipeline.sfn, ARCHIVE, "geos/", "ARCH", page_items=3, batch=2)
        assert (started["items"], started["pages"], started["batches"]) == (5, 2, 3)
        described = backfill.wait(pipeline.sfn, started["execution_arn"], timeout=900)
        assert described["status"] == "SUCCEEDED", described

        granules = state.granules(store, "ARCH")
        by_status = {}
        for g in granules:
            by_status.setdefault(g["status"], []).append(g)
        assert len(by_status["CONVERTED"]) == 4 and len(by_status["FAILED"]) == 1
        assert "README.txt" in by_status["FAILED"][0]["reason"] or "not" in by_status["FAILED"][0]["reason"]
        failures = store.items(dataset=by_status["FAILED"][0]["dataset"], kind="FAILURE")
        assert failures and f"s3://{ARCHIVE}/geos/2026/README.txt" in failures[0]["reason"]
        listed = pipeline.s3.list_objects_v2(Bucket=dispatch.OUTPUTS_BUCKET, Prefix="products/ARCH/")["Contents"]
        assert len(listed) == 4 and all(o["Key"].endswith("/paged-1MiB.h5") for o in listed)
        product = state.get_product(store, "ARCH")
        assert product["production_granules"] == 5 and product["failed_granules"] == 1
        assert product["bytes_in"] == sizes + len(b"not a granule\n")
        assert product["bytes_out"] == sum(o["Size"] for o in listed) and product["state"] == "production"
    finally:
        local_cloud.reset()
