"""`layoutlab demo`'s console output fits a 160-column terminal: a failure's long reason is cut there
(whole in report.md), a long recommendation is wrapped."""

from __future__ import annotations

from layoutlab.commands import demo
from layoutlab.report import tables

LONG_REASON = "s3://layoutlab-local-ingest/incoming/x.h5: " + "a reason that goes on and on " * 20


class FakeStore:
    def __init__(self, items):
        self._items = items

    def items(self, dataset=None):
        return [i for i in self._items if i["dataset"] == dataset]


class FakePipeline:
    def __init__(self, items):
        self.store = FakeStore(items)


def test_failures_and_recommendations_fit_160_columns_and_the_report_keeps_them_whole(tmp_path, capsys):
    items = [
        {"dataset": "x-h5-0123456789abcdef", "kind": "FAILURE", "stage": "bench", "detail": "case 7",
         "reason": LONG_REASON},
        {"dataset": "x-h5-0123456789abcdef", "kind": "SUMMARY", "recommendation": "keep the original: " + "why " * 80},
    ]
    running = [{"key": "incoming/x.h5", "dataset_id": "x-h5-0123456789abcdef"}]
    demo.report(FakePipeline(items), running, {"x-h5-0123456789abcdef": "SUCCEEDED"}, tmp_path, tables)
    printed = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in printed) <= demo.CONSOLE_COLUMNS
    assert any("whole line in report.md" in line for line in printed)
    assert LONG_REASON in (tmp_path / "report.md").read_text()
    assert sum("why" in line for line in printed) > 1  # wrapped, not cut
