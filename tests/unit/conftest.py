"""Fixtures the unit tests share."""

from __future__ import annotations

import pytest


@pytest.fixture
def store(monkeypatch):
    """The results table in moto's in-process DynamoDB (a test module may define its own ``store`` instead)."""
    from moto import mock_aws

    from layoutlab.results.store import ResultsStore

    with mock_aws():
        table = ResultsStore("results-test")
        table.create_table()
        monkeypatch.setenv("LAYOUTLAB_RESULTS_TABLE", "results-test")
        yield table
