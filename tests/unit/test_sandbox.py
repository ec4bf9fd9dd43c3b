"""layoutlab/sandbox.py (Landlock confinement of a worker) and the pre-pass over virtual datasets' "." sources."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from layoutlab import sandbox
from layoutlab.guard import start_guarded
from layoutlab.hdf5_input import data_outside_file, open_input


def _try_opens(paths: list[str]) -> dict:
    opened = {}
    for path in paths:
        try:
            with open(path, "rb") as fh:
                fh.read(1)
            opened[path] = True
        except OSError:
            opened[path] = False
    return opened


@pytest.mark.skipif(not sandbox.landlock_abi(), reason="this kernel offers no Landlock")
def test_a_confined_worker_opens_its_input_and_scratch_and_nothing_else(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "mine").write_bytes(b"x")
    given = tmp_path / "input.h5"
    given.write_bytes(b"y")
    other = tmp_path / "other.txt"
    other.write_bytes(b"z")
    paths = [str(scratch / "mine"), str(given), str(other), "/etc/passwd", "/proc/1/environ", "/proc/self/environ",
             "/proc/self/mem", os.path.join(os.path.dirname(np.__file__), "__init__.py")]
    call = start_guarded(_try_opens, paths, path=str(given), confine=([str(given)], [str(scratch)]))
    opened = call.result()
    assert call.isolation.landlock and call.isolation.capabilities_dropped and call.isolation.reason is None
    assert opened == {str(scratch / "mine"): True, str(given): True, str(other): False, "/etc/passwd": False,
                      "/proc/1/environ": False, "/proc/self/environ": False, "/proc/self/mem": False,
                      paths[-1]: True}


def test_switched_off_the_worker_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYOUTLAB_SANDBOX", "0")
    call = start_guarded(_try_opens, [str(tmp_path)], path="x", confine=([], [str(tmp_path)]))
    call.result()
    assert not call.isolation.landlock and "LAYOUTLAB_SANDBOX=0" in call.isolation.reason


def _with_virtual(path, build):
    with h5py.File(path, "w") as f:
        f["plain"] = np.arange(8, dtype="u1")
        build(f)
    return path


def _vds(f, name, source, n=8):
    layout = h5py.VirtualLayout(shape=(n,), dtype="u1")
    layout[:] = h5py.VirtualSource(".", source, shape=(n,))
    f.create_virtual_dataset(name, layout, fillvalue=0)


@pytest.mark.parametrize("build, expected", [
    (lambda f: _vds(f, "v", "/plain"), None),  # inside the file: read as usual
    (lambda f: (f.__setitem__("soft", h5py.SoftLink("/plain")), _vds(f, "v", "/soft")), "a soft link"),
    (lambda f: (f.create_dataset("ext", shape=(8,), dtype="u1", external=[("/etc/passwd", 0, 8)]),
                _vds(f, "v", "/ext")), "external file(s) '/etc/passwd'"),
    (lambda f: (f.__setitem__("el", h5py.ExternalLink("/tmp/elsewhere.h5", "/x")), _vds(f, "v", "/el")),
     "an external link to /tmp/elsewhere.h5:/x"),
    (lambda f: _vds(f, "v", "/v"), "loop back"),
], ids=["inside", "soft-link", "external-storage", "external-link", "loop"])
def test_the_pre_pass_follows_a_virtual_datasets_sources_in_its_own_file(tmp_path, build, expected):
    path = _with_virtual(tmp_path / "f.h5", build)
    with open_input(path) as f:
        reason = data_outside_file(f["v"])
    if expected is None:
        assert reason is None
    else:
        assert expected in reason and "not read" in reason and "\n" not in reason, reason


def test_the_pre_pass_can_be_switched_off(tmp_path, monkeypatch):
    path = _with_virtual(tmp_path / "f.h5", lambda f: f.create_dataset(
        "v", shape=(8,), dtype="u1", external=[("/etc/passwd", 0, 8)]))
    monkeypatch.setenv("LAYOUTLAB_OUTSIDE_FILE_CHECK", "0")
    with open_input(path) as f:
        assert data_outside_file(f["v"]) is None
    monkeypatch.setenv("LAYOUTLAB_OUTSIDE_FILE_CHECK", "1")
    with open_input(path) as f:
        assert "external file(s)" in data_outside_file(f["v"])
