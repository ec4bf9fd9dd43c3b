"""The native repack engine (in _fastcopy.c): the Python engine's design, without h5py or numpy.

The round-trip table (test_hdf5_repack_roundtrip.py) runs every case through it
too; here: the benchmark's kinds of input, the command line's start-up, and what
it does with input it declines or cannot read.
"""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from layoutlab.convert import repack_native
from layoutlab.convert.repack import repack
from layoutlab.errors import BadInputFile
from layoutlab.samples import geos
from repack_helpers import h5dump_p, require_c_code, write_progress_input, write_sample

PAGE = 1 << 20


@pytest.fixture(autouse=True)
def native_engine(monkeypatch):
    monkeypatch.delenv("LAYOUTLAB_NATIVE_REPACK", raising=False)
    monkeypatch.delenv("LAYOUTLAB_REPACK_ENGINE", raising=False)  # (the default engine)
    require_c_code()


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-X", "importtime", "-m", "layoutlab.cli", "repack", *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("sample", ["atl03", "geos"])
def test_the_native_engine_writes_a_copy_that_verifies(tmp_path, sample):
    """(Both engines copy with H5Ocopy what does not change; their files need not be byte-identical,
    each output must pass --verify.)"""
    src = tmp_path / "in.h5"
    write_sample(sample, src)
    summary = repack(src, tmp_path / "out.h5", page_size=1 << 20, verify=True)
    assert summary.engine == "native" and summary.verified


def test_the_command_line_repacks_without_importing_h5py_or_numpy(tmp_path):
    src = tmp_path / "geos.nc"
    geos.write_geos(src, shape=(24, 91, 144))
    done = _cli(src, tmp_path / "out.h5", "--page-size", "1MiB", "--no-verify",
                env={**os.environ, "LAYOUTLAB_REPACK_ENGINE": "native"})
    assert done.returncode == 0, done.stderr
    assert "native engine" in done.stdout.splitlines()[0]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert not {name for name in imported if name.split(".")[0] in ("h5py", "numpy")}
    with h5py.File(tmp_path / "out.h5") as f, h5py.File(src) as g:
        np.testing.assert_array_equal(f["BCEXTTAU"][:], g["BCEXTTAU"][:])


def test_what_the_native_engine_declines_the_python_engine_writes_and_says_why(tmp_path):
    src = tmp_path / "links.h5"
    with h5py.File(src, "w") as f:
        f["data"] = np.arange(10)
        f["alias"] = h5py.SoftLink("/data")
    done = _cli(src, tmp_path / "out.h5")
    assert done.returncode == 0, done.stderr
    assert "python engine" in done.stdout
    assert "note: written by the Python engine: the native engine declined: /alias is a soft, external or user-defined link" in done.stdout
    with h5py.File(tmp_path / "out.h5") as f:
        assert f.get("alias", getlink=True).path == "/data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["links.h5", "out.h5"]


def test_a_damaged_file_is_named_with_the_reason_and_nothing_is_written(tmp_path):
    full, src = tmp_path / "full.h5", tmp_path / "cut.h5"
    with h5py.File(full, "w") as f:
        f.create_dataset("v", data=np.random.default_rng(0).normal(size=100_000), chunks=(1000,))
    src.write_bytes(full.read_bytes()[:50_000])
    full.unlink()
    done = _cli(src, tmp_path / "out.h5")
    assert done.returncode == 2
    message = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert len(message) == 1 and str(src) in message[0] and "truncated" in message[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.h5"]
    with pytest.raises(BadInputFile, match="truncated"):
        repack(src, tmp_path / "out.h5")


def test_progress_counts_every_stored_byte_once(tmp_path):
    src = tmp_path / "in.h5"
    stored = write_progress_input(src, contiguous=True)
    reported = []
    summary = repack(src, tmp_path / "out.h5", page_size=PAGE, progress=reported.append)
    assert summary.engine == "native"
    assert sum(reported) == stored


def test_it_can_be_turned_off(tmp_path, monkeypatch):
    src = tmp_path / "in.h5"
    with h5py.File(src, "w") as f:
        f["v"] = np.arange(10)
    monkeypatch.setenv("LAYOUTLAB_NATIVE_REPACK", "0")
    summary = repack(src, tmp_path / "out.h5")
    assert summary.engine == "python"
    assert summary.notes == ["written by the Python engine: the native engine is turned off (LAYOUTLAB_NATIVE_REPACK=0)"]


def test_a_damaged_chunk_found_by_verify_is_named_and_nothing_is_written(tmp_path):
    """Stored chunks are copied without decoding, so a corrupt compressed chunk reaches --verify:
    that is a bad input too, not a crash."""
    src = tmp_path / "in.h5"
    with h5py.File(src, "w") as f:
        d = f.create_dataset("v", data=np.arange(100_000, dtype="f8"), chunks=(10_000,), compression="gzip")
        chunk = d.id.get_chunk_info(3)
    data = bytearray(src.read_bytes())
    data[chunk.byte_offset + 10 : chunk.byte_offset + 60] = b"\xff" * 50
    src.write_bytes(bytes(data))
    # The chunk is copied as stored, byte for byte; --verify then decodes the chunks it found identical
    # (issue 23: a corrupt chunk had been copied and "verified"), names the input and the dataset, and
    # the command leaves no output.
    with pytest.raises(BadInputFile, match=r"in\.h5: a stored chunk of /v in \[\d+:\d+\] cannot be decoded \(damaged data\)"):
        repack(src, tmp_path / "out.h5", verify=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5"]
    # without --verify the bytes are copied as they are (a chunk whose filter plugin is missing copies too)
    repack(src, tmp_path / "out.h5", verify=False)
    with h5py.File(src) as a, h5py.File(tmp_path / "out.h5") as b:
        assert a["v"].id.read_direct_chunk((30_000,)) == b["v"].id.read_direct_chunk((30_000,))


def test_a_native_copy_that_fails_verify_is_thrown_away_and_the_python_engine_writes_it(tmp_path, monkeypatch):
    """A difference --verify finds in the native engine's copy is our bug, never the input's: the
    user still gets a verified copy, and the summary says what happened."""
    from layoutlab.convert import repack_hdf5

    src = tmp_path / "in.h5"
    write_sample("geos", src)
    real_compare, calls = repack_hdf5.compare_files, []

    def first_copy_differs(a, b, **options):
        calls.append(b)
        return ["/BCEXTTAU: values differ (simulated)"] if len(calls) == 1 else real_compare(a, b, **options)

    monkeypatch.setattr(repack_hdf5, "compare_files", first_copy_differs)
    summary = repack(src, tmp_path / "out.h5", page_size=PAGE, verify=True)
    assert summary.engine == "python" and summary.verified and len(calls) == 2
    assert "the native engine wrote a copy that failed --verify" in summary.notes[-1]
    assert "values differ (simulated)" in summary.notes[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5", "out.h5"]

