"""benchmarks/probe_many_long_lived.py, the many-files run without a child per file (an experiment timed in
docs/repack.md): it must make the same verified copies, and say when one failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np

REPO = Path(__file__).resolve().parents[2]


def _probe(in_dir, out_dir):
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "probe_many_long_lived.py"), str(in_dir),
                           str(out_dir), "--jobs", "2", "--page-size", "65536"],
                          capture_output=True, text=True, timeout=300, env={"LAYOUTLAB_NO_GUARD": "1", "PATH": ""})


def test_every_file_is_copied_paged_with_its_values_and_a_bad_one_fails_the_run(tmp_path):
    inputs, outputs = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    values = {}
    for number in range(3):
        values[number] = np.arange(1000 * (number + 1), dtype="f4").reshape(-1, 100)
        with h5py.File(inputs / f"g{number}.h5", "w") as f:
            f.create_dataset("v", data=values[number], chunks=(5, 100), compression="gzip", maxshape=(None, 100))
    done = _probe(inputs, outputs)
    assert done.returncode == 0, done.stderr
    for number in range(3):
        with h5py.File(outputs / f"g{number}.h5") as f:
            assert f.id.get_create_plist().get_file_space_strategy()[0] == h5py.h5f.FSPACE_STRATEGY_PAGE
            np.testing.assert_array_equal(f["v"][...], values[number])
    (inputs / "g1.h5").write_bytes(b"not HDF5 at all")
    failed = _probe(inputs, tmp_path / "out2")
    assert failed.returncode == 1 and "g1.h5" in failed.stderr
