"""A page size within a size budget (issue 17): chosen from the file, or paging skipped with the reason;
plans ask for it with ``page_size: auto``, the VARIANT item reports the overhead against the budget,
``layoutlab repack --page-size auto`` prints the choice with the predicted and the measured overhead."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from layoutlab import cli
from layoutlab.convert import page_budget
from layoutlab.convert.page_budget import choose_page_size, parse_budget
from layoutlab.convert.repack import repack
from layoutlab.pipeline.benchcase import run_bench_case
from layoutlab.pipeline.payloads import BenchCase
from layoutlab.pipeline.plan import DatasetFacts, PlanError, merge_plan, variant_specs
from layoutlab.pipeline.variants import convert_variant
from layoutlab.samples import atl03, geos
from variant_helpers import pipeline_cloud, uploaded_variant_task

MiB = 2**20


@pytest.fixture(scope="module")
def granule(tmp_path_factory):
    """An ATL03-like granule of ~8 MB: an 8 MiB page would more than double it."""
    return atl03.write_atl03(tmp_path_factory.mktemp("granule") / "atl03.h5", photons=50_000)


@pytest.fixture(scope="module")
def small_grid(tmp_path_factory):
    """The demo's GEOS-like grid (9 MB, 240 chunks of ~38 kB): no page keeps it within 5 %."""
    return geos.write_geos(tmp_path_factory.mktemp("grid") / "geos.nc", shape=(240, 91, 144))


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("v", data=np.arange(10_000.0), chunks=(1000,), compression="gzip")
    return path


def _overhead(tmp_path, source, page_size) -> float:
    summary = repack(source, tmp_path / f"copy-{page_size}.h5", page_size=page_size)
    return summary.size_overhead


def test_a_small_granule_gets_a_smaller_page_that_keeps_it_within_the_budget(granule, tmp_path):
    choice = choose_page_size(granule)
    assert not choice.skip and choice.page_size < 8 * MiB
    assert choice.page_size & (choice.page_size - 1) == 0 and choice.page_size >= 4096
    assert choice.predicted_overhead <= 0.05
    assert "5% budget" in choice.reason and "8MiB would add" in choice.reason
    measured = _overhead(tmp_path, granule, choice.page_size)
    assert measured <= 0.05
    # the choice mattered: 8 MiB pages break the budget, as predicted
    eight = next(p for p in choice.predictions if p.page_size == 8 * MiB)
    assert eight.overhead > 0.05 and _overhead(tmp_path, granule, 8 * MiB) > 0.05
    # the largest page within the budget: the next one up is over it
    larger = [p for p in choice.predictions if p.page_size == 2 * choice.page_size]
    assert all(p.overhead > 0.05 or p.metadata_pages >= page_budget.file_allocations(granule).metadata_regions
               for p in larger)


@pytest.mark.parametrize("page_size", [64 * 1024, MiB, 8 * MiB])
def test_the_predicted_size_is_the_size_of_the_copy(granule, tmp_path, page_size):
    """Within one page (the raw data is packed exactly as HDF5 packs it; the metadata is estimated)."""
    predicted = page_budget.predict(page_budget.file_allocations(granule), page_size).output_bytes
    actual = repack(granule, tmp_path / "copy.h5", page_size=page_size).output_bytes
    assert abs(predicted - actual) <= page_size, (predicted, actual)


def test_a_tiny_file_is_skipped_with_the_reason(tiny):
    choice = choose_page_size(tiny)
    assert choice.skip and choice.page_size is None
    assert "read whole by one request" in choice.reason
    assert choice.record()["page_size"] is None and choice.record()["page_size_choice"] == choice.reason


def test_a_file_whose_metadata_is_already_in_one_place_is_skipped(tmp_path):
    path = tmp_path / "contiguous.h5"
    with h5py.File(path, "w") as f:  # one header before one contiguous block of data
        f.create_dataset("v", data=np.random.default_rng(0).random(500_000))
    choice = choose_page_size(path)
    assert choice.skip and choice.reason.startswith("metadata already contiguous (in 1 region)")


def test_a_file_paged_already_is_not_paged_again(granule, tmp_path):
    first = choose_page_size(granule)
    paged = tmp_path / "paged.h5"
    repack(granule, paged, page_size=first.page_size)
    again = choose_page_size(paged)
    assert again.skip and "paged already" in again.reason, again.reason


def test_no_page_within_the_budget_is_skipped_and_a_larger_budget_finds_one(small_grid, tmp_path):
    choice = choose_page_size(small_grid)
    assert choice.skip and choice.reason.startswith("no page size meets the 5% budget")
    assert min(p.overhead for p in choice.predictions) > 0.05
    looser = choose_page_size(small_grid, "10%")
    assert not looser.skip and looser.predicted_overhead <= 0.10
    assert _overhead(tmp_path, small_grid, looser.page_size) <= 0.10


def test_a_rechunked_copy_never_gets_a_page_smaller_than_its_chunks(granule):
    choice = choose_page_size(granule, 0.5, target_chunk_bytes=MiB)
    assert all(p.page_size >= MiB for p in choice.predictions)


def test_a_file_that_is_not_hdf5_or_is_damaged_is_refused_naming_it(tmp_path, granule):
    from layoutlab.errors import BadInputFile

    text = tmp_path / "notes.txt"
    text.write_text("not hdf5\n" * 1000)
    with pytest.raises(BadInputFile, match="notes.txt"):
        choose_page_size(text)
    cut = tmp_path / "cut.h5"
    cut.write_bytes(granule.read_bytes()[: 2 * MiB])
    with pytest.raises(BadInputFile, match=r"cut\.h5: cannot be read to choose a page size \(truncated or damaged\)"):
        choose_page_size(cut)


@pytest.mark.parametrize("text, expected", [("5%", 0.05), (0.05, 0.05), ("0.05", 0.05), ("150%", 1.5), (0, 0.0)])
def test_budgets_as_fractions_or_percentages(text, expected):
    assert parse_budget(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", [5, "5", "-1%", "five", True, "nan"])
def test_a_budget_that_is_not_one_says_what_is_expected(text):
    with pytest.raises(ValueError, match="expected a fraction below 1|must not be negative"):
        parse_budget(text)


# --- plans ----------------------------------------------------------------------------------------

def test_a_plan_asks_for_auto_and_names_the_variant_after_it():
    plan = merge_plan({"variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "auto"},
                                    {"kind": "rechunked-paged", "page_size": "Auto", "size_budget": "2%",
                                     "target_chunk_bytes": 1048576}]})
    specs = {s["name"]: s for s in variant_specs(plan, DatasetFacts(kind="granule", beams=("gt1l",)))}
    assert specs["paged-auto"]["page_size"] == "auto" and specs["paged-auto"]["size_budget"] == 0.05
    assert specs["rechunked-paged-auto"]["size_budget"] == pytest.approx(0.02)


@pytest.mark.parametrize("variant, message", [
    ({"kind": "repack-paged", "page_size": "auto", "size_budget": 5}, r"variants\[1\]\.size_budget 5: expected"),
    ({"kind": "repack-paged", "page_size": "automatic"}, r"variants\[1\]\.page_size: not a size"),
    ({"kind": "repack-paged", "page_size": 3000}, r"must be \"auto\" or a power of two"),
])
def test_a_plan_with_a_bad_page_size_or_budget_is_refused_naming_the_field(variant, message):
    with pytest.raises(PlanError, match=message):
        merge_plan({"variants": [{"kind": "original"}, variant]})


# --- the VARIANT item -----------------------------------------------------------------------------

AUTO_SPEC = {"name": "paged-auto", "kind": "repack-paged", "format": "hdf5", "page_size": "auto",
             "size_budget": 0.05, "uri": "s3://outputs/variants/ds/paged-auto.h5"}


@pytest.fixture
def cloud():
    with pipeline_cloud() as (s3, store):
        yield s3, store


def test_an_auto_variant_records_the_page_chosen_and_its_overhead_against_the_budget(cloud, granule, tmp_path):
    s3, store = cloud
    convert_variant(uploaded_variant_task(s3, granule, AUTO_SPEC), s3=s3, store=store)
    item = store.get_variant("ds", "paged-auto")
    expected = choose_page_size(granule)
    assert item["status"] == "READY"
    assert item["page_size"] == expected.page_size and item["page_size_choice"] == expected.reason
    assert item["size_budget"] == 0.05 and item["within_budget"] is True
    stored = s3.head_object(Bucket="outputs", Key="variants/ds/paged-auto.h5")["ContentLength"]
    assert item["size_overhead"] == pytest.approx(stored / granule.stat().st_size - 1)
    assert item["size_overhead"] <= 0.05
    # the recipe reads the spec: the page made, and what was asked for
    assert item["spec"]["page_size"] == expected.page_size and item["spec"]["page_size_requested"] == "auto"
    s3.download_file("outputs", "variants/ds/paged-auto.h5", str(tmp_path / "v.h5"))
    with h5py.File(tmp_path / "v.h5") as f:
        assert f.id.get_create_plist().get_file_space_page_size() == expected.page_size


def test_an_explicit_page_over_the_budget_is_recorded_as_over(cloud, granule):
    s3, store = cloud
    spec = {**AUTO_SPEC, "name": "paged-8MiB", "page_size": 8 * MiB, "uri": "s3://outputs/variants/ds/p8.h5"}
    spec.pop("size_budget")
    convert_variant(uploaded_variant_task(s3, granule, spec), s3=s3, store=store)
    item = store.get_variant("ds", "paged-8MiB")
    assert item["page_size"] == 8 * MiB and item["page_size_choice"] == "set by the plan"
    assert item["size_budget"] == 0.05 and item["size_overhead"] > 0.05 and item["within_budget"] is False


def test_paging_that_cannot_help_is_skipped_not_failed_and_its_cases_are_not_measured(cloud, tiny):
    s3, store = cloud
    kerchunk = {"name": "kerchunk-paged-auto", "kind": "virtual-kerchunk", "format": "kerchunk", "over": "paged-auto",
                "uri": "s3://outputs/variants/ds/kerchunk-paged-auto.json"}
    done = convert_variant(uploaded_variant_task(s3, tiny, {**AUTO_SPEC, "derived": [kerchunk]}), s3=s3, store=store)
    assert done["status"] == "SKIPPED"
    item = store.get_variant("ds", "paged-auto")
    assert item["status"] == "SKIPPED" and item["page_size"] is None
    assert item["reason"].startswith("paging skipped: the file") and "one request" in item["page_size_choice"]
    over = store.get_variant("ds", "kerchunk-paged-auto")
    assert over["status"] == "SKIPPED" and over["reason"].startswith("references over paged-auto, which was not made")
    assert "Contents" not in s3.list_objects_v2(Bucket="outputs", Prefix="variants/")
    assert store.items(dataset="ds", kind="FAILURE") == []
    case = {"case_id": "paged-auto#granule-open-list#h5py-s3fs-default#local-lambda#000", "dataset_id": "ds",
            "dataset": "ds", "variant": "paged-auto", "format": "hdf5", "target": AUTO_SPEC["uri"],
            "pattern": "granule-open-list", "reader": "h5py-s3fs-default", "platform": "local-lambda",
            "platform_kind": "lambda", "repetition": 0}
    assert run_bench_case(BenchCase.from_event(case), store=store) == {"case_id": case["case_id"], "skipped": item["reason"]}
    assert store.items(dataset="ds", kind="RESULT") == []


# --- the command line -----------------------------------------------------------------------------

def test_repack_auto_prints_the_choice_and_the_predicted_and_measured_overhead(granule, tmp_path, capsys):
    out = tmp_path / "out.h5"
    assert cli.main(["repack", str(granule), str(out), "--page-size", "auto", "--no-verify"]) == 0
    text = capsys.readouterr().out
    chosen = choose_page_size(granule)
    assert text.startswith(f"page size {chosen.reason}\n")
    measured = out.stat().st_size / granule.stat().st_size - 1
    assert f"size: predicted {chosen.predicted_overhead:+.1%}, measured {measured:+.1%} (within the 5% budget)" in text
    with h5py.File(out) as f:
        assert f.id.get_create_plist().get_file_space_page_size() == chosen.page_size


def test_repack_auto_json_and_a_budget_option(granule, tmp_path, capsys):
    assert cli.main(["repack", str(granule), str(tmp_path / "o.h5"), "--page-size", "auto", "--size-budget", "50%",
                     "--no-verify", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["size_budget"] == 0.5 and summary["within_budget"] is True
    assert summary["page_size"] == choose_page_size(granule, 0.5).page_size and summary["page_size_choice"]


def test_repack_auto_on_a_tiny_file_writes_nothing_and_exits_3(tiny, tmp_path, capsys):
    out = tmp_path / "out.h5"
    assert cli.main(["repack", str(tiny), str(out), "--page-size", "auto"]) == 3
    assert "paging skipped" in capsys.readouterr().out and not out.exists()


def test_an_explicit_page_says_when_it_is_over_the_budget(granule, tmp_path, capsys):
    assert cli.main(["repack", str(granule), str(tmp_path / "o.h5"), "--page-size", "8MiB", "--no-verify"]) == 0
    assert "is OVER the 5% budget; --page-size auto picks" in capsys.readouterr().out


def test_a_bad_budget_is_one_line_naming_the_option(granule, tmp_path, capsys):
    assert cli.main(["repack", str(granule), str(tmp_path / "o.h5"), "--page-size", "auto", "--size-budget", "5"]) == 2
    assert capsys.readouterr().err.strip() == ("layoutlab repack: error: --size-budget '5': expected a fraction "
                                               "below 1 (0.05) or a percentage (5%)")
