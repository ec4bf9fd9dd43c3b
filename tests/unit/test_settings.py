"""Every LAYOUTLAB_* environment variable is declared once, in layoutlab/settings.py, and read only through
it; a bad value is one line naming the variable and why, at start."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from layoutlab import cli, settings

REPO_ROOT = Path(__file__).resolve().parents[2]
# The code that runs or deploys layoutlab (the tests' own knobs are the suite's business).
CODE = ("functions", "cdk", "layers", "benchmarks")
NAME = re.compile(r"\bLAYOUTLAB_[A-Z0-9_]+\b")
# Read without layoutlab.settings, on purpose: the bootstrap of a local task reads where the layer is
# before layoutlab can be imported at all.
RAW_READS = {("functions/layoutlab/local/runtime_bootstrap.py", "LAYOUTLAB_LAYER_ROOT")}


def code_files() -> list[Path]:
    files = []
    for top in CODE:
        files += [p for p in (REPO_ROOT / top).rglob("*.py") if "build" not in p.relative_to(REPO_ROOT).parts]
    return sorted(files) + [REPO_ROOT / "cdk" / "container" / "Dockerfile", REPO_ROOT / "stepfunctions" / "pipeline.asl.json"]


def named_variables(source: str, path: str = "<source>") -> tuple[set[str], list[str]]:
    """Every LAYOUTLAB_* name a Python source writes as a string, and the names it builds at run time
    (an f-string starting LAYOUTLAB_: no declaration can cover those)."""
    names, built = set(), []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            names |= {m for m in NAME.findall(node.value) if m != "LAYOUTLAB_"}
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) \
                and str(node.values[0].value).startswith("LAYOUTLAB_") and len(node.values) > 1:
            built.append(f"{path}:{node.lineno}")
    return names, built


def environment_reads(source: str) -> list[tuple[int, str]]:
    """(line, name) of every LAYOUTLAB_* variable read from the environment directly: os.environ[...],
    os.environ.get(...), os.getenv(...), environ.get(...), through a literal or a module constant."""
    tree = ast.parse(source)
    constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for target in node.targets if isinstance(target, ast.Name)}

    def name_of(expression) -> str | None:
        if isinstance(expression, ast.Constant) and isinstance(expression.value, str):
            value = expression.value
        elif isinstance(expression, ast.Name):
            value = constants.get(expression.id, "")
        else:
            return None
        return value if value.startswith("LAYOUTLAB_") else None

    def is_environ(expression) -> bool:
        return (isinstance(expression, ast.Attribute) and expression.attr == "environ") or \
            (isinstance(expression, ast.Name) and expression.id in ("environ", "env"))

    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_environ(node.value):
            found = name_of(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args and (
                (node.func.attr == "get" and is_environ(node.func.value)) or node.func.attr == "getenv"):
            found = name_of(node.args[0])
        else:
            continue
        if found:
            reads.append((node.lineno, found))
    return reads


def test_every_layoutlab_variable_in_the_code_is_declared_once():
    undeclared, built = {}, []
    for path in code_files():
        relative = str(path.relative_to(REPO_ROOT))
        text = path.read_text()
        if path.suffix == ".py":
            names, dynamic = named_variables(text, relative)
            built += dynamic
        else:
            names = set(NAME.findall(text))
        for name in names - set(settings.VARIABLES):
            undeclared.setdefault(name, []).append(relative)
    assert not undeclared, f"read or set but not declared in layoutlab/settings.py: {undeclared}"
    assert not built, f"LAYOUTLAB_* names built at run time (declare each one instead): {built}"
    assert len(settings._DECLARED) == len(settings.VARIABLES)  # no name declared twice


def test_only_the_settings_module_reads_them_from_the_environment():
    direct = []
    for path in code_files():
        relative = str(path.relative_to(REPO_ROOT))
        if path.suffix != ".py" or relative == "functions/layoutlab/settings.py":
            continue
        direct += [f"{relative}:{line} {name}" for line, name in environment_reads(path.read_text())
                   if (relative, name) not in RAW_READS]
    assert not direct, "read LAYOUTLAB_* through layoutlab.settings.value(), not the environment: " + ", ".join(direct)


def test_the_checks_find_what_they_look_for():
    """The scanners themselves, on code that breaks each rule."""
    source = ('import os\nPAYLOAD = "LAYOUTLAB_NEW_THING"\nos.environ.get("LAYOUTLAB_STALL_SECONDS")\n'
              'os.environ[PAYLOAD]\nos.getenv("LAYOUTLAB_X")\nname = f"LAYOUTLAB_{kind.upper()}"\n'
              'os.environ["LAYOUTLAB_SET"] = "1"\n')
    names, built = named_variables(source)
    assert {"LAYOUTLAB_NEW_THING", "LAYOUTLAB_STALL_SECONDS", "LAYOUTLAB_X", "LAYOUTLAB_SET"} <= names
    assert built == ["<source>:6"]
    assert environment_reads(source) == [(3, "LAYOUTLAB_STALL_SECONDS"), (4, "LAYOUTLAB_NEW_THING"), (5, "LAYOUTLAB_X")]


def test_every_variable_says_what_it_is_for():
    for variable in settings.VARIABLES.values():
        assert variable.meaning and variable.set_by in ("cdk", "user", "local"), variable.name
        assert settings.value(variable.name, {}) == variable.default


@pytest.mark.parametrize("name, raw, why", [
    ("LAYOUTLAB_STALL_SECONDS", "soon", "LAYOUTLAB_STALL_SECONDS='soon': expected a number"),
    ("LAYOUTLAB_MAX_INPUT_BYTES", "5GB", "LAYOUTLAB_MAX_INPUT_BYTES='5GB': expected a whole number"),
    ("LAYOUTLAB_FASTCOPY", "no", "LAYOUTLAB_FASTCOPY='no': expected 0 (off) or 1 (on)"),
    ("LAYOUTLAB_BENCH_CHILD", "fork", "LAYOUTLAB_BENCH_CHILD='fork': expected one of auto, interpreter"),
    ("LAYOUTLAB_PLATFORMS", "[1]", "LAYOUTLAB_PLATFORMS='[1]': expected a JSON object"),
    ("LAYOUTLAB_MAX_CONCURRENCY", '{"bench": 0}', "LAYOUTLAB_MAX_CONCURRENCY='{\"bench\": 0}': expected {stage: "
     "whole number >= 1} with stage one of convert, work_units, bench"),
    ("LAYOUTLAB_CEILINGS", "{", "LAYOUTLAB_CEILINGS: not JSON"),
    ("LAYOUTLAB_TASK_PAYLOAD", "{", "LAYOUTLAB_TASK_PAYLOAD='{': not JSON"),
])
def test_a_bad_value_is_one_line_naming_the_variable_and_why(name, raw, why):
    [problem] = settings.problems({name: raw})
    assert problem.startswith(why) and "\n" not in problem
    with pytest.raises(settings.SettingError, match=re.escape(why)):
        settings.value(name, {name: raw})


def test_values_are_typed_and_empty_means_the_default():
    environ = {"LAYOUTLAB_STALL_SECONDS": "2.5", "LAYOUTLAB_NO_GUARD": "1", "LAYOUTLAB_FASTCOPY": "",
               "LAYOUTLAB_MAX_CONCURRENCY": '{"bench": 3}'}
    assert settings.value("LAYOUTLAB_STALL_SECONDS", environ) == 2.5
    assert settings.value("LAYOUTLAB_NO_GUARD", environ) is True
    assert settings.value("LAYOUTLAB_FASTCOPY", environ) is True
    assert settings.value("LAYOUTLAB_MAX_CONCURRENCY", environ) == {"convert": 4, "work_units": 20, "bench": 3}
    assert settings.problems(environ) == []


def test_the_cli_refuses_a_bad_value_at_start_in_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("LAYOUTLAB_STALL_SECONDS", "soon")
    assert cli.main(["inspect", str(tmp_path / "absent.h5")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["layoutlab inspect: error: LAYOUTLAB_STALL_SECONDS='soon': expected a number"]


def test_the_cdk_app_reads_the_environments_schema_from_the_package():
    """doctor and the CDK app share layoutlab.environments; doctor no longer puts cdk/ on sys.path."""
    from layoutlab.commands import doctor

    source = (REPO_ROOT / "functions" / "layoutlab" / "commands" / "doctor.py").read_text()
    assert "sys.path" not in source and "layoutlab_cdk" not in source
    config, problems, _ = doctor.load_environment("dev")
    assert config.name == "dev" and problems == []
    assert "from layoutlab.environments import" in (REPO_ROOT / "cdk" / "layoutlab_cdk" / "config.py").read_text()
