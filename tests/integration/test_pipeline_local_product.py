"""A real product through the whole local pipeline: dropped -> plan -> convert -> bench -> summarize.

ERA5 (a 2-D grid without a time axis, int16 packed and float32 variables) with a reduced plan: the
original and a paged repack, read by one HDF5 reader on local-lambda, the pattern families the plan
step fits to its structure. The run ends SUCCEEDED with every family case measured, and the values each
case read (their digest, recorded after the timed region) equal to what h5py reads from the original
file at the same selection.
"""

from __future__ import annotations

import h5py
import pytest
from shared_corpus import CORPUS

from layoutlab.bench.patterns import get_pattern, values_digest
from layoutlab.bench.readers import H5pyHandle
from layoutlab.local.pipeline import LocalPipeline

pytestmark = pytest.mark.slow
PRODUCT = CORPUS / "products" / "era5_1995-07-14T12.nc"
PLAN = {
    "name": "product",
    "variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "1MiB"}],
    "families": {"variables": 1, "roles": 1},
    "readers": {"hdf5": ["h5py-s3fs-aligned"]},
    "platforms": ["local-lambda"],
    "repetitions": 1,
    "max_concurrency": 1,
}


@pytest.fixture(scope="module")
def run(local_cloud):
    if not PRODUCT.is_file():
        pytest.skip("shared corpus products not found")
    pipeline = LocalPipeline(local_cloud)
    pipeline.setup()
    pipeline.put_plan("product", PLAN)
    [outcome] = pipeline.deliver(pipeline.upload(PRODUCT, plan="product"))
    assert outcome["status"] == "started", outcome
    final = pipeline.wait([outcome], timeout=900)
    try:
        yield pipeline, outcome, final
    finally:
        local_cloud.reset()


def test_the_product_runs_to_success_with_three_families_beyond_open_list(run):
    pipeline, outcome, final = run
    assert final[outcome["dataset_id"]] == "SUCCEEDED", pipeline.store.items(dataset=outcome["dataset_id"], kind="FAILURE")
    [run_item] = pipeline.store.items(dataset=outcome["dataset_id"], kind="RUN")
    assert run_item["kind_of_data"] == "grid" and run_item["structure"]["role"] == "grid"
    results = pipeline.store.items(dataset=outcome["dataset_id"], kind="RESULT")
    assert not pipeline.store.items(dataset=outcome["dataset_id"], kind="FAILURE")
    families = {r["pattern"].split(":")[0] for r in results}
    assert len(families - {"open-list"}) >= 3, families
    assert {r["variant"] for r in results} == {"original", "paged-1MiB"}


def test_every_value_read_equals_the_originals(run):
    pipeline, outcome, _ = run
    results = [r for r in pipeline.store.items(dataset=outcome["dataset_id"], kind="RESULT") if r["pattern"] != "open-list"]
    assert results
    with h5py.File(PRODUCT, "r") as f:
        handle = H5pyHandle("hdf5", f)
        for record in results:
            pattern = get_pattern(record["pattern"])
            params = pattern.params(record["pattern_params"])
            expected = values_digest(pattern.load(handle, pattern.select(handle, params)).values)
            assert record["result_summary"]["values_sha256"] == expected, (record["variant"], record["pattern"])
