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
