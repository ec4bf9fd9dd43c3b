"""``attribute_value_bytes``: what an attribute's value holds, known without reading a variable-length
value (its lengths come from the descriptors, through a conversion registered with HDF5)."""

from __future__ import annotations

import h5py
import numpy as np

from layoutlab.hdf5_input import attribute_value_bytes


def _sizes(path) -> dict:
    with h5py.File(path) as f:
        return {name: attribute_value_bytes(h5py.h5a.open(f.id, name.encode())) for name in f.attrs}


def test_sizes_of_fixed_variable_and_empty_values(tmp_path):
    path = tmp_path / "attrs.h5"
    with h5py.File(path, "w") as f:
        f.attrs["strings"] = ["ab", "cde", ""]
        f.attrs["utf8"] = "héllo"  # 6 bytes in UTF-8
        f.attrs.create("sequences", [np.arange(3, dtype="i4"), np.arange(5, dtype="i4")], dtype=h5py.vlen_dtype("i4"))
        f.attrs["number"] = 5
        f.attrs["floats"] = np.zeros(10)
        f.attrs["fixed"] = np.bytes_("abcd")
        f.attrs.create("empty", h5py.Empty("f4"))
        f.attrs.create("compound", np.array([(1, "x")], dtype=[("a", "i4"), ("b", h5py.string_dtype())]))
    assert _sizes(path) == {"strings": 5, "utf8": 6, "sequences": 32, "number": 8, "floats": 80, "fixed": 4,
                            "empty": 0, "compound": None}  # (variable-length inside a compound: unknown)
    with h5py.File(path) as f:  # the values themselves read as before (the conversion is only ever ours)
        assert list(f.attrs["strings"]) == ["ab", "cde", ""] and f.attrs["utf8"] == "héllo"
        assert [list(v) for v in f.attrs["sequences"]] == [[0, 1, 2], [0, 1, 2, 3, 4]]


def test_a_large_string_is_sized_without_being_read(tmp_path):
    import resource

    path = tmp_path / "big.h5"
    size = 48 << 20
    with h5py.File(path, "w", libver="latest") as f:
        f.attrs["history"] = "a" * size
    import gc

    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with h5py.File(path) as f:
        assert attribute_value_bytes(h5py.h5a.open(f.id, b"history")) == size
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    # (peak of this process: read, the value would take at least its size, and HDF5 2.0 ~5.5 times it)
    assert grown < size // 4, f"peak grew by {grown / 2**20:.0f} MiB sizing a {size >> 20} MiB string"


def test_sizing_works_after_h5py_has_read_variable_length_values(tmp_path):
    """In a fresh process h5py reads sequences and strings first (its own variable-length -> opaque
    conversion paths then exist; HDF5 2.0 refused an opaque marker's registration after that)."""
    import subprocess
    import sys

    path = tmp_path / "seq.h5"
    with h5py.File(path, "w") as f:
        f.attrs.create("sequences", [np.arange(3, dtype="f4"), np.arange(1, dtype="f4")], dtype=h5py.vlen_dtype("f4"))
        f.attrs["names"] = ["x", "yy"]
    script = (
        "import sys, h5py\n"
        "from layoutlab.hdf5_input import attribute_value_bytes\n"
        "f = h5py.File(sys.argv[1])\n"
        "f.attrs['sequences'], f.attrs['names']\n"
        "print([attribute_value_bytes(h5py.h5a.open(f.id, n)) for n in (b'sequences', b'names')])\n")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[16, 3]"
