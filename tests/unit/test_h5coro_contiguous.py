"""h5coro 1.0.7 returns zeros for a contiguous dataset's rows not starting at 0 (found by ARM's surface-met day:
6 cases read values other than the original's). The bench's h5coro arrays read such rows from row 0.

Each check runs in a new interpreter: h5coro leaves threads running in the process that read with it, and a
later test's forked worker could wait forever on a lock one of them held."""

from __future__ import annotations

import json
import subprocess
import sys

import h5py
import numpy as np

READ_AS_H5CORO_DOES = """
import json, sys
import numpy as np
from h5coro import h5coro as core
from h5coro.filedriver import FileDriver
h5 = core.H5Coro(sys.argv[1], FileDriver, errorChecking=True)
promise = h5.readDatasets([{"dataset": "/series", "hyperslice": [(50, 53)]}], block=True)
print(json.dumps(np.asarray(promise["series"]).tolist()))
"""

READ_AS_THE_BENCH_DOES = """
import json, sys
import numpy as np
from h5coro import h5coro as core
from h5coro.filedriver import FileDriver
from layoutlab.bench.readers import H5CORO_CONTIGUOUS_FROM_ROW_0, _H5coroArray
settings = {}
h5 = core.H5Coro(sys.argv[1], FileDriver, errorChecking=True)
indexes = [("series", np.s_[50:53]), ("series", np.s_[0:4]), ("series", 70), ("table", np.s_[2:4, 3:5]),
           ("table", 5), ("chunked", np.s_[5:17])]
got = [np.asarray(_H5coroArray(h5, name, settings)[index]).tolist() for name, index in indexes]
print(json.dumps({"got": got, "said": settings == {"contiguous_rows": H5CORO_CONTIGUOUS_FROM_ROW_0}}))
"""


def _file(tmp_path):
    path = tmp_path / "contiguous.h5"
    with h5py.File(path, "w") as f:
        f["series"] = np.arange(100, dtype="f4") + 1
        f["table"] = (np.arange(60, dtype="f8") + 1).reshape(6, 10)
        f.create_dataset("chunked", data=np.arange(100, dtype="f4") + 1, chunks=(10,))
    return path


def _run(script: str, path) -> object:
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_h5coro_itself_still_reads_zeros_past_row_0_of_a_contiguous_dataset(tmp_path):
    """The defect the workaround is for: when h5coro mends it, this fails and the workaround can go."""
    assert _run(READ_AS_H5CORO_DOES, _file(tmp_path)) == [0, 0, 0]


def test_the_bench_reads_the_right_rows_of_contiguous_and_chunked_datasets_and_says_how(tmp_path):
    path = _file(tmp_path)
    out = _run(READ_AS_THE_BENCH_DOES, path)
    with h5py.File(path) as f:
        expected = [f["series"][50:53], f["series"][0:4], f["series"][70], f["table"][2:4, 3:5], f["table"][5],
                    f["chunked"][5:17]]
    assert out["got"] == [np.asarray(e).tolist() for e in expected]
    assert out["said"]
