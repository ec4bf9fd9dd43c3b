"""Issue 23, memory on user-chosen sizes: a large attribute costs memory bounded by its size, and a value
that is left out is never read. Peak RSS is measured on the command (``run_layoutlab``: ``wait4``)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

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


# HDF5 reads a variable-length value whole, with ~5.5 copies of it in memory (HDF5 2.0: the heap
# collection, an image of it, a table 1.5 times its size, a conversion buffer and the value itself); a
# repack reads it once to copy it and once per file to verify it. What repack adds must stay within
# that one read: before, repack wrote the value twice (through a temporary root group) and --verify held
# both files' heaps and decoded both values into Python objects (1,581 MB for a 100 MiB string, against
# 582 MB for a copy alone).
HDF5_COPIES_OF_ONE_READ = 6


def test_repack_of_a_large_string_attribute_costs_one_hdf5_read_of_it_and_writes_it_once(tmp_path):
    size = 64 * MiB
    source = _string_attribute_file(tmp_path / "big.h5", size)
    small = _string_attribute_file(tmp_path / "small.h5", 16)
    code, _, stderr, baseline = run_layoutlab("repack", small, tmp_path / "small-out.h5", "--json", timeout=60)
    assert code == 0, stderr[-2000:]
    code, stdout, stderr, peak = run_layoutlab("repack", source, tmp_path / "out.h5", "--json", timeout=60)
    assert code == 0, stderr[-2000:]
    summary = json.loads(stdout)
    assert summary["verified"] is True, summary
    grown = peak - baseline
    assert grown < HDF5_COPIES_OF_ONE_READ * size, (
        f"repack --verify peaked {grown / MiB:.0f} MiB above a small file's for a {size // MiB} MiB string")
    # written once: the copy holds the value once (before: 2 x 100 MiB in the copy)
    assert (tmp_path / "out.h5").stat().st_size < 1.5 * size  # (paged: 88 MiB for 64; 2 x 64 + 24 before)
    with h5py.File(tmp_path / "out.h5") as f:
        assert len(f.attrs["history"]) == size


def test_verify_still_finds_a_large_attribute_that_differs(tmp_path):
    """The digest comparison of a large value sees one changed byte, and a changed length without reading."""
    from layoutlab.convert.repack_hdf5 import DEFERRED_ATTRIBUTE_BYTES, compare_files

    size = DEFERRED_ATTRIBUTE_BYTES + 1
    a = _string_attribute_file(tmp_path / "a.h5", size)
    with h5py.File(tmp_path / "b.h5", "w", libver="latest") as f:
        f["x"] = np.arange(3, dtype="f4")
        f.attrs["history"] = "a" * (size - 1) + "b"
    with h5py.File(tmp_path / "c.h5", "w", libver="latest") as f:
        f["x"] = np.arange(3, dtype="f4")
        f.attrs["history"] = "a" * (size + 1)
    with h5py.File(tmp_path / "d.h5", "w", libver="latest") as f:  # fixed-size values compared the same way
        f["x"] = np.arange(3, dtype="f4")
        f.attrs["history"] = np.frombuffer(b"a" * size, dtype="S1")
    assert compare_files(a, a) == []
    assert compare_files(a, tmp_path / "b.h5") == ["/: attribute 'history' differs"]
    assert compare_files(a, tmp_path / "c.h5") == [
        f"/: attribute 'history' differs (a value of {size} bytes became {size + 1})"]
    assert compare_files(tmp_path / "d.h5", tmp_path / "d.h5") == []
    assert compare_files(a, tmp_path / "d.h5") == ["/: attribute 'history' type changed"]


# --- issue 36: a deflate chunk that inflates far past its declared size (120 B declared, 512 MiB
# inflated) is refused, with the reason, in memory bounded by a small multiple of the declared size
# (before: HDF5's deflate doubled its buffer to the whole stream, 8.5 GB for 1 GiB, and the run said
# "verified" / exited 0 with the truncated chunk).

BOMB_INFLATED = 512 * MiB
BOUNDED_PEAK = 200 * MiB  # a small file's whole command (imports, HDF5, the guarded child), not the bomb


@pytest.fixture(scope="module")
def deflate_bomb_file(tmp_path_factory):
    from hostile_files import deflate_bomb

    return deflate_bomb(tmp_path_factory.mktemp("bomb") / "bomb.h5", BOMB_INFLATED)


@pytest.mark.parametrize("command", ["rechunk", "repack"])
def test_a_deflate_bomb_is_refused_with_its_reason_in_bounded_memory(command, deflate_bomb_file, tmp_path):
    out = tmp_path / ("out.zarr" if command == "rechunk" else "out.h5")
    extra = ("--no-progress",) if command == "rechunk" else ()
    code, stdout, stderr, peak = run_layoutlab(command, deflate_bomb_file, out, *extra, timeout=120)
    assert code == 2, (code, stdout[-500:], stderr[-2000:])
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(deflate_bomb_file) in lines[0], stderr
    assert "bomb" in lines[0] and "inflates past its declared size of 120 bytes" in lines[0], stderr
    assert peak < BOUNDED_PEAK, f"{command} peaked at {peak / MiB:.0f} MiB on a chunk declared 120 bytes"
    assert not out.exists()


def test_the_readers_refuse_a_deflate_bomb_and_read_the_sound_chunks(deflate_bomb_file):
    """The benchmark's h5py reader (and any reader inside ``within``) refuses the bomb chunk, not a
    truncation of it; the chunks around it read as written."""
    import resource

    from layoutlab.bench.readers import H5pyHandle
    from layoutlab.errors import damaged_reason
    from layoutlab.hdf5_input import open_input

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with open_input(deflate_bomb_file) as f:
        handle = H5pyHandle("hdf5", f)
        bomb = handle.array("/bomb")
        assert np.array_equal(bomb[:30], np.arange(30, dtype="f4"))
        assert np.array_equal(bomb[60:], np.arange(60, 300, dtype="f4"))
        with pytest.raises(OSError) as refused:
            bomb[30:60]
        assert "inflates past its declared size of 120 bytes" in damaged_reason(refused.value)
        import xarray as xr

        from layoutlab.bench.readers import _XarrayArray

        with xr.open_dataset(deflate_bomb_file, engine="h5netcdf", phony_dims="sort", decode_cf=False) as ds:
            through_xarray = _XarrayArray(ds["bomb"])  # (the bench's xarray reader: h5netcdf over h5py)
            assert np.array_equal(through_xarray[slice(0, 30)], np.arange(30, dtype="f4"))
            with pytest.raises(OSError) as refused:
                through_xarray[slice(30, 60)]
            assert "inflates past its declared size of 120 bytes" in damaged_reason(refused.value)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert grown < 64 * MiB, f"reading the bomb chunk grew the process by {grown / MiB:.0f} MiB"
