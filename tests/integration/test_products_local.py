"""A product on the local cloud: its first granule studied, the decision (then a person's override), and
the next granules converted with the chosen layout only, one in K also benchmarked for drift (issue 35)."""

from __future__ import annotations

import pytest

from layoutlab.local import dispatch
from layoutlab.local.pipeline import LocalPipeline
from layoutlab.products import flow, state
from layoutlab.samples import geos

pytestmark = pytest.mark.slow

PRODUCT_PLAN = {
    "name": "product",
    "variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "1MiB"}],
    "patterns": {"grid": ["timeseries-point", "map-timestep"], "granule": []},
    "readers": {"hdf5": ["h5py-s3fs-aligned"]},
    "platforms": ["local-lambda"],
    "repetitions": 2,
    "max_concurrency": 1,
    # a wide tolerance: this test is about the path, not about the local machine's noise
    "products": {"study_granules": 1, "check_every": 2, "drift_tolerance": 10},
}


def test_a_product_is_studied_once_then_its_granules_are_converted_with_the_chosen_layout(local_cloud, tmp_path):
    pipeline = LocalPipeline(local_cloud)
    pipeline.setup()
    pipeline.put_plan("product", PRODUCT_PLAN)
    try:
        # (one seed: the bench checks the values read against the sample's)
        files = [geos.write_geos(tmp_path / f"g{i}.nc", shape=(12 + 4 * i, 19, 36)) for i in range(3)]
        [first] = pipeline.deliver(pipeline.upload(files[0], key="incoming/GEOSP/g0.nc", plan="product"))
        assert pipeline.wait([first], timeout=900)[first["dataset_id"]] == "SUCCEEDED"
        store = pipeline.store
        product = state.get_product(store, "GEOSP")
        assert product["state"] == "decided" and product["named_by"] == "uploader"
        assert product["decision"]["granules"] == [first["dataset_id"]] and product["decision"]["variant"]
        measured = {r["variant"] for r in store.items(dataset=first["dataset_id"], kind="RESULT")}
        paged = next(v for v in measured if v != "original")
        flow.decide_by_person(store, "GEOSP", paged, by="tester", reason="the paged copy for every granule")

        later = []
        for i in (1, 2):
            later += pipeline.deliver(pipeline.upload(files[i], key=f"incoming/GEOSP/g{i}.nc", plan="product"))
        final = pipeline.wait(later, timeout=900)
        assert set(final.values()) == {"SUCCEEDED"}
        # (the two plan steps run at once: which granule took production number 1 is theirs to settle)
        roles = {o["dataset_id"]: store.items(dataset=o["dataset_id"], kind="RUN")[0] for o in later}
        assert sorted(r["product_role"] for r in roles.values()) == ["check", "production"]
        production, check = sorted(later, key=lambda o: roles[o["dataset_id"]]["product_number"])
        assert roles[production["dataset_id"]]["variants"] == [paged]
        assert store.items(dataset=production["dataset_id"], kind="RESULT") == []  # no benchmark
        assert store.items(dataset=production["dataset_id"], kind="SUMMARY") == []
        listed = pipeline.s3.list_objects_v2(Bucket=dispatch.OUTPUTS_BUCKET,
                                             Prefix=f"products/GEOSP/{production['dataset_id']}/")
        assert [o["Key"].rsplit("/", 1)[-1] for o in listed.get("Contents", [])] == [f"{paged}.h5"]
        checked = {r["variant"] for r in store.items(dataset=check["dataset_id"], kind="RESULT")}
        # the drift check: the original against the chosen layout
        assert checked == {"original", paged}, [f.get("reason") for f in store.items(dataset=check["dataset_id"],
                                                                                     kind="FAILURE")][:2]
        granule = state.get_granule(store, "GEOSP", check["dataset_id"])
        assert granule["role"] == "check" and granule["ratio"] > 0 and granule["drift"] is None

        product = state.get_product(store, "GEOSP")
        assert (product["state"], product["granules"], product["production_granules"], product["checks"]) == \
               ("production", 3, 2, 1)
        assert product["bytes_in"] == sum(f.stat().st_size for f in files) and product["bytes_out"] > 0
        assert [h["event"] for h in product["history"]] == ["decided", "override"]
        uploads = pipeline.s3.list_objects_v2(Bucket=dispatch.INGEST_BUCKET, Prefix="incoming/")["Contents"]
        assert sorted(o["Key"] for o in uploads) == [f"incoming/GEOSP/g{i}.nc" for i in range(3)]
    finally:
        local_cloud.reset()
