"""Issue 23, memory on user-chosen sizes: a large attribute costs memory bounded by its size, and a value
that is left out is never read. Peak RSS is measured on the command (``run_layoutlab``: ``wait4``)."""

from __future__ import annotations

import json

import h5py
import numpy as np

from repack_helpers import run_layoutlab

MiB = 1 << 20


def _string_attribute_file(path, size: int):
    with h5py.File(path, "w", libver="latest") as f:
        f["x"] = np.arange(3, dtype="f4")
        f.attrs["history"] = "a" * size  # variable-length: its descriptor says the length, the heap holds the bytes
    return path


def test_rechunk_leaves_out_a_large_string_attribute_without_reading_it(tmp_path):
    # Before: the string was read (HDF5 2.0 holds ~5.5 copies of it: 659 MB peak for 100 MiB) only to be
    # left out. After: its size comes from its descriptor, and the peak stays that of a small file.
    size = 160 * MiB
    source = _string_attribute_file(tmp_path / "big.h5", size)
    code, stdout, stderr, peak = run_layoutlab("rechunk", source, tmp_path / "out.zarr", "--no-progress", timeout=60)
    assert code == 0, stderr[-2000:]
    skipped = json.loads(stdout)["skipped"]
    assert [(s["variable"], s["attribute"]) for s in skipped] == [("/", "history")]
    assert "160.0 MiB" in skipped[0]["reason"]
    assert peak < size, f"rechunk peaked at {peak / MiB:.0f} MiB for a {size // MiB} MiB attribute it leaves out"
