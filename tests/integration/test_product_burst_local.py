"""A burst of granules of three products on the local cloud, uploaded at once and delivered by the deployed
route (S3 -> EventBridge -> SQS -> ingest in batches): each product studied once, the rest converted with its
decision, every upload ending SUCCEEDED, none lost or started twice, and no product ever running more
executions at once than its plan allows (issue 35, reduced: the full size is benchmarks/bench_product_burst.py)."""

from __future__ import annotations

import pytest

from layoutlab.local.burst import run_burst
from layoutlab.local.pipeline import LocalPipeline

pytestmark = pytest.mark.slow

PRODUCTS = ["ALPHA", "BETA", "GAMMA"]
PER_PRODUCT = 6
BOUND = 2
PLAN = {
    "name": "burst",
    "variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "1MiB"}],
    "patterns": {"grid": ["map-timestep"], "granule": []},
    "readers": {"hdf5": ["h5py-s3fs-aligned"]},
    "platforms": ["local-lambda"],
    "repetitions": 1,
    "products": {"study_granules": 1, "check_every": 1000, "max_concurrent_executions": BOUND},
}


def test_a_burst_through_the_queue_studies_each_product_once_converts_the_rest_within_the_bound(local_cloud,
                                                                                             tmp_path):
    pipeline = LocalPipeline(local_cloud)
    pipeline.setup(s3_events=True)
    try:
        burst = run_burst(pipeline, tmp_path, PRODUCTS, PER_PRODUCT, PLAN, timeout=2400)
        count = len(PRODUCTS) * PER_PRODUCT
        assert [o["status"] for o in burst["outcomes"]] == ["started"] * count, burst["outcomes"]  # none lost
        names = burst["execution_names"]
        assert len(names) == len(set(names)) == count  # none started twice
        assert sorted(burst["final"].values()) == ["SUCCEEDED"] * count, burst["final"]
        studied = set()
        for name, product in burst["products"].items():
            assert (product["study_count"], product["production_granules"], product["granules"]) == \
                   (1, PER_PRODUCT - 1, PER_PRODUCT), name
            assert product["state"] == "production" and product["bytes_out"] > 0
            studied |= set(product["studied"])
        with_results = {o["dataset_id"] for o in burst["outcomes"]
                        if pipeline.store.items(dataset=o["dataset_id"], kind="RESULT")}
        assert with_results == studied and len(studied) == len(PRODUCTS)  # three studies, the rest converted only
        # the bound held, and was reached (the burst did queue), and every slot was given back
        assert all(1 <= peak <= BOUND for peak in burst["peak_executions"].values()), burst["peak_executions"]
        assert max(burst["peak_executions"].values()) == BOUND
        from layoutlab.products import concurrency

        assert [concurrency.running(pipeline.store, p) for p in PRODUCTS] == [0] * len(PRODUCTS)
        assert burst["queues_after"].get("dead_letters", 0) == 0 and burst["queues_after"]["queue"] == 0
        print(f"\nburst of {count}: {burst['wall_s']:.1f} s, {burst['granules_per_s']:.3f} granules/s, "
              f"peak executions per product {burst['peak_executions']}, "
              f"local cloud peak RSS {burst['cloud_peak_rss_mb']} MiB")
    finally:
        local_cloud.reset()
