"""benchmarks/inflate_floor.py, the verified repack's floor (issue 37): it must inflate every deflated chunk
of the file, nothing more, and say so when a chunk does not inflate (a floor that skipped work would
flatter every ratio measured against it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

REPO = Path(__file__).resolve().parents[2]


def _floor(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "inflate_floor.py"), str(path), *args],
                          capture_output=True, text=True, timeout=120)


def _granule(path: Path) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("deflated", data=np.arange(10_000, dtype="f8"), chunks=(1_000,), compression="gzip",
                         shuffle=True)
        f.create_dataset("group/plain_chunks", data=np.arange(3_000, dtype="i4"), chunks=(1_000,))
        f.create_dataset("contiguous", data=np.ones(500))


def test_every_deflated_chunk_is_inflated_to_its_full_size_by_every_process(tmp_path):
    path = tmp_path / "granule.h5"
    _granule(path)
    for processes in ("1", "3"):
        done = _floor(path, "--processes", processes, "--json")
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["chunks"] == 13  # 10 deflated + 3 stored plain; the contiguous dataset has none
        assert result["chunks_inflated"] == 10
        assert result["inflated_bytes"] == 10_000 * 8
        assert result["errors"] == []


def test_a_chunk_that_does_not_inflate_fails_the_run(tmp_path):
    path = tmp_path / "granule.h5"
    _granule(path)
    with h5py.File(path, "r") as f:
        info = f["deflated"].id.get_chunk_info(4)
    with open(path, "r+b") as stream:
        stream.seek(info.byte_offset + 2)
        stream.write(b"\xff" * 8)
    done = _floor(path)
    assert done.returncode == 1
    assert "did not inflate" in done.stderr
