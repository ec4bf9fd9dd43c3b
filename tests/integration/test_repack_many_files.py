"""``layoutlab repack IN... --out-dir DIR``: many files in one run, a failing file among good ones."""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np

from layoutlab.cli import main
from layoutlab.convert.repack_hdf5 import compare_files

PAGE = 1 << 20


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "layoutlab.cli", "repack", *map(str, args)],
                          capture_output=True, text=True, env=dict(os.environ), timeout=300)


def _good(path, seed):
    with h5py.File(path, "w") as f:
        g = f.create_group("grp")
        g.attrs["units"] = "m"
        g.create_dataset("v", data=np.random.default_rng(seed).normal(size=50_000), chunks=(5_000,),
                         compression="gzip", maxshape=(None,))
        f.create_dataset("t", data=np.arange(100, dtype="i4"))
    return path


def _damaged_chunk(path):
    """An HDF5 file that opens, with one compressed chunk overwritten: --verify's decode check names it."""
    with h5py.File(path, "w") as f:
        d = f.create_dataset("v", data=np.arange(100_000, dtype="f8"), chunks=(10_000,), compression="gzip")
        chunk = d.id.get_chunk_info(3)
    data = bytearray(path.read_bytes())
    data[chunk.byte_offset + 10: chunk.byte_offset + 60] = b"\xff" * 50
    path.write_bytes(bytes(data))
    return path


def test_a_failing_file_among_good_ones_is_reported_and_the_others_are_written_and_verified(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    good = [_good(inputs / f"good{i}.h5", i) for i in range(3)]
    not_hdf5 = inputs / "notes.h5"
    not_hdf5.write_text("not an HDF5 file\n")
    damaged = _damaged_chunk(inputs / "damaged.h5")
    out = tmp_path / "out"
    done = _cli(good[0], not_hdf5, good[1], damaged, good[2], "--out-dir", out, "--page-size", "1MiB", "--jobs", "2")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 6  # one a file, in the order given, then the summary
    assert [line.split()[0] for line in lines[:5]] == ["ok", "FAILED", "ok", "FAILED", "ok"]
    assert str(not_hdf5) in lines[1] and "not HDF5" in lines[1]
    assert str(damaged) in lines[3] and "cannot be decoded" in lines[3]
    assert all("verified" in line for line in lines[0:5:2])
    assert lines[5].startswith("repacked 3 of 5 files") and "2 failed" in lines[5]
    assert sorted(p.name for p in out.iterdir()) == ["good0.h5", "good1.h5", "good2.h5"]  # (no partial file left)
    for path in good:
        assert compare_files(path, out / path.name) == []
        with h5py.File(out / path.name) as f:
            assert f.id.get_create_plist().get_file_space_page_size() == PAGE
            assert f["grp/v"].maxshape == (50_000,)  # (the recipe ran: unlimited fixed)


def test_directories_and_globs_expand_and_all_good_exits_zero(tmp_path, capsys):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    _good(first / "x.h5", 1)
    _good(first / "y.h5", 2)
    _good(second / "z.h5", 3)
    (second / "skip.txt").write_text("not matched by the pattern\n")
    out = tmp_path / "out"
    code = main(["repack", str(first), str(second / "*.h5"), "--out-dir", str(out), "--no-verify", "--jobs", "1"])
    printed = capsys.readouterr().out.strip().splitlines()
    assert code == 0
    assert [line.split()[0] for line in printed[:3]] == ["ok", "ok", "ok"]
    assert "not verified" in printed[0]
    assert printed[3].startswith("repacked 3 of 3 files") and "0 failed" in printed[3]
    assert sorted(p.name for p in out.iterdir()) == ["x.h5", "y.h5", "z.h5"]


def test_two_inputs_of_the_same_name_and_a_pattern_matching_nothing_are_refused_before_any_work(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        _good(tmp_path / folder / "same.h5", 0)
    out = tmp_path / "out"
    done = _cli(tmp_path / "a" / "same.h5", tmp_path / "b" / "same.h5", "--out-dir", out)
    assert done.returncode == 2 and "the same file name" in done.stderr and not out.exists()
    done = _cli(tmp_path / "nothing*.h5", "--out-dir", out)
    assert done.returncode == 2 and "no file matches" in done.stderr


def test_the_single_form_keeps_working_and_wants_two_paths(tmp_path):
    src = _good(tmp_path / "in.h5", 5)
    done = _cli(src, tmp_path / "out.h5", "--page-size", "1MiB")
    assert done.returncode == 0, done.stderr
    assert "verified: decoded data and attributes identical" in done.stdout
    done = _cli(src)
    assert done.returncode == 2 and "expected IN OUT" in done.stderr
    done = _cli(src, tmp_path / "o.h5", "--jobs", "2")
    assert done.returncode == 2 and "--jobs" in done.stderr


def test_json_lists_every_file(tmp_path, capsys):
    import json

    src = _good(tmp_path / "in.h5", 5)
    code = main(["repack", str(src), str(tmp_path / "missing.h5"), "--out-dir", str(tmp_path / "out"), "--json"])
    record = json.loads(capsys.readouterr().out)
    assert code == 1
    assert [f["written"] for f in record["files"]] == [True, False]
    assert record["files"][0]["verified"] is True and "no such file" in record["files"][1]["error"]
    assert (record["written"], record["failed"]) == (1, 1)


def test_each_file_is_worked_on_by_a_process_that_cannot_read_the_callers_credentials(tmp_path, monkeypatch):
    """What a crafted file could make its worker do is done without the cloud credentials of the shell that
    ran ``layoutlab repack`` (the worker decodes the file's chunks itself, in many-files mode)."""
    import layoutlab.convert.repack_many as many
    from layoutlab.guard import _can_guard

    if not _can_guard():
        import pytest

        pytest.skip("no fork here: files are repacked in the calling process")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "canary-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "canary-token")
    seen = tmp_path / "seen.txt"

    def look(in_path, out_path, page_size, budget, options):  # (what the worker's environment holds)
        seen.write_text(repr(sorted(k for k, v in os.environ.items() if v.startswith("canary"))) +
                        f" check_here={options.get('check_here')}")
        return ("skipped", "looked")

    monkeypatch.setattr(many, "_repack_one", look)
    src = _good(tmp_path / "in.h5", 1)
    results = many.repack_many([src], [tmp_path / "out" / "in.h5"], PAGE, 0.0, {"verify": True}, workers=1)
    assert results[0].skipped == "looked"
    assert seen.read_text() == "[] check_here=True"
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == "canary-secret"  # (the caller keeps its own)
