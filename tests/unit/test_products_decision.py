"""A product's decision from its studied granules, a person's override, production counts and drift (issue 35)."""

from __future__ import annotations

import pytest
from moto import mock_aws

from layoutlab import cli
from layoutlab.products import decision, flow, state

PLATFORM = "local-lambda"


def summary(dataset, chose, walls, sizes=None):
    """A SUMMARY as report/summary.py writes it: walls = {pattern: {variant: s}}."""
    return {"dataset": dataset, "choice": {PLATFORM: {"variant": chose}},
            "platforms": {PLATFORM: {"patterns": {p: {"wall_s_by_variant": w} for p, w in walls.items()}}},
            "variants": {v: {"size_bytes": n} for v, n in (sizes or {}).items()},
            "recipe": {PLATFORM: {"text": f"# {PLATFORM}: keep {chose}"}}}


def test_the_product_keeps_the_majority_choice_with_its_ratio_interval_across_granules():
    summaries = [
        summary("g1", "paged", {"a": {"original": 2.0, "paged": 1.0}, "b": {"original": 1.0, "paged": 0.5}},
                {"original": 100, "paged": 104}),
        summary("g2", "paged", {"a": {"original": 2.0, "paged": 1.6}}),
        summary("g3", "zarr", {"a": {"original": 2.0, "paged": 1.2, "zarr": 0.4}}),
    ]
    decided = decision.product_decision(summaries)
    assert decided["variant"] == "paged" and decided["votes"] == {"paged": 2, "zarr": 1}
    assert decided["interval"] == pytest.approx([0.5, 0.8])
    assert [g["ratio"] for g in decided["per_granule"]] == pytest.approx([0.5, 0.8, 0.6])
    assert decided["per_granule"][0]["size_ratio"] == pytest.approx(1.04)
    assert decided["recipe"] == f"# {PLATFORM}: keep paged" and "2 of 3" in decided["why"]


def test_a_tie_goes_to_the_variant_faster_against_the_original():
    summaries = [summary("g1", "zarr", {"a": {"original": 1.0, "paged": 0.9, "zarr": 0.5}}),
                 summary("g2", "paged", {"a": {"original": 1.0, "paged": 0.8, "zarr": 0.6}})]
    assert decision.product_decision(summaries)["variant"] == "zarr"


def test_drift_is_a_ratio_beyond_the_interval_widened_by_the_tolerance():
    decided = {"variant": "paged", "interval": [0.5, 0.8]}
    assert decision.drift(decided, 0.85, 0.1) is None
    assert "above" in decision.drift(decided, 0.9, 0.1)
    assert "below" in decision.drift(decided, 0.4, 0.1)
    assert decision.drift({"variant": "paged", "interval": None}, 5.0, 0.1) is None


def _study(store, name, n=2):
    settings = state.ProductSettings(study_granules=n, check_every=2)
    walls = [{"a": {"original": 2.0, "paged": 1.0}}, {"a": {"original": 2.0, "paged": 1.4}}]
    for i in range(n):
        dataset = f"g{i}"
        # (sizes 100, 120, ...: more than 10% apart, so none waits for a granule of another size)
        state.admit(store, name, dataset, size=100 + 20 * i, signature="sig-x", named_by="uploader", settings=settings)
        store.put_run(dataset, product=name, product_role="study", study_round=1)
        s = summary(dataset, "paged", walls[i % 2])
        store.put_summary(dataset, s)
        assert state.get_product(store, name)["state"] == "studying"
        flow.after_summary(dataset, store.items(dataset=dataset), s, store=store)
    return settings


def test_the_decision_is_made_once_the_round_s_granules_are_summarized(store):
    settings = _study(store, "P")
    product = state.get_product(store, "P")
    assert product["state"] == "decided" and product["decision"]["variant"] == "paged"
    assert product["decision"]["interval"] == pytest.approx([0.5, 0.7])
    assert product["history"][-1]["by"] == "layoutlab" and product["study_count"] == 2
    nxt = state.admit(store, "P", "g9", size=50, signature="sig-x", named_by="uploader", settings=settings)
    assert nxt.role == "production"


def test_a_person_overrides_with_who_and_why_and_cannot_pick_an_unmeasured_variant(store, capsys, monkeypatch):
    from layoutlab.commands import product as command

    _study(store, "P")
    monkeypatch.setattr(command, "_store", lambda args: store)  # (mock_aws answers no explicit endpoint)
    assert cli.main(["product", "decide", "P", "--variant", "original", "--reason",
                     "readers want the file as shipped", "--by", "ana"]) == 0
    assert "override original by ana" in capsys.readouterr().out
    item = state.get_product(store, "P")
    assert item["decision"]["variant"] == "original" and item["decision"]["interval"] == [1.0, 1.0]
    assert item["history"][-1] == {**item["history"][-1], "event": "override", "by": "ana",
                                   "reason": "readers want the file as shipped", "variant": "original"}
    with pytest.raises(state.ProductError, match="not measured"):
        flow.decide_by_person(store, "P", "zarr-nope", by="ana", reason="")
    assert cli.main(["product", "show", "P"]) == 0
    shown = capsys.readouterr().out
    assert "override: original by ana: readers want" in shown and "g1: study #2 STUDIED" in shown


def test_production_granules_count_bytes_and_a_drifting_check_sends_the_product_back_to_study(store):
    settings = _study(store, "P")
    first = state.admit(store, "P", "p1", size=100, signature="sig-x", named_by="uploader", settings=settings)
    assert first.role == "production"
    store.put_run("p1", product="P", product_role="production", study_round=1, variants=["paged"])
    store.put_variant("p1", "paged", variant_kind="repack-paged", status="READY", size_bytes=90, convert_s=1.5,
                      uri="s3://out/products/P/p1/paged.h5")
    done = flow.finish_production("p1", store.items(dataset="p1"), store=store)
    assert done["status"] == "CONVERTED"
    product = state.get_product(store, "P")
    assert (product["state"], product["bytes_in"], product["bytes_out"]) == ("production", 320, 90)
    check = state.admit(store, "P", "p2", size=100, signature="sig-x", named_by="uploader", settings=settings)
    assert check.role == "check"
    store.put_run("p2", product="P", product_role="check", study_round=1)
    slow = summary("p2", "original", {"a": {"original": 2.0, "paged": 3.0}})
    judged = flow.after_summary("p2", store.items(dataset="p2"), slow, store=store)
    assert judged["ratio"] == pytest.approx(1.5) and "above the decided interval" in judged["drift"]
    product = state.get_product(store, "P")
    assert product["state"] == "studying" and product["study_round"] == 2 and "drift check on p2" in product["restudy_reason"]
    assert state.admit(store, "P", "p3", size=1, signature="sig-x", named_by="uploader", settings=settings).role == "study"


def test_a_failed_study_granule_frees_its_slot(store):
    settings = state.ProductSettings(study_granules=1)
    state.admit(store, "P", "g0", size=1, signature=None, named_by="uploader", settings=settings)
    store.put_run("g0", product="P", product_role="study", study_round=1)
    with pytest.raises(state.ProductStudying):
        state.admit(store, "P", "g1", size=1, signature=None, named_by="uploader", settings=settings)
    flow.after_failure("g0", "convert: boom", store=store)
    assert state.admit(store, "P", "g1", size=1, signature=None, named_by="uploader", settings=settings).role == "study"


def test_the_estimate_scales_the_measured_conversion_and_prices_the_study_and_storage(store, capsys, monkeypatch):
    from layoutlab.commands import product as command
    from layoutlab.products import estimate
    from layoutlab.report.cost import load_prices

    settings = _study(store, "P")
    store.put_result({"dataset": "g0", "variant": "original", "pattern": "a", "reader": "r", "platform": "lambda-1024",
                      "repetition": 0, "wall_s": 2.0})
    store.put_variant("g0", "paged", variant_kind="repack-paged", status="READY", size_bytes=110, source_bytes=100,
                      convert_s=4.0, platform="lambda-1024")
    state.admit(store, "P", "p1", size=1000, signature="sig-x", named_by="uploader", settings=settings)
    store.put_run("p1", product="P", product_role="production", study_round=1, variants=["paged"])
    store.put_variant("p1", "paged", variant_kind="repack-paged", status="READY", size_bytes=900, convert_s=10.0,
                      platform="lambda-2048", uri="s3://out/products/P/p1/paged.h5")
    flow.finish_production("p1", store.items(dataset="p1"), store=store)
    prices = load_prices()
    found = estimate.product_estimate(state.get_product(store, "P"), state.granules(store, "P"),
                                      {d: store.items(dataset=d) for d in ("g0", "g1")}, count=1000,
                                      granule_bytes=2000, prices=prices)
    gb_s = prices["lambda"]["usd_per_gb_second"]
    assert found["conversion"]["seconds_per_granule"] == pytest.approx(20.0)  # 10 s per 1,000 bytes, measured
    assert found["conversion"]["output_ratio"] == pytest.approx(0.9)
    assert found["conversion"]["usd"] == pytest.approx(1000 * (2 * 20 * gb_s + 0.2e-6))
    study = (4.0 * gb_s + 0.2e-6) + (1 * 2.0 * gb_s + 0.2e-6)  # the study's conversion and its one case
    assert found["study_usd"] == pytest.approx(study)
    assert found["drift_checks"]["granules"] == 500
    assert found["storage_usd_per_month"]["converted"] == pytest.approx(
        0.9 * found["storage_usd_per_month"]["originals"])
    monkeypatch.setattr(command, "_store", lambda args: store)
    assert cli.main(["estimate", "--product", "P", "--granules", "1000", "--granule-size", "2000"]) == 0
    assert "product P: 1000 granules" in capsys.readouterr().out
