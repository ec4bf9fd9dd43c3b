"""Build the Lambda dependency layer offline with pip, never by hand.

The layer holds the runtime dependencies of the ``layoutlab`` package (its
``[project].dependencies`` in pyproject.toml, the one list there is) as Linux
x86_64 / CPython 3.11 wheels, whatever machine builds it:

    python layers/build_layer.py            # -> layers/build/dependencies/python/...
    python layers/build_layer.py --check    # exit 1 if the layer is missing or stale

pip does the resolving and the platform selection (``--platform`` +
``--only-binary=:all:``); this script only pins what the Lambda runtime needs
pinned, strips what never runs (tests, bytecode caches) and measures the result.
A stamp file records the requirements it was built from, so a rebuild happens
only when pyproject.toml's dependencies change.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "layers" / "build"
LAYER_DIR = BUILD / "dependencies"  # the asset directory: Lambda mounts it at /opt
SITE = LAYER_DIR / "python"  # /opt/python is on the runtime's sys.path
STAMP = BUILD / "dependencies.stamp.json"

PYTHON_VERSION = "3.11"  # must match the functions' runtime (cdk/layoutlab_cdk/config.py)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64")
# botocore (pulled in by boto3/aiobotocore) needs python-dateutil<3; pip with
# --only-binary and --platform cannot see the runtime's own copy, so pin it here.
EXTRA_PINS = ("python-dateutil<3",)
# Never executed on Lambda: tests of third-party packages and bytecode compiled
# for the build machine's interpreter.
# Dependencies of the package that no Lambda/Fargate entry point imports, left out
# to stay under Lambda's 250 MB (code + layers, unzipped). netCDF4 (+ its bundled
# libnetcdf/HDF5 and cftime, ~42 MB) serves the local sample generator and checks;
# every reader that runs in the cloud goes through h5py / h5netcdf / zarr.
NOT_IN_LAYER = {"netcdf4"}
STRIP_DIR_NAMES = {"tests", "test", "__pycache__"}


def requirements() -> list[str]:
    """The layer's requirement lines: the package's own dependencies plus the pins."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    kept = [line for line in project["dependencies"] if canonicalize_name(Requirement(line).name) not in NOT_IN_LAYER]
    return sorted(kept) + list(EXTRA_PINS)


def requirements_digest(reqs: list[str]) -> str:
    text = json.dumps({"requirements": reqs, "python": PYTHON_VERSION, "platforms": PLATFORMS})
    return hashlib.sha256(text.encode()).hexdigest()


def is_current() -> bool:
    if not STAMP.exists() or not SITE.is_dir():
        return False
    return json.loads(STAMP.read_text()).get("digest") == requirements_digest(requirements())


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


def build(quiet: bool = False) -> dict:
    reqs = requirements()
    if LAYER_DIR.exists():
        shutil.rmtree(LAYER_DIR)
    SITE.mkdir(parents=True)
    cmd = [
        sys.executable, "-m", "pip", "install",
        "--target", str(SITE),
        "--python-version", PYTHON_VERSION,
        "--implementation", "cp",
        *[arg for platform in PLATFORMS for arg in ("--platform", platform)],
        "--only-binary=:all:",
        "--no-compile",
        "--disable-pip-version-check",
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
    STAMP.write_text(json.dumps(report, indent=2) + "\n")
    return report


def ensure_built(quiet: bool = True) -> Path:
    """Build the layer unless the stamp says it is current; return the asset directory."""
    if not is_current():
        build(quiet=quiet)
    return LAYER_DIR


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Build the Lambda dependency layer (Linux x86_64, CPython 3.11 wheels) "
        "into layers/build/dependencies with pip --platform; no Docker needed.",
        epilog="Examples:\n  python layers/build_layer.py\n  python layers/build_layer.py --check\n"
        "  python layers/build_layer.py --force",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--check", action="store_true", help="only report whether the layer is current (exit 1 if not)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the stamp says the layer is current")
    parser.add_argument("--quiet", action="store_true", help="pass --quiet to pip")
    args = parser.parse_args(argv)
    if args.check:
        current = is_current()
        print(f"layer {'current' if current else 'missing or stale'}: {LAYER_DIR}")
        return 0 if current else 1
    if args.force or not is_current():
        report = build(quiet=args.quiet)
    else:
        report = json.loads(STAMP.read_text())
    print(f"layer: {LAYER_DIR} — {report['unzipped_bytes'] / 2**20:.1f} MiB unzipped "
          f"({report['stripped_bytes'] / 2**20:.1f} MiB of tests/caches stripped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
