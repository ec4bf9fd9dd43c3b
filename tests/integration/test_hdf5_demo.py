"""`layoutlab demo`: the interim main job runs end to end and says what is not there yet."""

from __future__ import annotations

import json

import pytest

from layoutlab import cli


@pytest.mark.slow
def test_demo_runs_sample_inspect_repack_inspect(tmp_path, capsys):
    assert cli.main(["demo", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "before / after" in out and "PAGE 8 MiB" in out
    assert "local pipeline" in out and "not there yet" in out
    after = json.loads((tmp_path / "atl03-paged.inspect.json").read_text())
    assert after["hdf5"]["file_space"]["paged"] and after["hdf5"]["compact_datasets"]["count"] == 0
    summary = json.loads((tmp_path / "geos-paged.repack.json").read_text())
    assert summary["verified"] and summary["unlimited_fixed"] == ["/time", "/BCEXTTAU"]
