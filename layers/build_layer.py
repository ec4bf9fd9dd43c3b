"""Build the deployment artifacts offline with pip, never by hand.

Two artifacts, both for the runtime named in cdk/layoutlab_cdk/config.py
(``PYTHON_RUNTIME``: Lambda python3.12 on Amazon Linux 2023, glibc 2.34, x86_64):

- the **dependency layer** ``layers/build/dependencies/`` (Lambda mounts it at
  ``/opt``; its ``python/`` is on the runtime's ``sys.path``): the runtime
  dependencies of the ``layoutlab`` package (``[project].dependencies`` in
  pyproject.toml, the one list there is) as manylinux wheels pip selects with
  ``--platform``/``--python-version``, whatever machine builds it;
- the **function asset** ``layers/build/function/`` (Lambda's ``/var/task``): the
  ``layoutlab`` package installed from its own wheel, built by this machine's
  Python of the runtime's version, so the native repack engine (C, stable ABI
  ``abi3``) is in it, compiled for that Python.

The Fargate image (cdk/container/Dockerfile) copies these two directories, so
Lambda, Fargate and the local run (``layoutlab.local.runtime``) execute the same
files::

    python layers/build_layer.py            # build what is missing or stale
    python layers/build_layer.py --check    # exit 1 if an artifact is missing or stale

pip does the resolving and the platform selection, held to the versions the
project's venv has (``venv_constraints``: local and cloud run the same libraries);
this script only pins what the runtime needs pinned, strips what never runs (tests, bytecode caches) and
measures the result. Stamp files record what each artifact was built from, so a
rebuild happens only when that changes.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "layers" / "build"
LAYER_DIR = BUILD / "dependencies"  # the layer's asset directory: Lambda mounts it at /opt
SITE = LAYER_DIR / "python"  # /opt/python is on the runtime's sys.path
STAMP = BUILD / "dependencies.stamp.json"
FUNCTION_DIR = BUILD / "function"  # the function's asset directory: Lambda's /var/task
FUNCTION_STAMP = BUILD / "function.stamp.json"
PACKAGE_SOURCE = ROOT / "functions" / "layoutlab"


def _runtime_config():
    """cdk/layoutlab_cdk/config.py, loaded by path: the one place the runtime's version is written."""
    spec = importlib.util.spec_from_file_location("layoutlab_cdk_config", ROOT / "cdk" / "layoutlab_cdk" / "config.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return sys.modules[spec.name]


PYTHON_VERSION = _runtime_config().PYTHON_RUNTIME
# Amazon Linux 2023 has glibc 2.34 (and GCC 11's libstdc++, GLIBCXX_3.4.29). pip does not widen
# a manylinux_2_X platform to the older ones, so every glibc from manylinux2014 (2.17) up to the
# runtime's is named; a wheel for a newer glibc is never picked.
RUNTIME_GLIBC = (2, 34)
RUNTIME_GLIBCXX = (3, 4, 29)
PLATFORMS = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(RUNTIME_GLIBC[1], 16, -1)) + (
    "manylinux2014_x86_64",
)
# botocore (pulled in by boto3/aiobotocore) needs python-dateutil<3; pip with
# --only-binary and --platform cannot see the runtime's own copy, so pin it here.
EXTRA_PINS = ("python-dateutil<3",)
# Dependencies of the package that no Lambda/Fargate entry point imports, left out
# to stay under Lambda's 250 MB (code + layers, unzipped). netCDF4 (+ its bundled
# libnetcdf/HDF5 and cftime, ~42 MB) serves the local sample generator and checks;
# every reader that runs in the cloud goes through h5py / h5netcdf / zarr.
NOT_IN_LAYER = {"netcdf4"}
# Never executed on Lambda: tests of third-party packages and bytecode compiled
# for the build machine's interpreter.
STRIP_DIR_NAMES = {"tests", "test", "__pycache__"}


def requirements() -> list[str]:
    """The layer's requirement lines: the package's own dependencies plus the pins."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    kept = [line for line in project["dependencies"] if canonicalize_name(Requirement(line).name) not in NOT_IN_LAYER]
    return sorted(kept) + list(EXTRA_PINS)


def venv_constraints() -> list[str]:
    """``name==version`` of every distribution in the Python running this (the project's venv).

    Given to pip as constraints, so the layer holds the very versions the local run and the
    tests were checked with: one set of libraries for local and cloud, not two resolutions
    made at different times (pip would otherwise take whatever is newest when the layer is
    built). A version with no wheel for the runtime then fails the build, naming it."""
    from importlib import metadata

    pins = set()
    for distribution in metadata.distributions():
        name = distribution.metadata["Name"]
        if name and canonicalize_name(name) != "layoutlab":
            pins.add(f"{canonicalize_name(name)}=={distribution.version}")
    return sorted(pins)


def requirements_digest(reqs: list[str]) -> str:
    text = json.dumps({"requirements": reqs, "python": PYTHON_VERSION, "platforms": PLATFORMS,
                       "constraints": venv_constraints()})
    return hashlib.sha256(text.encode()).hexdigest()


def function_digest() -> str:
    """What the function asset is built from: the package's files, pyproject.toml, the building Python."""
    digest = hashlib.sha256(f"{sys.version_info[:2]}".encode())
    for path in sorted([ROOT / "pyproject.toml", *PACKAGE_SOURCE.rglob("*")]):
        if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".so", ".pyc"):
            continue
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _stamp_digest(stamp: Path) -> str | None:
    try:
        return json.loads(stamp.read_text()).get("digest")
    except (OSError, ValueError):
        return None


def layer_is_current() -> bool:
    return SITE.is_dir() and _stamp_digest(STAMP) == requirements_digest(requirements())


def function_is_current() -> bool:
    return (FUNCTION_DIR / "layoutlab").is_dir() and _stamp_digest(FUNCTION_STAMP) == function_digest()


def is_current() -> bool:
    return layer_is_current() and function_is_current()


def directory_size(path: Path) -> int:
    """Bytes of every regular file under ``path`` (what Lambda counts as unzipped size)."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(path):
        for name in filenames:
            file = Path(dirpath, name)
            if not file.is_symlink():
                total += file.stat().st_size
    return total


def strip(site: Path) -> int:
    """Remove test suites and bytecode caches; return the bytes removed."""
    removed = 0
    for dirpath, dirnames, _ in os.walk(site, topdown=True):
        for name in list(dirnames):
            candidate = Path(dirpath, name)
            if name in STRIP_DIR_NAMES:
                removed += directory_size(candidate)
                shutil.rmtree(candidate)
                dirnames.remove(name)
    return removed


def _check_building_python() -> None:
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if running != PYTHON_VERSION:
        raise SystemExit(
            f"layers/build_layer.py: the function asset's C module must be compiled by Python {PYTHON_VERSION} "
            f"(the runtime, cdk/layoutlab_cdk/config.py PYTHON_RUNTIME), not {running} ({sys.executable}); "
            "run it with the project's venv (make artifacts)"
        )


def build_layer(quiet: bool = False) -> dict:
    reqs = requirements()
    if LAYER_DIR.exists():
        shutil.rmtree(LAYER_DIR)
    SITE.mkdir(parents=True)
    BUILD.mkdir(parents=True, exist_ok=True)
    constraints = BUILD / "constraints.txt"
    constraints.write_text("\n".join(venv_constraints()) + "\n")
    cmd = [
        sys.executable, "-m", "pip", "install",
        "--target", str(SITE),
        "--python-version", PYTHON_VERSION,
        "--implementation", "cp",
        *[arg for platform in PLATFORMS for arg in ("--platform", platform)],
        "--only-binary=:all:",
        "--no-compile",
        "--disable-pip-version-check",
        "--constraint", str(constraints),
        *(["--quiet"] if quiet else []),
        *reqs,
    ]
    subprocess.run(cmd, check=True)
    # pip --target leaves console scripts that point at the build machine's python.
    shutil.rmtree(SITE / "bin", ignore_errors=True)
    stripped = strip(SITE)
    report = {
        "digest": requirements_digest(reqs),
        "requirements": reqs,
        "python": PYTHON_VERSION,
        "platforms": list(PLATFORMS),
        "unzipped_bytes": directory_size(LAYER_DIR),
        "stripped_bytes": stripped,
    }
    BUILD.mkdir(parents=True, exist_ok=True)
    STAMP.write_text(json.dumps(report, indent=2) + "\n")
    return report


def build_function(quiet: bool = False) -> dict:
    """The package's wheel (C module compiled for the runtime's Python), installed into FUNCTION_DIR."""
    _check_building_python()
    digest = function_digest()
    quiet_args = ["--quiet"] if quiet else []
    with tempfile.TemporaryDirectory(prefix="layoutlab-wheel-") as wheels:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
                        "--wheel-dir", wheels, *quiet_args, str(ROOT)], check=True)
        (wheel,) = Path(wheels).glob("layoutlab-*.whl")
        if FUNCTION_DIR.exists():
            shutil.rmtree(FUNCTION_DIR)
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
                        "--disable-pip-version-check", "--target", str(FUNCTION_DIR), *quiet_args, str(wheel)],
                       check=True)
        wheel_name = wheel.name
    shutil.rmtree(FUNCTION_DIR / "bin", ignore_errors=True)  # the console script names the build machine's python
    native = sorted(str(p.relative_to(FUNCTION_DIR)) for p in FUNCTION_DIR.rglob("*.so"))
    report = {"digest": digest, "wheel": wheel_name, "python": PYTHON_VERSION, "native_modules": native,
              "unzipped_bytes": directory_size(FUNCTION_DIR)}
    FUNCTION_STAMP.write_text(json.dumps(report, indent=2) + "\n")
    return report


def build(quiet: bool = False) -> dict:
    """Both artifacts, each only when stale; returns their stamps."""
    layer = build_layer(quiet) if not layer_is_current() else json.loads(STAMP.read_text())
    function = build_function(quiet) if not function_is_current() else json.loads(FUNCTION_STAMP.read_text())
    return {"layer": layer, "function": function}


def ensure_built(quiet: bool = True) -> Path:
    """Build what the stamps say is missing or stale; return the layer's asset directory."""
    if not is_current():
        build(quiet=quiet)
    return LAYER_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=f"Build the deployment artifacts for the Lambda/Fargate runtime (Linux x86_64, CPython "
        f"{PYTHON_VERSION}, glibc <= {RUNTIME_GLIBC[0]}.{RUNTIME_GLIBC[1]}): the dependency layer "
        "(layers/build/dependencies, pip --platform) and the function asset (layers/build/function, the "
        "package's own wheel). No Docker needed.",
        epilog="Examples:\n  python layers/build_layer.py\n  python layers/build_layer.py --check\n"
        "  python layers/build_layer.py --force",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="only report whether the artifacts are current (exit 1 if not)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the stamps say the artifacts are current")
    parser.add_argument("--quiet", action="store_true", help="pass --quiet to pip")
    args = parser.parse_args(argv)
    if args.check:
        for name, current, where in (("layer", layer_is_current(), LAYER_DIR),
                                     ("function asset", function_is_current(), FUNCTION_DIR)):
            print(f"{name} {'current' if current else 'missing or stale'}: {where}")
        return 0 if is_current() else 1
    if args.force:
        reports = {"layer": build_layer(quiet=args.quiet), "function": build_function(quiet=args.quiet)}
    else:
        reports = build(quiet=args.quiet)
    layer, function = reports["layer"], reports["function"]
    print(f"layer: {LAYER_DIR} — {layer['unzipped_bytes'] / 2**20:.1f} MiB unzipped "
          f"({layer['stripped_bytes'] / 2**20:.1f} MiB of tests/caches stripped), Python {layer['python']}")
    print(f"function asset: {FUNCTION_DIR} — {function['unzipped_bytes'] / 2**20:.1f} MiB, "
          f"native modules: {', '.join(function['native_modules']) or 'none (no C compiler?)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
