"""What repack's modules share, importable without h5py or numpy: sizes, options, the summary.

The command line checks its options and the input's signature, and the decode check
(decode_check.py) reads chunks, with these alone: a wrong option or a file that is not HDF5
is named before h5py's import (~0.15 s) is paid.
"""

from __future__ import annotations

import os
from pathlib import Path

from layoutlab.errors import BadInputFile, UserError
from layoutlab.formats.sniff import HEAD_BYTES, describe_not_hdf5, hdf5_signature_offset, head_after_user_block
from layoutlab.units import parse_size  # noqa: F401  (the one size parser; re-exported for repack's callers)

MiB = 1 << 20
DEFAULT_PAGE_SIZE = 8 * MiB
# Decoded data moved per read/write when a dataset cannot be copied chunk by
# chunk (contiguous, compact, rechunked): bounds peak memory on any input.
BLOCK_BYTES = 64 * MiB
# Output file: pages assembled in a page buffer of this many pages, and a
# metadata cache of this size (both measured in benchmarks/bench_repack.py).
PAGE_BUFFER_PAGES = 0  # measured: a page buffer slows raw-data copies (GEOS 1 GB: 6.7 s vs 1.6 s)
PAGE_BUFFER_MIN_META_PERCENT = 0
METADATA_CACHE_BYTES = 32 * MiB
# Raw chunk copies read neighbouring chunks with one call, up to this many
# bytes: a buffer that stays in the CPU cache between the read and HDF5's
# write. Measured on GEOS 1 GB (2.2 MB chunks): 16 MiB spans 2.3-5 s, one chunk
# per read 0.65 s, as fast as h5repack (a plain read/write copy shows the same).
READ_SPAN_BYTES = 1 * MiB
# ... and chunks closer than this (a gap read and thrown away costs less than another call).
READ_GAP_BYTES = 64 * 1024
# Source chunk cache while rechunking: holds the source chunks one block spans.
SOURCE_CHUNK_CACHE = 64 * MiB


def parse_chunk_spec(spec: str) -> tuple[str, tuple[int, ...]]:
    """``"gt1l/heights/h_ph=100000"`` -> (``"/gt1l/heights/h_ph"``, (100000,))."""
    name, sep, shape = spec.partition("=")
    parts = [p.strip() for p in shape.split(",")] if sep else []
    if not name or not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"expected VAR=N[,N...] with positive integers, got {spec!r}")
    return "/" + name.strip().strip("/"), tuple(int(p) for p in parts)


class RepackSummary:
    """What a repack did: sizes, times and every change it made.

    (A plain class rather than a dataclass: ``dataclasses`` imports ``inspect``, ~8 ms of every
    ``layoutlab repack`` start, measured with ``python -X importtime``.)
    """

    def __init__(self, input: str, output: str, page_size: int, input_bytes: int = 0):
        self.input, self.output, self.page_size = input, output, page_size
        self.input_bytes = input_bytes
        self.output_bytes = 0
        self.seconds = 0.0
        self.verify_seconds: float | None = None
        self.verified = False
        # --verify's decode of every stored chunk of the input, run beside the copy (convert/decode_check.py):
        # datasets, chunks, stored_bytes, by_hdf5, seconds, by_copy_datasets (left to the copy)
        self.decode_check: dict | None = None
        self.groups = self.datasets = self.attributes = self.chunks_copied_raw = 0
        self.compact_to_contiguous: list[str] = []
        self.unlimited_fixed: list[str] = []
        self.unlimited_kept: list[str] = []
        self.rechunked: dict[str, dict] = {}
        self.references_rewritten = 0
        self.notes: list[str] = []

    @property
    def size_overhead(self) -> float:
        return self.output_bytes / self.input_bytes - 1.0 if self.input_bytes else 0.0

    def to_dict(self) -> dict:
        out = dict(self.__dict__)
        out["size_overhead"] = round(self.size_overhead, 6)
        return out


def check_signature(path: str | os.PathLike) -> None:
    """Raise ``BadInputFile`` (naming the file and the reason) unless ``path`` is a file that starts
    like HDF5 (whether the rest can be read is for the library to find out)."""
    path = Path(path)
    if not path.exists():
        raise BadInputFile(path, "no such file")
    if path.is_dir():
        raise BadInputFile(path, "is a directory, not an HDF5 file")
    from layoutlab.hdf5_input import require_regular_file

    require_regular_file(path)  # (a FIFO would block the read below forever)
    size = path.stat().st_size
    with open(path, "rb") as stream:
        head = stream.read(HEAD_BYTES)
        if hdf5_signature_offset(head) is None:  # (a user block larger than HEAD_BYTES: look where HDF5 does)
            head = head_after_user_block(lambda offset, count: os.pread(stream.fileno(), count, offset), size) or head
    if size == 0 or hdf5_signature_offset(head) is None:
        raise BadInputFile(path, describe_not_hdf5(head, size))


def partial_output(out_path: Path, pid: int) -> Path:
    """Where process ``pid`` writes OUT before renaming it into place."""
    return out_path.with_name(f".{out_path.name}.partial-{pid}")


def partial_output_remover(out):
    """``cleanup(pid)`` for layoutlab.guard: a repack process that was stopped leaves no partial file."""
    def remove(pid: int) -> None:
        partial_output(Path(out), pid).unlink(missing_ok=True)
    return remove


def checked_options(in_path, out_path, page_size, target_chunk_bytes=None):
    """(input path, output path, page size, target chunk bytes) parsed and checked; ``UserError`` naming
    the option or file when one is wrong. The input is checked to exist and look like HDF5 only."""
    in_path, out_path = Path(in_path), Path(out_path)
    page_size = parse_size(page_size)
    if page_size < 512:
        raise UserError(f"--page-size {page_size}: must be at least 512 bytes")
    if target_chunk_bytes is not None:
        target_chunk_bytes = parse_size(target_chunk_bytes)
        if target_chunk_bytes <= 0:
            raise UserError(f"--target-chunk-bytes {target_chunk_bytes}: must be positive")
        if target_chunk_bytes > page_size:
            raise UserError(f"--target-chunk-bytes {target_chunk_bytes}: larger than the page size {page_size}")
    check_signature(in_path)
    if out_path.exists() and out_path.resolve() == in_path.resolve():
        raise UserError(f"{out_path}: output would overwrite the input")
    return in_path, out_path, page_size, target_chunk_bytes


class CopyDiffers(UserError):
    """``--verify`` found the copy different from the input (the input read fine: the copier is at fault)."""
