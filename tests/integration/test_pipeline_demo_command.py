"""`layoutlab demo` end to end at the smallest useful size: samples, pipeline, table, report, kept results."""

from __future__ import annotations

import json

import pytest

from layoutlab import cli
from layoutlab.local.pipeline import snapshot_path

pytestmark = pytest.mark.slow

TINY_PLAN = {
    "name": "tiny",
    "variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "1MiB"}],
    "patterns": {"grid": ["map-timestep"], "granule": ["beam-read"]},
    "readers": {"hdf5": ["h5py-s3fs-aligned"], "zarr": ["zarr-obstore"]},
    "platforms": ["local-lambda"],
    "repetitions": 1,
}


def test_demo_runs_the_pipeline_prints_results_and_keeps_them(tmp_path, capsys):
    plan = tmp_path / "tiny.json"
    plan.write_text(json.dumps(TINY_PLAN))
    code = cli.main(["demo", "--workdir", str(tmp_path / "out"), "--plan", str(plan), "--geos-shape", "12,10,16",
                     "--photons", "2000", "--reset"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "incoming/geos-sample.nc: started" in out and "incoming/atl03-sample.h5: started" in out
    assert out.count("SUCCEEDED") == 2
    assert "map-timestep" in out and "beam-read" in out
    report = (tmp_path / "out" / "report.md").read_text()
    assert "paged-1MiB" in report and "| variant |" in report
    page = tmp_path / "out" / "report.html"
    assert f"{page}" in out  # the demo prints where its HTML report is
    html = page.read_text()
    assert html.count('class="dataset"') == 2 and html.count('class="recommendation"') == 2
    assert html.count('src="data:image/png;base64,') == len(list((tmp_path / "out" / "report_files").glob("*.png"))) > 0
    kept = json.loads(snapshot_path().read_text())
    assert sum(1 for i in kept if i["kind"] == "RESULT") == 2 * 1 + 2 * 1  # each dataset: 2 variants x 1 pattern

    # afterwards, with no cloud running, the kept results still answer
    assert cli.main(["results", "--format", "json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert {r["pattern"] for r in results} == {"map-timestep", "beam-read"}


def test_demo_refuses_a_missing_file_before_starting_anything(tmp_path, capsys):
    assert cli.main(["demo", "--workdir", str(tmp_path), str(tmp_path / "nope.h5")]) == 2
    assert "nope.h5: no such file" in capsys.readouterr().err
