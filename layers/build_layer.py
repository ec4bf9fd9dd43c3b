"""Build the deployment artifacts from the lock with uv, never by hand.

Two artifacts, both for the runtime named in cdk/layoutlab_cdk/config.py
(``PYTHON_RUNTIME``: Lambda python3.12 on Amazon Linux 2023, glibc 2.34, x86_64):

- the **dependency layer** ``layers/build/dependencies/`` (Lambda mounts it at
  ``/opt``; its ``python/`` is on the runtime's ``sys.path``): the runtime
  dependencies of the ``layoutlab`` package (``[project].dependencies`` in
  pyproject.toml, at the versions uv.lock holds) as the manylinux wheels for the
  runtime (``--python-platform``/``--python-version``), whatever machine builds it;
- the **function asset** ``layers/build/function/`` (Lambda's ``/var/task``): the
  ``layoutlab`` package installed from its own wheel, built by this machine's
  Python of the runtime's version, so the native repack engine (C, stable ABI
  ``abi3``) is in it, compiled for that Python.

The Fargate image (cdk/container/Dockerfile) copies these two directories, so
Lambda, Fargate and the local run (``layoutlab.local.runtime``) execute the same
files::

    python layers/build_layer.py            # build what is missing or stale
    python layers/build_layer.py --check    # exit 1 if an artifact is missing or stale

The versions come from the lock (uv.lock, the one place they are chosen): ``uv export`` writes
the layer's share of it (the package's runtime dependencies, less ``NOT_IN_LAYER``) as a
requirements file with every wheel's hash, and ``uv pip install --target`` installs exactly those,
``--no-deps --require-hashes``, picking for each the wheel of the runtime's platform (from uv's
cache when the venv already fetched it: seconds); the venv, CI and the local run are installed from
the same lock (``make venv``). This script only strips what never
runs (tests, bytecode caches) and measures the result. Stamp files record what each artifact was
built from, so a rebuild happens only when that changes.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

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
    if str(ROOT / "functions") not in sys.path:
        sys.path.insert(0, str(ROOT / "functions"))  # it imports the environments' schema from layoutlab
    spec = importlib.util.spec_from_file_location("layoutlab_cdk_config", ROOT / "cdk" / "layoutlab_cdk" / "config.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return sys.modules[spec.name]


PYTHON_VERSION = _runtime_config().PYTHON_RUNTIME
# Amazon Linux 2023 has glibc 2.34 (and GCC 11's libstdc++, GLIBCXX_3.4.29): uv's target platform
# x86_64-manylinux_2_34 takes wheels for that glibc or older, never newer. PLATFORMS names every
# wheel platform tag that fits, for layers/check_artifacts.py, which checks each installed wheel's tags.
RUNTIME_GLIBC = (2, 34)
RUNTIME_GLIBCXX = (3, 4, 29)
UV_PLATFORM = f"x86_64-manylinux_{RUNTIME_GLIBC[0]}_{RUNTIME_GLIBC[1]}"
PLATFORMS = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(RUNTIME_GLIBC[1], 16, -1)) + (
    "manylinux2014_x86_64",
)
LOCK = ROOT / "uv.lock"
# Dependencies of the package that no Lambda/Fargate entry point imports, left out
# to stay under Lambda's 250 MB (code + layers, unzipped). netCDF4 (+ its bundled
# libnetcdf/HDF5 and cftime, ~42 MB) serves the local sample generator and checks;
# every reader that runs in the cloud goes through h5py / h5netcdf / zarr.
NOT_IN_LAYER = {"netcdf4"}
# Never executed on Lambda: tests of third-party packages and bytecode compiled
# for the build machine's interpreter.
STRIP_DIR_NAMES = {"tests", "test", "__pycache__"}


# uv trusts the system's TLS roots, as the Makefile has it (pip and curl here use them too)
os.environ.setdefault("UV_SYSTEM_CERTS", "1")


def uv_executable() -> str:
    """``$UV`` (the Makefile exports the uv it installed, the version pyproject.toml requires), else the one
    the Makefile keeps per user, else one on PATH."""
    required = re.search(r'^required-version = "==([0-9.]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    kept = cache / "layoutlab" / f"uv-{required.group(1) if required else '?'}" / "bin" / "uv"
    for candidate in (os.environ.get("UV"), str(kept), shutil.which("uv")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit(f"layers/build_layer.py: uv not found (looked at $UV, {kept} and PATH); "
                     "`make venv` installs the version pyproject.toml requires")


def locked_requirements() -> str:
    """The layer's share of uv.lock as a pip requirements file: ``name==version`` with every wheel's hash,
    the package's runtime dependencies only (no extras, no dev tools), less ``NOT_IN_LAYER`` and what only
    they need. ``--locked``: a lock older than pyproject.toml is an error, never silently re-resolved."""
    cmd = [uv_executable(), "export", "--locked", "--format", "requirements-txt", "--no-dev", "--no-emit-project",
           "--no-header", "--no-annotate", "--quiet", *[arg for name in sorted(NOT_IN_LAYER) for arg in ("--prune", name)]]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit status {done.returncode}"
        raise SystemExit(f"{LOCK}: uv export failed: {reason}")
    return done.stdout


def requirements(exported: str | None = None) -> list[str]:
    """``name==version`` of every distribution the layer gets from the lock (hashes and markers left out)."""
    exported = locked_requirements() if exported is None else exported
    return sorted(line.split(";")[0].split("\\")[0].strip() for line in exported.splitlines()
                  if line and not line[0].isspace() and not line.startswith("#"))


def requirements_digest() -> str:
    """What the layer is built from: the lock (read as bytes: checking needs no uv), what it leaves out, the
    runtime's Python and platform."""
    text = json.dumps({"lock": hashlib.sha256(LOCK.read_bytes()).hexdigest(), "left_out": sorted(NOT_IN_LAYER),
                       "python": PYTHON_VERSION, "platform": UV_PLATFORM})
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
    return SITE.is_dir() and _stamp_digest(STAMP) == requirements_digest()


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
    exported = locked_requirements()
    if LAYER_DIR.exists():
        shutil.rmtree(LAYER_DIR)
    SITE.mkdir(parents=True)
    BUILD.mkdir(parents=True, exist_ok=True)
    locked = BUILD / "layer-requirements.txt"
    locked.write_text(exported)
    cmd = [
        uv_executable(), "pip", "install",
        "--target", str(SITE),
        "--python-version", PYTHON_VERSION,
        "--python-platform", UV_PLATFORM,
        "--only-binary", ":all:",
        "--no-compile-bytecode",
        # exactly the lock's distributions, each checked against the lock's hashes
        "--no-deps",
        "--require-hashes",
        *(["--quiet"] if quiet else []),
        "--requirement", str(locked),
    ]
    subprocess.run(cmd, check=True)
    # --target leaves console scripts that point at the build machine's python, and uv's lock file.
    shutil.rmtree(SITE / "bin", ignore_errors=True)
    (SITE / ".lock").unlink(missing_ok=True)
    stripped = strip(SITE)
    report = {
        "digest": requirements_digest(),
        "requirements": requirements(exported),
        "python": PYTHON_VERSION,
        "platform": UV_PLATFORM,
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
        subprocess.run([uv_executable(), "build", "--wheel", "--python", sys.executable, "--out-dir", wheels,
                        *quiet_args, str(ROOT)], check=True)
        (wheel,) = Path(wheels).glob("layoutlab-*.whl")
        if FUNCTION_DIR.exists():
            shutil.rmtree(FUNCTION_DIR)
        subprocess.run([uv_executable(), "pip", "install", "--no-deps", "--no-compile-bytecode", "--python",
                        sys.executable, "--target", str(FUNCTION_DIR), *quiet_args, str(wheel)], check=True)
        wheel_name = wheel.name
    shutil.rmtree(FUNCTION_DIR / "bin", ignore_errors=True)  # the console script names the build machine's python
    (FUNCTION_DIR / ".lock").unlink(missing_ok=True)  # (uv's lock of the --target directory: not the function's)
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
        "(layers/build/dependencies, from uv.lock) and the function asset (layers/build/function, the "
        "package's own wheel). No Docker needed.",
        epilog="Examples:\n  python layers/build_layer.py\n  python layers/build_layer.py --check\n"
        "  python layers/build_layer.py --force",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="only report whether the artifacts are current (exit 1 if not)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the stamps say the artifacts are current")
    parser.add_argument("--quiet", action="store_true", help="pass --quiet to uv")
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
