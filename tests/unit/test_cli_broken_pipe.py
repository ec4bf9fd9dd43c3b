"""`layoutlab X | head`: when the reader of the output goes away, the command stops quietly (no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np


def test_a_reader_that_goes_away_ends_the_command_without_a_traceback(tmp_path):
    src = tmp_path / "in.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("v", data=np.arange(1000.0), chunks=(100,))
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes anything
    try:
        done = subprocess.run([sys.executable, "-m", "layoutlab.cli", "repack", "--no-verify", str(src),
                               str(tmp_path / "out.h5")], stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141
    assert (tmp_path / "out.h5").exists()  # the work itself was done before the output was written
