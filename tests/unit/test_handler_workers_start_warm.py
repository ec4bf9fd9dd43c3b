"""A function's forked workers (layoutlab/guard.py: every read of an uploaded file) start with what they use
already imported by the handler's init, as a warm Lambda container runs them: a worker that imported h5py,
s3fs and the readers again paid 0.16-0.31 s of every granule's plan and convert steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

# Imports only the handler (Lambda's init), then runs one guarded read and one guarded repack of a small
# file, each reporting the modules its worker had to import.
SCRIPT = r"""
import json, sys
handler = sys.argv[1]
__import__("layoutlab.handlers." + handler)
from layoutlab.guard import run_guarded

def imported_by(fn):
    def call(*args):
        before = set(sys.modules)
        fn(*args)
        return sorted(set(sys.modules) - before)
    return call

path, out = sys.argv[2], sys.argv[3]
if handler == "plan":
    from layoutlab.pipeline.facts import dataset_facts
    new = run_guarded(imported_by(dataset_facts), path, None, path=path)
else:
    from layoutlab.convert.repack import repack
    new = run_guarded(imported_by(repack), path, out, path=path)
print(json.dumps(new))
"""


@pytest.mark.parametrize("handler", ["plan", "convert"])
def test_a_guarded_worker_of_a_handler_imports_next_to_nothing(handler, tmp_path):
    from layoutlab.samples import geos

    granule = geos.write_geos(tmp_path / "g.nc", shape=(4, 5, 6))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYOUTLAB_")}
    env.update(PYTHONPATH=str(REPO_ROOT / "functions"), POWERTOOLS_TRACE_DISABLED="true")
    done = subprocess.run([sys.executable, "-c", SCRIPT, handler, str(granule), str(tmp_path / "out.h5")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    new = json.loads(done.stdout.strip().splitlines()[-1])
    # (h5py's dimension scales and repack's C module bound to h5py's HDF5 are loaded on first use: one each)
    assert len(new) <= 3, new
    assert not [m for m in new if m.split(".")[0] in ("numpy", "s3fs", "aiobotocore", "botocore", "h5coro", "zarr")]
