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
