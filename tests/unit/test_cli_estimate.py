"""`layoutlab estimate`: help with an example, and one-line errors for bad arguments."""

from __future__ import annotations

import pytest

from layoutlab import cli


def test_help_explains_with_an_example(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["estimate", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "layoutlab estimate --shape 5136,721,1152 --dtype f4 --grid seed" in out
    assert "--concurrency" in out and "measured" in out


@pytest.mark.parametrize("shape", ["5136,721", "5136,0,1152", "a,b,c"])
def test_a_bad_shape_is_a_one_line_error(shape, capsys):
    assert cli.main(["estimate", "--shape", shape]) == 2
    err = capsys.readouterr().err
    assert err.startswith("layoutlab estimate: error: --shape:") and err.count("\n") == 1


def test_a_bad_dtype_or_platform_is_named(capsys):
    assert cli.main(["estimate", "--shape", "full", "--dtype", "float99"]) == 2
    assert "--dtype: 'float99' is not a numpy dtype" in capsys.readouterr().err
    assert cli.main(["estimate", "--shape", "full", "--platform", "lambda-99999"]) == 2
    assert "Lambda memory must be" in capsys.readouterr().err


def test_missing_results_say_what_to_run(tmp_path, capsys):
    assert cli.main(["estimate", "--shape", "full", "--results", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert "none.json: no kept results here: run 'layoutlab demo'" in err


def _table(path, rows=25_000):
    import h5py
    import numpy as np

    with h5py.File(path, "w") as f:
        group = f.create_group("beam")
        group["latitude"] = np.linspace(-80, 80, rows).astype("f8")
        group["latitude"].attrs["units"] = "degrees_north"
        group["height"] = np.arange(rows, dtype="f4")
        group["quality"] = np.zeros(rows, dtype="i2")
    return path


def test_estimate_file_counts_the_plans_cases_and_times_each_copy_from_the_measured_rates(tmp_path, capsys):
    import json

    from layoutlab.report.estimate import REPO_RESULTS, fit_rechunk_rate, rechunk_observations, rechunk_seconds

    path = _table(tmp_path / "table.h5")
    assert cli.main(["plan", str(path), "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert cli.main(["estimate", str(path), "--json"]) == 0
    estimate = json.loads(capsys.readouterr().out)
    assert estimate["role"] == "table" and estimate["cases_first_round"] == len(planned["cases"])
    assert estimate["cases_at_most"] == len(planned["cases"]) * 7 // 3  # the default plan: 3, up to 7 repetitions
    assert [v["variant"] for v in estimate["variants"]] == planned["variants"]
    rows = {v["variant"]: v for v in estimate["variants"]}
    # 25,000 rows in chunks of 10^4: three chunks for each of the three arrays; 10^5 and 10^6 make one layout
    assert rows["zarr-rows1e4"]["chunks_written"] == 9 and rows["zarr-rows25000"]["chunks_written"] == 3
    assert "zarr-rows1e5" not in rows
    rate = fit_rechunk_rate(rechunk_observations(sorted(REPO_RESULTS.glob("rechunk*.json"))))
    declared = 25_000 * (8 + 4 + 2) / 2**20
    assert rows["zarr-rows1e4"]["convert_s"] == pytest.approx(rechunk_seconds(rate, declared, 9))
    assert rows["paged-auto"]["convert_s"] > 0 and rows["paged-auto"]["stored_bytes"] >= path.stat().st_size
    assert rows["kerchunk-original"]["convert_s"] is None  # references: no measured rate, none invented
    assert cli.main(["estimate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "zarr-rows1e4" in out and f"{len(planned['cases'])} benchmark cases in the first round" in out


def test_estimate_takes_a_file_or_a_shape_not_both(tmp_path, capsys):
    path = _table(tmp_path / "table.h5", rows=100)
    assert cli.main(["estimate", str(path), "--shape", "full"]) == 2
    assert "give FILE or --shape, not both" in capsys.readouterr().err
    assert cli.main(["estimate", str(tmp_path / "absent.h5")]) == 2
    assert "absent.h5: no such file" in capsys.readouterr().err
