"""layoutlab.bounded_decoding: deflate decoding bounded by the declared chunk size, writing unchanged."""

from __future__ import annotations

import subprocess
import sys
import zlib

import h5py
import numpy as np
import pytest

WRITE = """
import sys, h5py, numpy as np
if sys.argv[2] == "bounded":
    from layoutlab import bounded_decoding
    assert bounded_decoding.install() is None
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("a", data=np.random.default_rng(0).random((60, 60)), chunks=(10, 10), compression="gzip",
                     shuffle=True, fletcher32=True)
"""


def test_files_written_with_the_bounded_filter_installed_are_byte_for_byte_hdf5s(tmp_path):
    # (the filter's name is written into each dataset's pipeline message, and its encoding is HDF5's own)
    for how in ("hdf5", "bounded"):
        subprocess.run([sys.executable, "-c", WRITE, str(tmp_path / f"{how}.h5"), how], check=True)
    assert (tmp_path / "hdf5.h5").read_bytes() == (tmp_path / "bounded.h5").read_bytes()


def test_a_chunk_is_refused_past_its_declared_size_and_read_up_to_it(tmp_path):
    from layoutlab import bounded_decoding
    from layoutlab.hdf5_input import open_input

    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        d = f.create_dataset("d", shape=(40,), dtype="i2", chunks=(10,), compression="gzip")
        d[:] = np.arange(40, dtype="i2")
        d.id.write_direct_chunk((10,), zlib.compress(np.arange(11, dtype="i2").tobytes()))  # 22 bytes of 20
        d.id.write_direct_chunk((20,), zlib.compress(np.arange(10, dtype="i2").tobytes())[:-6])  # cut short
    with open_input(path) as f:
        d = f["d"]
        with bounded_decoding.within(d):
            assert np.array_equal(d[:10], np.arange(10))
            assert np.array_equal(d[30:], np.arange(30, 40))
            with pytest.raises(OSError):
                d[10:20]
            assert "past its declared size of 20 bytes" in bounded_decoding.take_refusal()
            with pytest.raises(OSError):
                d[20:30]
            assert "ends early" in bounded_decoding.take_refusal()
        assert bounded_decoding.take_refusal() is None


def test_a_compound_of_variable_length_strings_is_bounded_by_its_stored_size_not_its_memory_size(tmp_path):
    """A vlen string is a pointer (8 bytes) in memory but 16 in a stored chunk: sized from memory, a valid
    deflated compound of strings was refused as a bomb (the repack round-trip table's /compound)."""
    import h5py
    import numpy as np

    from layoutlab.bounded_decoding import declared_chunk_bytes, install, within

    install()
    dtype = np.dtype([("name", h5py.string_dtype()), ("n", "<i2"), ("seq", h5py.vlen_dtype("<i4"))])
    path = tmp_path / "vlen.h5"
    with h5py.File(path, "w") as f:
        data = np.array([("a" * 40, 1, np.arange(3, dtype="<i4")), ("b", 2, np.arange(5, dtype="<i4"))],
                        dtype=dtype)
        f.create_dataset("c", data=data, chunks=(2,), compression="gzip")
    with h5py.File(path, "r") as f:
        assert declared_chunk_bytes(f["c"]) == 2 * (16 + 2 + 16)
        with within(f["c"]):
            back = f["c"][:]
    assert back["name"][0] == b"a" * 40 and list(back["seq"][1]) == [0, 1, 2, 3, 4]
