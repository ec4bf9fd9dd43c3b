"""The decision gives, word for word, what it gave before its rules were rewritten (issue 26): the same
recommendation sentence, choice, comparisons and costs for the same records. The record sets are the ones
the report and decision unit tests pass to ``decide`` and seeded variations of them that make every rule
fire (tests/unit/data/make_decision_cases.py wrote them and the answers)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from layoutlab.report.decision import decide

CASES = json.loads(gzip.decompress((Path(__file__).parent / "data" / "decision_cases.json.gz").read_bytes()))


def _answer(inputs: dict) -> dict:
    options = {k: v for k, v in inputs.items() if k != "records"}
    return json.loads(json.dumps(decide(inputs["records"], **options)))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_same_records_get_the_same_decision(case):
    inputs, pinned = CASES[case]["inputs"], CASES[case]["decided"]
    answer = _answer(inputs)
    for platform, result in pinned["platforms"].items():
        assert answer["platforms"][platform]["sentence"] == result["sentence"]
        assert answer["platforms"][platform]["choice"] == result["choice"]
    assert answer == pinned


def test_the_pinned_cases_cover_every_rule():
    """Each rule of the decision decides at least one pinned case (else the pin proves nothing about it)."""
    whys = [r["choice"] for c in CASES for r in c["decided"]["platforms"].values() if r["choice"]]
    assert any("at least as good on every axis" in c["why"] for c in whys)
    assert any(c["why"].startswith("it reads measurably faster than") for c in whys)
    assert any(c["no_measurable_difference"] for c in whys)
    assert any(c.get("cheaper_than") for c in whys)
    assert any(c.get("unseparated") for c in whys)
