"""The shared corpus of third-party HDF5 / NetCDF files (``../shared/corpus`` beside the repo).

``LAYOUTLAB_CORPUS`` points elsewhere; tests that use it skip when it is absent. The
netcdf-c CDL sources are built with ``ncgen -k nc4`` (Debian ``netcdf-bin``) once per
session; a CDL that ncgen cannot build is left out (the corpus README expects one such).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("LAYOUTLAB_CORPUS", REPO_ROOT.parent / "shared" / "corpus"))


def binary_files() -> list[Path]:
    """Every stored file of the corpus but the CDL sources, sorted (empty when the corpus is absent):
    .h5 and .nc, and GPM's .HDF5 among others."""
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.glob("*/*") if p.suffix != ".cdl" and p.is_file())


def cdl_files() -> list[Path]:
    return sorted(CORPUS.glob("netcdf-c-cdl/*.cdl")) if CORPUS.is_dir() else []


def build_cdl(cdl: Path, out_dir: Path) -> Path | None:
    """``ncgen -k nc4 -o OUT CDL``; None when ncgen is missing or refuses the CDL."""
    if shutil.which("ncgen") is None:
        return None
    out = out_dir / (cdl.stem + ".nc")
    if out.exists():
        return out
    tmp = out_dir / (cdl.stem + ".partial.nc")
    done = subprocess.run(["ncgen", "-k", "nc4", "-o", str(tmp), str(cdl)], capture_output=True, timeout=60)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        return None
    tmp.rename(out)
    return out


def label(path: Path) -> str:
    """``hdf5-json/tall.h5`` or ``netcdf-c-cdl/NAME.cdl`` (a test id)."""
    return f"{path.parent.name}/{path.name}"


def ncdump_unlimited_lengths(path: Path) -> dict[str, int] | None:
    """``{"/group/dim": current length}`` of the UNLIMITED dimensions ``ncdump -h`` prints; None if it cannot read the file."""
    done = subprocess.run(["ncdump", "-h", str(path)], capture_output=True, timeout=120)
    if done.returncode != 0:
        return None
    groups: list[str] = []
    lengths = {}
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        if match := re.match(r"\s*group: (\S+) \{", line):
            groups.append(match.group(1))
        elif match := re.match(r"\s*(\S+) = UNLIMITED ; // \((\d+) currently\)", line):
            lengths["/" + "/".join([*groups, match.group(1)])] = int(match.group(2))
        elif re.match(r"\s*\} // group", line):
            groups.pop()
    return lengths
