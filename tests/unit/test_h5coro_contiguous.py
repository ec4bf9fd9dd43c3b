"""h5coro 1.0.7 returns zeros for a contiguous dataset's rows not starting at 0 (found by ARM's surface-met day:
6 cases read values other than the original's). The bench's h5coro arrays read such rows from row 0."""

from __future__ import annotations

import h5py
import numpy as np


def _file(tmp_path):
    path = tmp_path / "contiguous.h5"
    with h5py.File(path, "w") as f:
        f["series"] = np.arange(100, dtype="f4") + 1
        f["table"] = (np.arange(60, dtype="f8") + 1).reshape(6, 10)
        f.create_dataset("chunked", data=np.arange(100, dtype="f4") + 1, chunks=(10,))
    return path


def test_h5coro_itself_still_reads_zeros_past_row_0_of_a_contiguous_dataset(tmp_path):
    """The defect the workaround is for: when h5coro mends it, this fails and the workaround can go."""
    from h5coro import h5coro as core
    from h5coro.filedriver import FileDriver

    h5 = core.H5Coro(str(_file(tmp_path)), FileDriver, errorChecking=True)
    promise = h5.readDatasets([{"dataset": "/series", "hyperslice": [(50, 53)]}], block=True)
    assert np.asarray(promise["series"]).tolist() == [0, 0, 0]


def test_the_bench_reads_the_right_rows_of_contiguous_and_chunked_datasets_and_says_how(tmp_path):
    from h5coro import h5coro as core
    from h5coro.filedriver import FileDriver

    from layoutlab.bench.readers import H5CORO_CONTIGUOUS_FROM_ROW_0, _H5coroArray

    path = _file(tmp_path)
    settings: dict = {}
    h5 = core.H5Coro(str(path), FileDriver, errorChecking=True)
    with h5py.File(path) as f:
        for name, index in [("series", np.s_[50:53]), ("series", np.s_[0:4]), ("series", 70),
                            ("table", np.s_[2:4, 3:5]), ("table", 5), ("chunked", np.s_[5:17])]:
            got = _H5coroArray(h5, name, settings)[index]
            assert np.array_equal(got, f[name][index]), (name, index, got)
    assert settings == {"contiguous_rows": H5CORO_CONTIGUOUS_FROM_ROW_0}
