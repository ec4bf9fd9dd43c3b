"""``layoutlab repack`` as users run it: the benchmark's kinds of input, damaged input, and a copy that fails --verify.

The round-trip table (test_hdf5_repack_roundtrip.py) checks what each kind of object becomes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from layoutlab.convert.repack import repack
from layoutlab.convert.repack_common import CopyDiffers
from layoutlab.errors import BadInputFile
from repack_helpers import write_sample

PAGE = 1 << 20


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "layoutlab.cli", "repack", *map(str, args)],
                          capture_output=True, text=True, env=dict(os.environ))


@pytest.mark.parametrize("sample", ["atl03", "geos"])
def test_the_benchmark_inputs_repack_verified_from_the_command_line(tmp_path, sample):
    src = tmp_path / "in.h5"
    write_sample(sample, src)
    done = _cli(src, tmp_path / "out.h5", "--page-size", "1MiB")
    assert done.returncode == 0, done.stderr
    assert "  verified: decoded data and attributes identical" in done.stdout
    assert "every stored chunk of the input decoded beside the copy" in done.stdout
    with h5py.File(tmp_path / "out.h5") as f:
        assert f.id.get_create_plist().get_file_space_page_size() == PAGE


def test_a_damaged_file_is_named_with_the_reason_and_nothing_is_written(tmp_path):
    full, src = tmp_path / "full.h5", tmp_path / "cut.h5"
    with h5py.File(full, "w") as f:
        f.create_dataset("v", data=np.random.default_rng(0).normal(size=100_000), chunks=(1000,))
    src.write_bytes(full.read_bytes()[:50_000])
    full.unlink()
    done = _cli(src, tmp_path / "out.h5")
    assert done.returncode == 2
    message = done.stderr.strip().splitlines()
    assert len(message) == 1 and str(src) in message[0] and "truncated" in message[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.h5"]
    with pytest.raises(BadInputFile, match="truncated"):
        repack(src, tmp_path / "out.h5")


def test_a_damaged_chunk_is_copied_as_stored_without_verify(tmp_path):
    """(--verify names it: test_decode_check.py.) Without the check the bytes are copied as they are,
    as h5repack copies them: a chunk whose filter plugin is missing here copies the same way."""
    src = tmp_path / "in.h5"
    with h5py.File(src, "w") as f:
        d = f.create_dataset("v", data=np.arange(100_000, dtype="f8"), chunks=(10_000,), compression="gzip")
        chunk = d.id.get_chunk_info(3)
    data = bytearray(src.read_bytes())
    data[chunk.byte_offset + 10 : chunk.byte_offset + 60] = b"\xff" * 50
    src.write_bytes(bytes(data))
    with pytest.raises(BadInputFile, match=r"in\.h5: a stored chunk of /v in \[\d+:\d+\] cannot be decoded \(damaged data\)"):
        repack(src, tmp_path / "out.h5", verify=True)
    repack(src, tmp_path / "out.h5", verify=False)
    with h5py.File(src) as a, h5py.File(tmp_path / "out.h5") as b:
        assert a["v"].id.read_direct_chunk((30_000,)) == b["v"].id.read_direct_chunk((30_000,))


def test_a_copy_that_fails_verify_is_our_error_not_the_inputs_and_is_not_kept(tmp_path, monkeypatch):
    """A difference --verify finds is a bug of the copier (the input read fine): CopyDiffers, not
    BadInputFile (the pipeline records it against layoutlab, not the upload), and no output is left."""
    from layoutlab.convert import repack_hdf5

    src = tmp_path / "in.h5"
    write_sample("geos", src)
    monkeypatch.setattr(repack_hdf5, "compare_files", lambda a, b, **options: ["/BCEXTTAU: values differ (simulated)"])
    with pytest.raises(CopyDiffers, match="verification of the repacked copy failed: /BCEXTTAU: values differ") as raised:
        repack(src, tmp_path / "out.h5", page_size=PAGE, verify=True)
    assert not isinstance(raised.value, BadInputFile)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5"]


@pytest.mark.parametrize("which", ["first", "middle", "last", "end of the last"])
def test_verify_finds_one_changed_byte_in_any_stored_chunk_of_the_copy(tmp_path, which):
    """Stored chunks are compared a run of back-to-back chunks at a time, in pieces (repack_hdf5.
    _back_to_back_runs, _same_bytes): one byte changed in the copy's first, a middle or the last
    chunk, past the first piece of a 1.2 MB chunk, or in the short piece that ends a run, is found,
    and only there (the small chunk of the dataset compared next is not blamed); the unchanged copy
    passes."""
    from layoutlab.convert.repack_hdf5 import COMPARE_PIECE_BYTES, _back_to_back_runs, compare_files

    src, out = tmp_path / "in.h5", tmp_path / "out.h5"
    rng = np.random.default_rng(7)
    with h5py.File(src, "w") as f:  # (random values: deflate barely shrinks them, chunks stay ~1.2 MB)
        f.create_dataset("v", data=rng.random((8, 150_000)), chunks=(1, 150_000), compression="gzip")
        f.create_dataset("w", data=rng.random(1_000), chunks=(1_000,), compression="gzip")  # (compared after v)
    repack(src, out, page_size=8 << 20, verify=True)
    with h5py.File(src) as a, h5py.File(out) as b:
        chunks = sorted((b["v"].id.get_chunk_info(i) for i in range(8)), key=lambda c: c.byte_offset)
        located = [{tuple(c.chunk_offset): (c.filter_mask, c.size, c.byte_offset) for c in
                    (f["v"].id.get_chunk_info(i) for i in range(8))} for f in (a, b)]
    # (seven chunks back to back in both files, the eighth on the copy's next 8 MiB page: two runs)
    assert [size // 1_000_000 for _, _, size in _back_to_back_runs(*located)] == [7, 1]
    assert compare_files(src, out, decode=False) == []
    chunk = {"first": chunks[0], "middle": chunks[4]}.get(which, chunks[-1])
    assert chunk.size > 2 * COMPARE_PIECE_BYTES
    data = bytearray(out.read_bytes())
    at = chunk.size - 5 if which == "end of the last" else COMPARE_PIECE_BYTES + 200_000  # (past w's 8 kB chunk)
    data[chunk.byte_offset + at] ^= 0x01
    out.write_bytes(bytes(data))
    assert compare_files(src, out, decode=False) == ["/v: stored chunks differ"]


def test_verify_finds_a_changed_value_in_a_dataset_the_copy_rechunked(tmp_path):
    """A dataset rechunked by the copy (here by request) is verified by reading the
    copy's values against what the copy read from the input (no third decode of the input): one value changed
    in the copy after it is written, through HDF5 so every chunk still decodes, is a difference naming the
    dataset, and the copy is not kept; untouched, the same copy verifies."""
    src = tmp_path / "in.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("t", data=np.arange(3_000, dtype="f8"), maxshape=(None,), chunks=(10_000,),
                         compression="gzip")
        f.create_dataset("u", data=np.arange(50, dtype="i4"), maxshape=(None,), chunks=(1_000,))

    def change_one_value(copy_path):
        with h5py.File(copy_path, "r+") as f:
            assert f["t"].chunks == (3_000,)  # (rechunked: no stored bytes to compare with the input's)
            f["t"][1_234] = -1.0

    rechunk = {"/t": (3_000,), "/u": (50,)}
    summary = repack(src, tmp_path / "ok.h5", verify=True, chunks=rechunk)
    assert summary.verified and set(summary.rechunked) == {"/t", "/u"}
    with pytest.raises(CopyDiffers, match=r"verification of the repacked copy failed: /t: values differ in"):
        repack(src, tmp_path / "out.h5", verify=True, copy_written=change_one_value, chunks=rechunk)
    assert not (tmp_path / "out.h5").exists()
