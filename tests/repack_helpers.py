"""What the repack tests share: h5dump's view of a file, and the C code they need.

Imported as ``repack_helpers`` (pytest puts tests/ on the path: pyproject's ``pythonpath``).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from layoutlab.convert import fastcopy


def h5dump_p(path) -> str:
    """Header, creation properties (storage offsets included) and every value as ``h5dump -p``
    prints them, the file-name line dropped. Debian's h5dump cannot decode every filter (e.g.
    LZF) and then exits 1: what it printed up to there is returned, with the status."""
    if not shutil.which("h5dump"):
        pytest.skip("h5dump not installed (make sysdeps installs hdf5-tools)")
    done = subprocess.run(["h5dump", "-p", str(path)], capture_output=True, text=True)
    return done.stdout.split("\n", 1)[1] + f"\nstatus {done.returncode}"


def require_c_code() -> None:
    """Skip without the compiled extension; under CI (which installs with a compiler) fail instead."""
    if not fastcopy.available():
        reason = f"C code unavailable: {fastcopy.unavailable_reason()}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def write_sample(kind: str, path) -> None:
    """A small ATL03-like granule (groups, COMPACT datasets, unlimited axes, ~600 DIMENSION_LIST
    attributes) or GEOS-like NetCDF-4 (unlimited time axis whose chunk is longer than the axis)."""
    from layoutlab.samples import atl03, geos

    if kind == "atl03":
        atl03.write_atl03(path, photons=30_000)
    else:
        geos.write_geos(path, shape=(24, 91, 144))


def write_progress_input(path, contiguous: bool = False) -> int:
    """Two gzip-chunked datasets (and a contiguous one if asked): returns the bytes they store."""
    import h5py
    import numpy as np

    rng = np.random.default_rng(1)
    names = ["a", "b"] + (["contiguous"] if contiguous else [])
    with h5py.File(path, "w") as f:
        for name in ("a", "b"):
            f.create_dataset(name, data=rng.normal(size=(4000, 500)).astype("f4"), chunks=(100, 500),
                             compression="gzip")
        if contiguous:
            f["contiguous"] = np.arange(1000.0)
        return sum(f[name].id.get_storage_size() for name in names)
