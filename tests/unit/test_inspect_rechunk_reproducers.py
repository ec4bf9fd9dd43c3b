"""``layoutlab inspect`` and ``layoutlab rechunk`` on generated reproducers of the classes issue 15 found.

The shared-corpus tests (tests/integration/test_corpus_inspect.py, test_corpus_rechunk.py) run the
third-party files; tests/integration/test_zarr_rechunk_real_files.py already reproduces groups in a
NetCDF file, strings and char arrays, packing, and the speed on 602 empty variables through the
Python API. Here, through the command line as a user runs it: unlimited-dimension lengths judged
by ``ncdump -h``, a plain HDF5 file whose arrays all live in groups, and what 600 empty variables
write.
"""

from __future__ import annotations

import json
import shutil

import h5py
import netCDF4
import numpy as np
import pytest
import zarr
from shared_corpus import ncdump_unlimited_lengths

from repack_helpers import run_layoutlab, write_netcdf40_file

needs_ncdump = pytest.mark.skipif(shutil.which("ncdump") is None, reason="needs netcdf-bin (make sysdeps)")


def _netcdf4_in_groups(path):
    """netCDF-4 as the library writes it today: unlimited dimensions without coordinate variables,
    one grown by a variable in a sub-group, one by a variable using two unlimited dimensions."""
    with netCDF4.Dataset(path, "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("rec", None)
        nc.createDimension("unused", None)
        signal = nc.createVariable("signal", "i4", ("rec", "time"))
        signal[0:3, 0:4] = np.ones((3, 4), "i4")
        beam = nc.createGroup("beam")
        beam.createDimension("photon", None)
        heights = beam.createVariable("heights", "f4", ("photon", "time"))
        heights[0:5, 0:6] = np.zeros((5, 6), "f4")  # the root's time: 6


WRITERS = {
    "netcdf4-groups": _netcdf4_in_groups,
    "netcdf-4.0": write_netcdf40_file,
    "netcdf-4.0-variables-fixed": lambda path: write_netcdf40_file(path, variables_fixed=True),
}


@needs_ncdump
@pytest.mark.parametrize("kind", [
    "netcdf4-groups",
    "netcdf-4.0",
    "netcdf-4.0-variables-fixed",
])
def test_inspect_reports_unlimited_lengths_as_ncdump_does(tmp_path, kind):
    """inspect reported 0 for 13 of 24 unlimited dimensions in 10 files (`time=0` where ncdump says 2)."""
    path = tmp_path / f"{kind}.nc"
    WRITERS[kind](path)
    expected = ncdump_unlimited_lengths(path)
    assert expected and any(expected.values())
    status, stdout, stderr, _ = run_layoutlab("inspect", "--json", path)
    assert status == 0 and "Traceback" not in stderr, stderr
    lengths = {d["name"]: d["length"] for d in json.loads(stdout)["hdf5"]["netcdf_unlimited_dimensions"]}
    assert lengths == expected
    status, text, stderr, _ = run_layoutlab("inspect", path)
    assert status == 0, stderr
    for name, length in expected.items():
        assert f"{name.lstrip('/')}={length}" in text


def test_a_plain_hdf5_file_whose_arrays_all_live_in_groups_is_converted(tmp_path):
    """A file whose 111 arrays all live in groups was refused with "holds no array variables"; arrays
    in sub-groups were left out silently (exit 0, "skipped": []). Each group becomes a Zarr group;
    what cannot be written is listed in the record with its path and reason."""
    src, dst = tmp_path / "groups.h5", tmp_path / "groups.zarr"
    written = {}
    with h5py.File(src, "w") as f:
        f.attrs["title"] = "arrays only in groups"
        for k, beam in enumerate(("gt1l", "gt2r")):
            beam_group = f.create_group(beam)
            beam_group.attrs["beam"] = beam
            heights = beam_group.create_group("heights")
            heights["h_ph"] = written[f"{beam}/heights/h_ph"] = np.arange(20, dtype="f4") + k
            heights["label"] = written[f"{beam}/heights/label"] = np.array([b"ab", b"cd"], "S2")
            heights["quality"] = written[f"{beam}/heights/quality"] = np.arange(6, dtype="i2").reshape(2, 3)
            heights["pairs"] = np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")])
    status, stdout, stderr, _ = run_layoutlab("rechunk", src, dst, "--no-progress")
    assert status == 0 and "Traceback" not in stderr, stderr
    record = json.loads(stdout)
    assert {(s["variable"], "compound type" in s["reason"]) for s in record["skipped"]} == {
        ("gt1l/heights/pairs", True), ("gt2r/heights/pairs", True)}
    assert "not copied: variable gt1l/heights/pairs" in stderr  # said on the terminal too
    root = zarr.open_group(dst, mode="r")
    assert root.attrs["title"] == "arrays only in groups"
    assert sorted(root.group_keys()) == ["gt1l", "gt2r"] and root["gt2r"].attrs["beam"] == "gt2r"
    for path, values in written.items():
        assert root[path][...].tolist() == values.tolist(), path
        assert root[path].dtype == values.dtype or values.dtype.kind == "S", path
    assert "pairs" not in root["gt1l/heights"]


def _stored_chunks(array_dir) -> list:
    return [p for p in (array_dir / "c").rglob("*") if p.is_file()] if (array_dir / "c").exists() else []


def test_six_hundred_empty_variables_write_metadata_only(tmp_path):
    """602 empty variables took 153 s. An empty variable costs metadata: no work unit, no chunk."""
    src, dst = tmp_path / "empty.nc", tmp_path / "empty.zarr"
    with netCDF4.Dataset(src, "w") as nc:
        nc.createDimension("time", None)  # nothing written along it: every variable using it is empty
        nc.createDimension("lat", 4)
        for k in range(600):
            nc.createVariable(f"v{k}", "f4", ("time", "lat")).long_name = f"empty {k}"
        nc.createVariable("lat", "f4", ("lat",))[:] = np.arange(4)
    status, stdout, stderr, _ = run_layoutlab("rechunk", src, dst, "--no-progress")
    assert status == 0 and "Traceback" not in stderr, stderr
    record = json.loads(stdout)
    assert record["skipped"] == [] and record["units"] == 1  # one unit: lat, the only variable with values
    root = zarr.open_group(dst, mode="r")
    empty = [name for name in root.array_keys() if name != "lat"]
    assert len(empty) == 600
    assert all(root[name].shape == (0, 4) and root[name].attrs["long_name"] == f"empty {name[1:]}" for name in empty)
    assert not [name for name in empty if _stored_chunks(dst / name)]
    assert len(_stored_chunks(dst / "lat")) == 1
