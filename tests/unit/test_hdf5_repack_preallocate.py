"""repack reserves the output's disk space up front (cheaper writes) and gives back what it did
not use: the file is the same, and takes no more disk than without the reservation."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from layoutlab.convert.repack_hdf5 import compare_files, repack

PAGE = 1 << 20


@pytest.fixture
def padded_source(tmp_path):
    """Chunks of 400 kB: two per 1 MiB page, a quarter of every page left unused."""
    src = tmp_path / "in.h5"
    rng = np.random.default_rng(3)
    with h5py.File(src, "w") as f:
        f.create_dataset("x", data=rng.normal(size=(40, 100_000)).astype("f4"), chunks=(1, 100_000))
    return src


def _disk_bytes(path) -> int:
    return os.stat(path).st_blocks * 512


def test_preallocated_output_is_the_same_file_and_as_sparse(tmp_path, monkeypatch, padded_source):
    repack(padded_source, tmp_path / "reserved.h5", page_size=PAGE)
    monkeypatch.setenv("LAYOUTLAB_PREALLOCATE", "0")
    repack(padded_source, tmp_path / "plain.h5", page_size=PAGE)
    reserved, plain = tmp_path / "reserved.h5", tmp_path / "plain.h5"
    assert reserved.stat().st_size == plain.stat().st_size
    assert compare_files(reserved, plain) == []
    # Nothing reserved is kept: not past the end, not in the unused quarter of each page.
    assert _disk_bytes(reserved) <= _disk_bytes(plain) + 64 * 1024
    assert _disk_bytes(reserved) < 0.9 * reserved.stat().st_size  # the page padding stays unallocated


def test_a_file_system_that_cannot_reserve_space_still_gets_the_file(tmp_path, monkeypatch, padded_source):
    import ctypes

    class NoFallocate:
        def __init__(self, *args, **kwargs):
            pass

        def __getattr__(self, name):
            raise AttributeError(name)

    monkeypatch.setattr(ctypes, "CDLL", NoFallocate)
    summary = repack(padded_source, tmp_path / "out.h5", page_size=PAGE, verify=True)
    assert summary.verified
