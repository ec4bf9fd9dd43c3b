"""--verify's attribute comparison: plain values in C (fastcopy.same_plain_attributes), the rest and
every wording in Python (repack_hdf5._compare_attribute); both find the same differences."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from layoutlab.convert import repack_hdf5
from layoutlab.convert.repack_hdf5 import compare_files


@pytest.mark.parametrize("c_code", ["1", "0"], ids=["attributes compared in C", "in Python"])
def test_compare_files_words_every_kind_of_attribute_difference(tmp_path, monkeypatch, c_code):
    """--verify's attribute check (C for plain values, Python for the rest and for the wording) finds a
    changed value, type, shape, a missing/extra name, and a changed variable-length value."""
    monkeypatch.setenv("LAYOUTLAB_FASTCOPY", c_code)
    monkeypatch.setattr(repack_hdf5.fastcopy, "_module", None)
    monkeypatch.setattr(repack_hdf5.fastcopy, "_unavailable_reason", None)

    def write(path, **changes):
        attrs = {"units": np.bytes_("m"), "scale": np.float32(0.5), "valid": np.arange(3, dtype="i4"),
                 "note": "a variable-length string", "only_in_a": 1, **changes}
        with h5py.File(path, "w") as f:
            f["v"] = np.arange(4)
            for name, value in attrs.items():
                if value is not None:
                    f["v"].attrs[name] = value
        return path

    a = write(tmp_path / "a.h5")
    assert compare_files(a, write(tmp_path / "same.h5")) == []
    cases = {
        "scale": ({"scale": np.float32(0.25)}, "/v: attribute 'scale' differs"),
        "type": ({"scale": np.float64(0.5)}, "/v: attribute 'scale' type changed"),
        "shape": ({"valid": np.arange(4, dtype="i4")}, "/v: attribute 'valid' shape changed"),
        "names": ({"only_in_a": None, "only_in_b": 1}, "/v: attributes differ: ['only_in_a', 'only_in_b']"),
        "vlen": ({"note": "another string"}, "/v: attribute 'note' differs"),
    }
    for label, (changes, expected) in cases.items():
        assert compare_files(a, write(tmp_path / f"{label}.h5", **changes)) == [expected], label
    assert repack_hdf5.fastcopy.available() is (c_code == "1")
