"""Every real product through the whole local pipeline: dropped -> plan -> convert -> bench -> summarize.

The shared corpus's products (``products/``) plus the ICESat-2 ATL06 and GPM DPR granules, all dropped into
one local cloud with a reduced plan (the original and a paged repack, one HDF5 reader on local-lambda, one
repetition, one variable of one role per family: the suite's added time stays small). Each run ends
SUCCEEDED with at least 3 pattern families beyond open-list measured; the summary compares every case's
values (their digest, recorded after the timed region) with the original's and says every one is equal;
the recommendation names the variables it is about; and the values each case read equal what h5py reads
from the original file at the same selection (a check independent of the pipeline's own).
"""

from __future__ import annotations

import h5py
import pytest
from shared_corpus import CORPUS

from layoutlab.bench.patterns import get_pattern, values_digest
from layoutlab.bench.readers import H5pyHandle
from layoutlab.local.pipeline import LocalPipeline
from layoutlab.report.study import study_row

pytestmark = pytest.mark.slow


def _products() -> list:
    found = sorted((CORPUS / "products").glob("*")) if (CORPUS / "products").is_dir() else []
    found += sorted((CORPUS / "icesat2").glob("ATL06_*.h5")) + sorted((CORPUS / "gpm").glob("2A-RW-BRS*.HDF5"))
    return [p for p in found if p.is_file()]


PRODUCTS = _products()
PLAN = {
    "name": "product",
    "variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "1MiB"}],
    "families": {"variables": 1, "roles": 1},
    "readers": {"hdf5": ["h5py-s3fs-aligned"]},
    "platforms": ["local-lambda"],
    "repetitions": 1,
    "max_concurrency": 2,
}


@pytest.fixture(scope="module")
def runs(local_cloud):
    if not PRODUCTS:
        pytest.skip("shared corpus products not found")
    pipeline = LocalPipeline(local_cloud)
    pipeline.setup()
    pipeline.put_plan("product", PLAN)
    outcomes = {}
    for path in PRODUCTS:  # all dropped at once: the local cloud runs them side by side
        [outcome] = pipeline.deliver(pipeline.upload(path, plan="product"))
        outcomes[path.name] = outcome
    final = pipeline.wait([o for o in outcomes.values() if o["status"] == "started"], timeout=1500)
    _print_studies(pipeline, outcomes)
    try:
        yield pipeline, outcomes, final
    finally:
        local_cloud.reset()


def _print_studies(pipeline, outcomes) -> None:
    """Each product's study as the docs' table gives it (seen with ``pytest -s``)."""
    import json

    for name, outcome in outcomes.items():
        row = study_row(pipeline.store.items(dataset=outcome.get("dataset_id")), name)
        print("STUDY " + json.dumps(row, default=str), flush=True)


@pytest.fixture(params=[p.name for p in PRODUCTS] or ["none"])
def product(request, runs):
    pipeline, outcomes, final = runs
    outcome = outcomes[request.param]
    assert outcome["status"] == "started", outcome
    items = pipeline.store.items(dataset=outcome["dataset_id"])
    return request.param, final.get(outcome["dataset_id"]), items


def test_the_product_runs_to_success_with_three_families_beyond_open_list(product):
    name, status, items = product
    failures = [i for i in items if i["kind"] == "FAILURE"]
    assert status == "SUCCEEDED", (name, status, failures)
    assert not failures, (name, failures)
    [run_item] = [i for i in items if i["kind"] == "RUN"]
    assert run_item["structure"]["role"] not in (None, "metadata-only"), (name, run_item["structure"]["role"])
    results = [i for i in items if i["kind"] == "RESULT"]
    families = {r["pattern"].split(":")[0] for r in results}
    assert len(families - {"open-list"}) >= 3, (name, families)
    assert {r["variant"] for r in results} == {"original", "paged-1MiB"}, name


def test_the_summary_checks_every_value_against_the_originals_and_names_the_variables(product):
    name, _, items = product
    [summary] = [i for i in items if i["kind"] == "SUMMARY"]
    check = summary["values_check"]
    cases = [i for i in items if i["kind"] == "RESULT" and i["pattern"] != "open-list"]
    assert check["checked"] == len(cases) and check["equal"] == check["checked"] > 0, (name, check)
    assert not check["mismatches"] and check["sentence"].startswith("Every value read"), (name, check)
    variables = {v for joined in summary["variables"].values() for v in joined.split(", ")}
    assert variables and all(v in summary["recommendation"] for v in variables), (name, summary["recommendation"])


def test_every_value_read_equals_h5pys_read_of_the_original(product):
    name, _, items = product
    [path] = [p for p in PRODUCTS if p.name == name]
    results = [i for i in items if i["kind"] == "RESULT" and i["pattern"] != "open-list"]
    assert results
    with h5py.File(path, "r") as f:
        handle = H5pyHandle("hdf5", f)
        for record in results:
            pattern = get_pattern(record["pattern"])
            params = pattern.params(record["pattern_params"])
            expected = values_digest(pattern.load(handle, pattern.select(handle, params)).values)
            assert record["result_summary"]["values_sha256"] == expected, (name, record["variant"], record["pattern"])
