"""``--verify``'s decode check: every stored chunk of the input run through its filters, beside the copy.

A repack copies stored chunks without decoding them (as h5repack does), so a corrupt compressed chunk
would be copied faithfully and pass a byte comparison; ``--verify`` therefore also decodes every chunk
of the input. Decoding is the costly part of verifying (inflating 0.96 GB of GEOS-like deflate takes
longer on one core than h5repack's whole copy), so it does not wait for the copy:
``start(in_path)`` runs it in a guarded child process (layoutlab.guard: a crash or a spin of libhdf5
is a clean error there too) on the other core while the copy is written, and ``DecodeCheck.result()``
collects the verdict when the comparison of the copy is done.

Two ways to decode, one judge:
- chunks whose filters are deflate (+ shuffle) are read with ``pread`` at the addresses HDF5's chunk
  index gives (``H5Dchunk_iter``) and inflated by ISA-L (zlib where it is missing) on every core of
  the child: HDF5's own pipeline runs one chunk at a time under its global lock, with zlib. Such a
  chunk passes when its zlib stream ends (its Adler-32 checked by the inflater) with exactly the
  chunk's decoded size; unshuffling cannot fail, so HDF5 would decode it too;
- every other pipeline, and any chunk the first way does not pass, is decoded by HDF5 itself, which
  alone decides that a chunk is damaged and gives the reason; its deflate is bounded by the chunk's
  declared size there (layoutlab.bounded_decoding): a chunk that inflates past it is refused.
Datasets whose filter plugin is not installed here are not decoded (the copy keeps their bytes as
stored: identical stored bytes are then all there is to check, as before); the report lists them
(``not_decoded``) and the command says so, instead of counting them as decoded.

Datasets the copy itself decodes whole (rechunked: every stored chunk within the shape read through
HDF5, deflate bounded by the chunk's declared size as here) are left to it: once the copy has decided
what it makes anew, it names them (``DecodeCheck.leave_to_the_copy``) and the child, which waits for
that list before decoding, skips them (ATL06: 475 of 477 datasets, each decoded twice before). The
report counts them apart (``by_copy_datasets``); a chunk the copy cannot decode stops the copy.
"""

from __future__ import annotations

import math
import os
import pickle
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from layoutlab.bounded_decoding import DEFLATE, SHUFFLE
from layoutlab.bounded_decoding import within as bounded
from layoutlab.convert.heap import set_malloc_thresholds
from layoutlab.guard import GuardedCall, start_guarded

try:  # the inflater, chosen once
    from isal.isal_zlib import decompressobj
    from isal.isal_zlib import error as _inflate_error
except ImportError:  # (a platform without ISA-L's wheel: the standard library's zlib, slower)
    from zlib import decompressobj
    from zlib import error as _inflate_error
import zlib as _zlib

INFLATE_ERRORS = (_inflate_error, _zlib.error)
INFLATE_WINDOW = 8 << 20  # decoded bytes held at once per worker (a chunk can decode to 4 GiB)
# A dataset storing less than this is inflated by the walking thread itself: handing each of GEDI L2B's 1,225
# one-chunk datasets (655 kB in all) to the pool took 1.6 s of CPU in queue hand-overs, inflating them ~0.2 s.
INLINE_BYTES = 256 << 10


@dataclass
class DecodeReport:
    datasets: int = 0
    chunks: int = 0
    stored_bytes: int = 0
    by_hdf5: int = 0  # chunks HDF5 decoded (other filters, or not passed by the fast way)
    seconds: float = 0.0
    # datasets whose chunks were not decoded, their filter plugin absent here: "/path (N chunks): 32099 (name)".
    # Said, never counted as decoded (issue 36: "verified ... (0 chunks)" claimed what was not checked).
    not_decoded: list = field(default_factory=list)
    # datasets the copy decoded whole itself, left to it (DecodeCheck.leave_to_the_copy)
    by_copy_datasets: int = 0


# The list of datasets left to the copy goes to the child through a pipe whose buffer holds it whole, so
# the parent's write never waits for the child (which, without a fork, runs only when the result is asked
# for). A longer list is not sent: the child then decodes everything, as without one.
PLAN_PIPE_BYTES = 1 << 20


class DecodeCheck:
    """The running check; ``result()`` is its ``DecodeReport`` or the ``BadInputFile`` naming a damaged chunk."""

    def __init__(self, call: GuardedCall, plan_fds: tuple[int, int]):
        self._call = call
        self._plan_read, self._plan_write = plan_fds

    def leave_to_the_copy(self, paths) -> None:
        """The datasets (paths) the copy decodes whole itself: not decoded again here. Once; the child waits
        for it (or for ``result()``, which sends an empty list) before decoding anything."""
        if self._plan_write is None:
            return
        message = pickle.dumps(sorted(paths))
        if len(message) + 8 > PLAN_PIPE_BYTES:
            message = pickle.dumps([])
        try:
            os.write(self._plan_write, len(message).to_bytes(8, "little") + message)
        except BrokenPipeError:  # (the child is gone: its result says why)
            pass
        os.close(self._plan_write)
        self._plan_write = None

    def result(self) -> DecodeReport:
        self.leave_to_the_copy(())  # (nothing named: every dataset decoded here)
        try:
            return self._call.result()
        finally:
            self._close_plan()

    def cancel(self) -> None:
        self._call.cancel()
        self._close_plan()

    def _close_plan(self) -> None:
        for fd in (self._plan_read, self._plan_write):
            if fd is not None:
                os.close(fd)
        self._plan_read = self._plan_write = None


class DecodeCheckHere:
    """The same check run in the calling process, once the copy asks for its verdict (``start(here=True)``).

    For a caller that is itself a guarded child holding one input and no credentials: ``repack_many``'s
    workers, each core already busy with a file of its own (the check's child would only take turns with
    them). A crash or a spin there stops that child, which its parent reports as it would the check's own.
    (A single small file gains nothing from it: beside the copy, on the other core, the check's child
    cost no wall time; TEMPO NO2, 9 pairs: 1.00x.)"""

    def __init__(self, in_path):
        self._in_path = os.fspath(in_path)
        self._left: frozenset | None = None

    def leave_to_the_copy(self, paths) -> None:
        if self._left is None:
            self._left = frozenset(paths)

    def result(self) -> DecodeReport:
        self.leave_to_the_copy(())
        # (one worker: the file's own core; the other cores are the other files' or the caller's)
        return decode_every_chunk(self._in_path, workers=1, left_to_the_copy=self._left)

    def cancel(self) -> None:
        pass


def start(in_path, here: bool = False) -> DecodeCheck | DecodeCheckHere:
    """Start decoding every stored chunk of ``in_path`` in a guarded child (see the module's text); ``here``:
    decoded in this process instead, after the copy (``DecodeCheckHere``: only for a caller that is a guarded
    child without credentials)."""
    if here:
        return DecodeCheckHere(in_path)
    plan_read, plan_write = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(plan_write, fcntl.F_SETPIPE_SZ, PLAN_PIPE_BYTES)
    except (ImportError, AttributeError, OSError):  # (the default buffer: a longer list is not sent)
        pass
    call = start_guarded(_decode_in_child, os.fspath(in_path), plan_read, path=os.fspath(in_path),
                         without_credentials=True)
    return DecodeCheck(call, (plan_read, plan_write))


def _decode_in_child(in_path: str, plan_read: int | None = None) -> DecodeReport:
    # Each chunk's decoded bytes come in a new object (a GEOS-like chunk: 3.3 MB): freed memory is kept
    # for the next (convert/heap.py: 1.43 -> 0.73 s for that input on two threads). Only here, in the
    # child, which exits when done.
    set_malloc_thresholds(mmap_threshold=2 * INFLATE_WINDOW + (4 << 20), keep_freed=1 << 30)
    left_to_the_copy = _read_plan(plan_read) if plan_read is not None else frozenset()
    return decode_every_chunk(in_path, left_to_the_copy=left_to_the_copy)


def _read_plan(fd: int) -> frozenset:
    """The paths ``DecodeCheck.leave_to_the_copy`` sent (waits for them); empty if none came."""
    def read_exactly(count: int) -> bytes:
        got = b""
        while len(got) < count:
            piece = os.read(fd, count - len(got))
            if not piece:
                return b""
            got += piece
        return got

    header = read_exactly(8)
    if not header:
        return frozenset()
    return frozenset(pickle.loads(read_exactly(int.from_bytes(header, "little"))))


def decode_every_chunk(in_path: str, workers: int | None = None, left_to_the_copy=frozenset()) -> DecodeReport:
    """Decode every stored chunk of every filtered chunked dataset of ``in_path`` reached by hard links,
    except the datasets at the paths ``left_to_the_copy`` (counted apart); ``BadInputFile`` for the first
    chunk HDF5 cannot decode."""
    import h5py

    from layoutlab.convert.repack_hdf5 import BLOCK_BYTES, decode_blocks, missing_filters, read_spans, walk_objects
    from layoutlab.hdf5_input import open_input

    started = time.perf_counter()
    report = DecodeReport()
    workers = workers or max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    fd = os.open(in_path, os.O_RDONLY)
    pending: list = []  # (future, its chunks) in flight

    def by_hdf5(batch, indexes) -> None:
        """HDF5 decides each chunk of ``batch`` at ``indexes``: those the fast way did not pass."""
        for index in indexes:
            dataset, offset = batch[index][0], batch[index][1]
            report.by_hdf5 += 1
            with bounded(dataset):  # (HDF5's deflate would inflate a bomb whole: 8.5 GB for 1 GiB chunks)
                decode_blocks(dataset, BLOCK_BYTES, within=tuple(
                    slice(o, min(o + c, n)) for o, c, n in zip(offset, dataset.chunks, dataset.shape)))

    def settle(limit: int) -> None:
        """Wait for the oldest batches until at most ``limit`` are in flight."""
        while len(pending) > limit:
            future, batch = pending.pop(0)
            by_hdf5(batch, future.result())

    try:
        with open_input(in_path) as f, ThreadPoolExecutor(workers) as pool:
            for name, info, gid, bname in walk_objects(f.id):
                if info.type != h5py.h5o.TYPE_DATASET:
                    continue
                if "/" + name in left_to_the_copy:  # (not even opened: GEDI L2B leaves 1,162 of 1,302)
                    report.by_copy_datasets += 1
                    continue
                dataset = h5py.Dataset(h5py.h5d.open(gid, bname))
                dcpl = dataset.id.get_create_plist()
                if dcpl.get_layout() != h5py.h5d.CHUNKED or not dcpl.get_nfilters():
                    continue
                absent = missing_filters(dataset)
                if absent:
                    report.not_decoded.append(f"{dataset.name} ({dataset.id.get_num_chunks()} chunks): filter plugin "
                                              f"absent here: {', '.join(absent)}")
                    continue
                report.datasets += 1
                filters = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
                if not _inflatable(filters):  # (decoded here while the pool inflates what was handed to it)
                    report.by_hdf5 += dataset.id.get_num_chunks()
                    with bounded(dataset):
                        decode_blocks(dataset, BLOCK_BYTES)
                    continue
                decoded_size = math.prod(dataset.chunks) * dataset.id.get_type().get_size()
                deflate_bit = 1 << filters.index(DEFLATE)
                chunks = [(dataset, offset, address, size, decoded_size)
                          for offset, mask, address, size in _chunks_within(dataset) if not mask & deflate_bit]
                report.chunks += len(chunks)
                report.stored_bytes += sum(c[3] for c in chunks)
                # (runs of neighbouring chunks, each read with one pread, as the copy reads them: ATL03-like
                # granules store 55,000 chunks of ~17 kB, for which a read and a task per chunk cost
                # more than inflating them)
                inline = sum(c[3] for c in chunks) < INLINE_BYTES
                for _, _, batch in read_spans(sorted(chunks, key=lambda chunk: chunk[2])):
                    if inline:  # (a small dataset: inflated here, in less time than a hand-over to the pool)
                        by_hdf5(batch, _inflate_batch(fd, batch))
                    else:
                        pending.append((pool.submit(_inflate_batch, fd, batch), batch))
                settle(4 * workers)  # (a bounded number in flight: a file may list millions of chunks)
            settle(0)
    finally:
        os.close(fd)
    report.seconds = time.perf_counter() - started
    return report


def _inflate_batch(fd: int, batch: list) -> list[int]:
    """The positions in ``batch`` of the chunks whose zlib stream does not end, its checksum right, with
    exactly the chunk's decoded size (left to HDF5)."""
    start = batch[0][2]
    span = os.pread(fd, batch[-1][2] + batch[-1][3] - start, start)
    view = memoryview(span)
    return [i for i, (_, _, address, size, decoded_size) in enumerate(batch)
            if not _inflates(view[address - start: address - start + size], size, decoded_size)]


def _inflatable(filters: list[int]) -> bool:
    return filters.count(DEFLATE) == 1 and set(filters) <= {DEFLATE, SHUFFLE}


def _chunks_within(dataset) -> list[tuple[tuple[int, ...], int, int, int]]:
    """(offset, filter mask, file address, stored size) of each stored chunk that starts inside the
    dataset's shape (a chunk listed wholly beyond it is not where any reader finds values)."""
    found = []
    shape = dataset.shape
    dataset.id.chunk_iter(lambda c: found.append((tuple(c.chunk_offset), c.filter_mask, c.byte_offset, c.size))
                          if all(o < n for o, n in zip(c.chunk_offset, shape)) else None)
    return found


def _inflates(data, stored: int, decoded_size: int) -> bool:
    """The zlib stream ``data`` (the chunk's ``stored`` bytes) ends, its checksum right, with exactly
    ``decoded_size`` bytes."""
    if len(data) != stored:  # (the file ends before the chunk does)
        return False
    inflater, produced = decompressobj(), 0
    # (bounded output per call: what was not yet inflated waits in unconsumed_tail; one byte more than the chunk
    # decodes to is enough to see a stream that inflates past it, and a small chunk gets a small buffer: an
    # 8 MiB one per call cost 0.4 ms for each of GEDI L2B's 1,225 chunks of ~500 bytes)
    window = min(INFLATE_WINDOW, decoded_size + 1)
    try:
        while True:
            out = len(inflater.decompress(data, window))
            produced, data = produced + out, inflater.unconsumed_tail
            if inflater.eof or produced > decoded_size or not (data or out):
                break
    except INFLATE_ERRORS:  # (not a valid stream: HDF5 will say what is wrong)
        return False
    return inflater.eof and produced == decoded_size
