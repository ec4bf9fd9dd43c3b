"""The deployment artifacts fit the runtime they are deployed to (Lambda python3.12, Amazon Linux 2023).

A shared object that needs a newer glibc than the runtime's imports fine on the build
machine and fails at the first import in the cloud; so does a wheel for another Python.
These tests run the checker (layers/check_artifacts.py) on the built layer and function
asset, show that it catches both kinds of mistake, and that the Fargate image, the CDK app,
the Makefile and the local run all name the same Python and the same two directories.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "layers" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def checker(layer_dir):
    sys.path.insert(0, str(REPO_ROOT / "layers"))
    try:
        return _load("check_artifacts")
    finally:
        sys.path.remove(str(REPO_ROOT / "layers"))


def test_built_artifacts_need_at_most_the_runtimes_glibc_and_fit_its_tags(checker):
    report = checker.check()
    assert report["problems"] == []
    # numpy, h5py, obstore, ... and the repack engine: a check that looked at nothing would pass too
    assert report["elf_files"] > 50 and report["wheels"] > 20


def test_function_asset_carries_the_native_engine_for_the_stable_abi(checker):
    native = list((checker.build_layer.FUNCTION_DIR / "layoutlab" / "convert").glob("_fastcopy*.so"))
    assert [p.name for p in native] == ["_fastcopy.abi3.so"]
    needed = checker.needed_versions(native[0])
    assert checker.too_new(set().union(*needed.values())) == []


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to make a too-new shared object")
def test_a_shared_object_needing_a_newer_glibc_is_caught(checker, tmp_path):
    # arc4random appeared in glibc 2.36 (this build machine's); Amazon Linux 2023 has 2.34
    (tmp_path / "new.c").write_text("#include <stdlib.h>\nunsigned draw(void) { return arc4random(); }\n")
    site = tmp_path / "site" / "pkg"
    site.mkdir(parents=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(site / "new.so"), str(tmp_path / "new.c")], check=True)
    checked, problems = checker.elf_problems(tmp_path / "site")
    assert checked == 1
    assert len(problems) == 1 and "GLIBC_2.36" in problems[0].reason and "pkg/new.so" in problems[0].path


def test_a_wheel_for_another_python_or_a_newer_glibc_is_caught(checker, tmp_path):
    for name, tag in (("old", "cp311-cp311-manylinux_2_17_x86_64"), ("newglibc", "cp312-cp312-manylinux_2_35_x86_64"),
                      ("fine", "cp312-cp312-manylinux_2_28_x86_64"), ("pure", "py3-none-any"),
                      ("stable", "cp39-abi3-manylinux2014_x86_64")):
        info = tmp_path / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: {tag}\n")
    checked, problems = checker.wheel_problems(tmp_path)
    assert checked == 5
    assert sorted(p.path.split("-")[0] for p in problems) == ["newglibc", "old"]


def test_dockerfile_copies_the_artifacts_where_the_local_run_expects_them():
    """The Fargate image holds the two artifacts at /var/task and /opt/python with this PYTHONPATH;
    the local run maps the same paths onto layers/build (artifact_runtime.Artifacts.image_pythonpath)."""
    from layoutlab.local import artifact_runtime

    text = (REPO_ROOT / "cdk" / "container" / "Dockerfile").read_text()
    base = re.search(r"^FROM\s+(\S+)", text, re.M).group(1)
    config = _load_config()
    assert base == f"public.ecr.aws/lambda/python:{config.PYTHON_RUNTIME}"  # Lambda's own AL2023 + CPython
    assert re.search(r"PYTHONPATH=(\S+)", text).group(1) == artifact_runtime.IMAGE_PYTHONPATH
    copies = dict(re.findall(r"^COPY\s+(\S+)\s+(\S+)", text, re.M))
    assert copies == {"layers/build/dependencies/python": artifact_runtime.IMAGE_LAYER_PYTHON,
                      "layers/build/function": artifact_runtime.IMAGE_TASK_ROOT}
    assert "pip install" not in text  # the image installs nothing the artifacts do not hold


def test_a_task_starts_from_bytecode_in_the_image_and_locally():
    """The image compiles the artifacts' bytecode when it is built (a task would otherwise compile every
    module it imports at each start); the local run's Fargate tasks keep theirs beside the artifacts."""
    from layoutlab.local import artifact_runtime

    text = (REPO_ROOT / "cdk" / "container" / "Dockerfile").read_text()
    compiled = re.search(r"^RUN\s+python3\.12 -m compileall\s.*$", text, re.M)
    assert compiled, "the image compiles no bytecode"
    assert artifact_runtime.IMAGE_LAYER_PYTHON in compiled.group(0)
    assert artifact_runtime.IMAGE_TASK_ROOT in compiled.group(0)
    assert text.index(compiled.group(0)) > text.index("COPY layers/build/function")  # after what it compiles
    env = artifact_runtime.Artifacts(Path("/build")).base_environment("fargate")
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["PYTHONPYCACHEPREFIX"] == "/build/runtime/pycache"


def test_one_python_everywhere():
    """cdk/layoutlab_cdk/config.py names the runtime; the Makefile, the layer, pyproject and the image follow."""
    config = _load_config()
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "RUNTIME_PYTHON := $(shell sed -n 's/^PYTHON_RUNTIME" in makefile  # read from config.py, not repeated
    assert _load("build_layer").PYTHON_VERSION == config.PYTHON_RUNTIME
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert f'requires-python = ">={config.PYTHON_RUNTIME}"' in pyproject
    assert f"{sys.version_info.major}.{sys.version_info.minor}" == config.PYTHON_RUNTIME  # this venv too


def _load_config():
    spec = importlib.util.spec_from_file_location("layoutlab_cdk_config_for_tests",
                                                  REPO_ROOT / "cdk" / "layoutlab_cdk" / "config.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _locked_runtime_closure(lock: dict, left_out: set[str]) -> dict[str, str]:
    """name -> version of everything uv.lock gives the layoutlab package at run time (its [project]
    dependencies, their extras, and theirs, markers evaluated for the Lambda runtime: Linux x86_64,
    CPython 3.12), less ``left_out`` and what only they bring. Read from the lock itself, not from
    the ``uv export`` the builder uses, so the two are checked against each other."""
    from packaging.markers import Marker
    from packaging.utils import canonicalize_name

    packages = {p["name"]: p for p in lock["package"]}
    runtime = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
               "implementation_name": "cpython", "platform_python_implementation": "CPython",
               "python_version": "3.12", "python_full_version": "3.12.0", "os_name": "posix"}

    def wanted(dependency: dict) -> bool:
        marker = dependency.get("marker")
        return not marker or Marker(marker).evaluate({**runtime, "extra": ""})

    todo = [(d["name"], tuple(d.get("extra", ()))) for d in packages["layoutlab"]["dependencies"] if wanted(d)]
    seen: dict[str, str] = {}
    visited = set()
    while todo:
        name, extras = todo.pop()
        name = canonicalize_name(name)
        if name in left_out or (name, extras) in visited:
            continue
        visited.add((name, extras))
        package = packages[name]
        seen[name] = package["version"]
        edges = list(package.get("dependencies", []))
        for extra in extras:
            edges += package.get("optional-dependencies", {}).get(extra, [])
        todo += [(d["name"], tuple(d.get("extra", ()))) for d in edges if wanted(d)]
    return seen


def test_the_layer_holds_exactly_the_locked_distributions(checker):
    """One set of libraries for local and cloud, chosen in one place: the layer's distributions are the
    lock's runtime dependencies, same names and same versions, nothing more and nothing less (less the
    ones layers/build_layer.py leaves out on purpose)."""
    import tomllib

    from packaging.utils import canonicalize_name

    lock = tomllib.loads((REPO_ROOT / "uv.lock").read_text())
    expected = _locked_runtime_closure(lock, checker.build_layer.NOT_IN_LAYER)
    layer = {}
    for info in checker.build_layer.SITE.glob("*.dist-info"):
        name, version = info.name[: -len(".dist-info")].rsplit("-", 1)
        layer[canonicalize_name(name)] = version
    assert len(expected) > 40  # numpy, h5py, zarr, xarray, boto3, ...: a closure that found nothing would pass
    assert {n: v for n, v in layer.items() if expected.get(n) != v} == {}, "in the layer, not as locked"
    assert {n: v for n, v in expected.items() if layer.get(n) != v} == {}, "locked, missing from the layer"


def test_the_venv_runs_the_locked_versions():
    """The suite runs on the lock: every distribution of this venv is the lock's version of it."""
    import tomllib
    from importlib import metadata

    from packaging.utils import canonicalize_name

    locked = {p["name"]: p["version"] for p in tomllib.loads((REPO_ROOT / "uv.lock").read_text())["package"]}
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    assert len(installed) > 100
    assert {n: v for n, v in installed.items() if locked.get(n) != v} == {}
