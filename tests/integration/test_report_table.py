"""`layoutlab report` reads the DynamoDB results table (here moto's, on 127.0.0.1) with the same
store code as `layoutlab results`, and reports every dataset in it, or one."""

from __future__ import annotations

import re

from layoutlab import cli
from layoutlab.results.store import ResultsStore
import report_records as rr  # tests/report_records.py (pytest pythonpath)

TABLE = "layoutlab-reporttest-results"



def test_report_from_the_results_table(cloud, tmp_path, capsys):
    store = ResultsStore(table_name=TABLE, endpoint_url=cloud.moto_endpoint)
    store.create_table()
    for item in rr.all_items():
        fields = {k: v for k, v in item.items() if k not in ("kind", "dataset")}
        if item["kind"] == "RUN":
            store.put_run(item["dataset"], **fields)
        elif item["kind"] == "VARIANT":
            store.put_variant(item["dataset"], fields.pop("variant"), **fields)
        elif item["kind"] == "FAILURE":
            store.put_failure(item["dataset"], fields.pop("stage"), fields.pop("detail"), fields.pop("reason"), **fields)
        else:
            store.put_result(item)

    out = tmp_path / "table.html"
    assert cli.main(["report", "--endpoint", cloud.moto_endpoint, "--table", TABLE, "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert f"table {TABLE} at {cloud.moto_endpoint}" in printed.err
    sections = re.findall(r'class="dataset" data-dataset="([^"]+)"', out.read_text())
    assert sections == [rr.GRANULE, rr.GRID]
    assert "a &lt;reason&gt; with markup" in out.read_text()  # the FAILURE item came through

    assert cli.main(["report", "--endpoint", cloud.moto_endpoint, "--table", TABLE, "--dataset", rr.GRANULE,
                     "--out", str(out)]) == 0
    assert re.findall(r'class="dataset" data-dataset="([^"]+)"', out.read_text()) == [rr.GRANULE]

    assert cli.main(["report", "--endpoint", cloud.moto_endpoint, "--table", "no-such-table",
                     "--out", str(out)]) == 2
    assert "results table 'no-such-table' not found" in capsys.readouterr().err
