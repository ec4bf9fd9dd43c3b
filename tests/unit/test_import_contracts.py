"""Dependencies point one way (pyproject.toml [tool.importlinter]): code that runs in the cloud never
imports the local emulator, and handlers -> pipeline -> (bench, convert, formats, report) -> results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def lint_imports(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_import_contracts_hold():
    result = lint_imports(REPO_ROOT, REPO_ROOT / "functions")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 kept, 0 broken" in result.stdout


def test_a_cloud_module_importing_the_emulator_breaks_the_contract(tmp_path):
    """The same contracts over a copy of the package in which the bench runner imports layoutlab.local."""
    import shutil

    copy = tmp_path / "functions"
    shutil.copytree(REPO_ROOT / "functions" / "layoutlab", copy / "layoutlab",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    runner = copy / "layoutlab" / "bench" / "runner.py"
    runner.write_text(runner.read_text() + "\nfrom layoutlab.local import cloud  # noqa\n")
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    result = lint_imports(tmp_path, copy)
    assert result.returncode != 0
    assert "layoutlab.bench.runner -> layoutlab.local.cloud" in result.stdout
