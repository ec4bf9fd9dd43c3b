"""Products: a granule's product (its structure's signature, or the uploader's name), the PRODUCT item's
state, study slots and production numbers (issue 35)."""

from __future__ import annotations

import pytest

from layoutlab.products import signature, state
from layoutlab.samples import atl03, geos


def test_signature_is_stable_across_granules_of_one_product_and_differs_across_products(tmp_path):
    small = geos.write_geos(tmp_path / "a.nc", shape=(4, 19, 36))
    large = geos.write_geos(tmp_path / "b.nc", shape=(9, 31, 40), seed=3)
    track = atl03.write_atl03(tmp_path / "t.h5", photons=2000)
    longer = atl03.write_atl03(tmp_path / "u.h5", photons=5000, seed=2)
    assert signature.file_signature(str(small)) == signature.file_signature(str(large))
    assert signature.file_signature(str(track)) == signature.file_signature(str(longer))
    assert signature.file_signature(str(small)) != signature.file_signature(str(track))
    assert signature.file_signature(str(small)).startswith("sig-")


def test_signature_changes_with_a_variable_or_a_type(tmp_path):
    import h5py
    import numpy as np

    def write(path, dtype, extra=False):
        with h5py.File(path, "w") as f:
            f["x"] = np.arange(10, dtype="f8")
            f["x"].make_scale("x")
            f["v"] = np.zeros(10, dtype=dtype)
            f["v"].dims[0].attach_scale(f["x"])
            if extra:
                f["w"] = np.zeros(10, dtype=dtype)
        return str(path)

    base = signature.file_signature(write(tmp_path / "a.h5", "f4"))
    assert signature.file_signature(write(tmp_path / "b.h5", "f8")) != base
    assert signature.file_signature(write(tmp_path / "c.h5", "f4", extra=True)) != base
    assert signature.file_signature(write(tmp_path / "d.h5", "f4")) == base


def test_the_uploader_names_the_product_by_folder_or_metadata():
    assert signature.named_product("incoming/MERRA2/day1.nc") == "MERRA2"
    assert signature.named_product("incoming/day1.nc") is None
    assert signature.named_product("incoming/ünïcødé/数据.nc") is None  # a folder, not a product name
    assert signature.named_product("incoming/with space/a.nc") is None
    assert signature.named_product("incoming/a/b.nc", {"layoutlab-product": "GEOS-FP"}) == "GEOS-FP"
    with pytest.raises(signature.ProductNameError, match="layoutlab-product"):
        signature.named_product("incoming/x.nc", {"layoutlab-product": "../etc"})


def test_first_granules_take_study_slots_then_the_product_waits_for_its_decision(store):
    settings = state.ProductSettings(study_granules=2, check_every=3)
    first = state.admit(store, "P", "g1", size=100, signature="sig-a", named_by="structure", settings=settings)
    second = state.admit(store, "P", "g2", size=200, signature="sig-a", named_by="structure", settings=settings)
    assert (first.role, first.number, second.role, second.number) == ("study", 1, "study", 2)
    again = state.admit(store, "P", "g1", size=100, signature="sig-a", named_by="structure", settings=settings)
    assert again.again and again.role == "study"
    with pytest.raises(state.ProductStudying, match="g3 waits"):
        state.admit(store, "P", "g3", size=1, signature="sig-a", named_by="structure", settings=settings)
    product = state.get_product(store, "P")
    assert product["state"] == "studying" and product["granules"] == 2 and product["bytes_in"] == 300
    assert product["studying"] == ["g1", "g2"]


def test_a_decided_product_numbers_its_granules_and_checks_every_kth(store):
    settings = state.ProductSettings(study_granules=1, check_every=3)
    state.admit(store, "P", "g0", size=1, signature=None, named_by="uploader", settings=settings)
    assert state.set_decision(store, "P", {"variant": "paged", "interval": [0.5, 0.7]}, event="decided",
                              by="layoutlab", reason="study", round_=1)
    roles = [state.admit(store, "P", f"g{i}", size=10, signature=None, named_by="uploader", settings=settings).role
             for i in range(1, 7)]
    assert roles == ["production", "production", "check", "production", "production", "check"]
    product = state.get_product(store, "P")
    assert product["production_granules"] == 6 and product["granules"] == 7 and product["bytes_in"] == 61
    assert product["state"] == "decided" and [h["event"] for h in product["history"]] == ["decided"]
    # a retried admission counts nothing twice
    state.admit(store, "P", "g3", size=10, signature=None, named_by="uploader", settings=settings)
    assert state.get_product(store, "P")["production_granules"] == 6


def test_a_granule_of_another_structure_sends_a_decided_product_back_to_study(store):
    settings = state.ProductSettings(study_granules=1)
    state.admit(store, "P", "g0", size=1, signature="sig-a", named_by="uploader", settings=settings)
    state.set_decision(store, "P", {"variant": "paged"}, event="decided", by="layoutlab", reason="", round_=1)
    admitted = state.admit(store, "P", "g1", size=1, signature="sig-b", named_by="uploader", settings=settings)
    product = state.get_product(store, "P")
    assert admitted.role == "study" and product["study_round"] == 2 and product["state"] == "studying"
    assert "another structure" in product["restudy_reason"]


def test_results_kind_product_shows_one_row_per_product(store, capsys):
    settings = state.ProductSettings(study_granules=1)
    for name in ("A", "B"):
        state.admit(store, name, f"{name}-g", size=5, signature=None, named_by="uploader", settings=settings)
    state.set_decision(store, "A", {"variant": "paged-8MiB", "interval": [0.4, 0.6], "why": "1 of 1"},
                       event="decided", by="layoutlab", reason="study", round_=1)
    from layoutlab.commands.results import format_items

    text = format_items(store.items(kind="PRODUCT"), "table")
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["product", "state", "study_round"] and len(lines) == 4
    assert "paged-8MiB" in lines[2] and "0.4-0.6" in lines[2] and "studying" in lines[3]
