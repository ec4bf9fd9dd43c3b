"""Dependencies point one way (pyproject.toml [tool.importlinter]): code that runs in the cloud never
imports the local emulator, handlers -> pipeline -> (bench, convert, formats, report) -> results, and
no import circle joins two folders."""

from __future__ import annotations

import json
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


def unit_cycles(graph) -> list[list[str]]:
    """Import circles between folders (subpackages such as layoutlab.convert, and top-level modules
    such as layoutlab.storage), found as strongly connected components of the folder graph."""
    def unit(module: str) -> str:
        return ".".join(module.split(".")[:2])

    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if unit(module) != unit(imported):
                edges.setdefault(unit(module), set()).add(unit(imported))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return circles


def test_no_import_circle_joins_two_folders():
    import grimp

    sys.path.insert(0, str(REPO_ROOT / "functions"))
    assert unit_cycles(grimp.build_graph("layoutlab", cache_dir=None)) == []


def test_a_circle_between_two_folders_is_found(tmp_path):
    """The check itself: a copy of the package in which storage imports the pipeline (which imports storage)."""
    import shutil

    import grimp

    copy = tmp_path / "functions"
    shutil.copytree(REPO_ROOT / "functions" / "layoutlab", copy / "layoutlab",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    storage = copy / "layoutlab" / "storage.py"
    storage.write_text(storage.read_text() + "\nfrom layoutlab.pipeline import plan  # noqa\n")
    code = ("import grimp, json, sys; sys.path.insert(0, sys.argv[1]); "
            "sys.path.insert(0, sys.argv[2]); import test_import_contracts as t; "
            "print(json.dumps(t.unit_cycles(grimp.build_graph('layoutlab', cache_dir=None))))")
    done = subprocess.run([sys.executable, "-c", code, str(copy), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert any({"layoutlab.storage", "layoutlab.pipeline"} <= set(circle) for circle in json.loads(done.stdout))
