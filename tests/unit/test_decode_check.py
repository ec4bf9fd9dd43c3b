"""--verify's decode check (convert/decode_check.py): every stored chunk of the input decoded beside the
copy, deflate(+shuffle) chunks inflated outside HDF5, everything else (and every doubt) decided by HDF5."""

from __future__ import annotations

import zlib

import h5py
import numpy as np
import pytest

from layoutlab.convert import decode_check
from layoutlab.convert.repack import repack
from layoutlab.errors import BadInputFile


def _write(path, **options):
    with h5py.File(path, "w") as f:
        values = np.sin(np.arange(200_000, dtype="f8") / 7.0)
        f.create_dataset("v", data=values, chunks=(10_000,), **options)
        f.create_dataset("plain", data=np.arange(1000), chunks=(100,))  # no filter: nothing to decode
    return path


def _damage_chunk(path, index, replacement: bytes | None = None):
    """Overwrite the stored bytes of chunk ``index`` of /v (its index intact, so a copy copies it)."""
    with h5py.File(path) as f:
        info = f["v"].id.get_chunk_info(index)
    data = bytearray(path.read_bytes())
    new = replacement if replacement is not None else b"\xff" * 50
    data[info.byte_offset + 10: info.byte_offset + 10 + len(new)] = new
    path.write_bytes(bytes(data))
    return info


def test_deflate_and_shuffle_chunks_are_inflated_outside_hdf5(tmp_path):
    src = _write(tmp_path / "in.h5", compression="gzip", shuffle=True)
    report = decode_check.decode_every_chunk(str(src))
    assert (report.datasets, report.chunks, report.by_hdf5) == (1, 20, 0)
    with h5py.File(src) as f:
        assert report.stored_bytes == f["v"].id.get_storage_size()


def test_other_filters_are_decoded_by_hdf5(tmp_path):
    src = _write(tmp_path / "in.h5", compression="lzf")
    report = decode_check.decode_every_chunk(str(src))
    assert (report.datasets, report.chunks, report.by_hdf5) == (1, 0, 20)
    checked = _write(tmp_path / "fletcher.h5", compression="gzip", fletcher32=True)  # a checksum HDF5 verifies
    assert decode_check.decode_every_chunk(str(checked)).by_hdf5 == 20


@pytest.mark.parametrize("options", [{"compression": "gzip", "shuffle": True}, {"compression": "gzip", "fletcher32": True}],
                         ids=["deflate: inflated outside HDF5", "fletcher32: by HDF5"])
def test_a_damaged_chunk_is_named_by_hdf5_whichever_way_it_was_decoded(tmp_path, options):
    src = _write(tmp_path / "in.h5", **options)
    _damage_chunk(src, 7)
    with pytest.raises(BadInputFile, match=r"in\.h5: a stored chunk of /v in \[70000:80000\] cannot be decoded "
                                           r"\(damaged data\): OSError"):
        decode_check.decode_every_chunk(str(src))


def test_a_valid_stream_of_the_wrong_size_is_left_to_hdf5(tmp_path):
    """The fast way clears a chunk only when its stream ends with exactly the chunk's size; a shorter
    valid stream (here 1 decoded byte) goes to HDF5, which alone decides: HDF5 2.0 reads it (the
    copy keeps the same bytes, so readers of both see the same), and nothing is refused for it."""
    src = _write(tmp_path / "in.h5", compression="gzip")
    with h5py.File(src) as f:
        info = f["v"].id.get_chunk_info(3)
    data = bytearray(src.read_bytes())
    short = zlib.compress(b"\x00")
    data[info.byte_offset: info.byte_offset + len(short)] = short
    src.write_bytes(bytes(data))
    report = decode_check.decode_every_chunk(str(src))
    assert (report.chunks, report.by_hdf5) == (20, 1)


def test_verify_decodes_beside_the_copy_and_reports_it(tmp_path):
    src = _write(tmp_path / "in.h5", compression="gzip", shuffle=True)
    summary = repack(src, tmp_path / "out.h5", page_size=65536, verify=True)
    assert summary.verified and summary.decode_check["chunks"] == 20 and summary.decode_check["by_hdf5"] == 0
    assert repack(src, tmp_path / "unverified.h5", page_size=65536).decode_check is None


@pytest.mark.parametrize("check_here", [False, True], ids=["check-beside", "check-here"])
def test_a_damaged_input_chunk_stops_the_repack_and_nothing_is_written(tmp_path, check_here):
    src = _write(tmp_path / "in.h5", compression="gzip", shuffle=True)
    _damage_chunk(src, 12)
    with pytest.raises(BadInputFile, match=r"/v in \[120000:130000\] cannot be decoded \(damaged data\)"):
        repack(src, tmp_path / "out.h5", page_size=65536, verify=True, chunks=RECHUNK_T, check_here=check_here)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5"]


RECHUNK_T = {"/t": (5_000,)}


def _write_rechunked(path):
    """/t: one chunk longer than its values, which the copy rechunks when asked (``RECHUNK_T``: decoded and
    written anew); /v as in ``_write`` (its chunks copied as stored)."""
    _write(path, compression="gzip")
    with h5py.File(path, "a") as f:
        f.create_dataset("t", data=np.cos(np.arange(25_000) / 3.0), maxshape=(None,), chunks=(30_000,),
                         compression="gzip")
    return path


@pytest.mark.parametrize("check_here", [False, True], ids=["check-beside", "check-here"])
def test_a_dataset_the_copy_decodes_whole_is_left_to_it_and_counted_apart(tmp_path, check_here):
    src = _write_rechunked(tmp_path / "in.h5")
    summary = repack(src, tmp_path / "out.h5", page_size=65536, verify=True, chunks=RECHUNK_T, check_here=check_here)
    assert summary.verified and set(summary.rechunked) == {"/t"}
    report = summary.decode_check
    assert (report["datasets"], report["chunks"], report["by_copy_datasets"]) == (1, 20, 1)
    assert decode_check.decode_every_chunk(str(src)).chunks == 21  # (alone, the check still decodes everything)


def test_a_deflate_bomb_in_a_dataset_the_copy_decodes_is_refused_by_the_copy(tmp_path):
    """Left to the copy, a chunk that inflates past its declared size is refused there, as the check would
    (bounded to the chunk's declared bytes, not HDF5's 4 GiB), and nothing is written."""
    src = _write_rechunked(tmp_path / "in.h5")
    with h5py.File(src) as f:
        info = f["t"].id.get_chunk_info(0)
    bomb = zlib.compress(bytes(2 * 30_000 * 8))
    assert len(bomb) < info.size
    data = bytearray(src.read_bytes())
    data[info.byte_offset: info.byte_offset + len(bomb)] = bomb
    src.write_bytes(bytes(data))
    with pytest.raises(Exception, match="inflates past its declared size of 240000 bytes"):
        repack(src, tmp_path / "out.h5", page_size=65536, verify=True, chunks=RECHUNK_T)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5"]
