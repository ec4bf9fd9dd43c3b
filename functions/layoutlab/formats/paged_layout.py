"""How large an HDF5 file becomes when it is rewritten with paged aggregation: the one model.

``h5repack -S PAGE -G N`` (and ``layoutlab repack``) rewrites a file with paged aggregation, and
HDF5 then allocates file space in pages of N bytes:

- an allocation smaller than a page goes into a page of its own kind (metadata pages, raw-data
  pages; global heaps of variable-length data count as raw data), into the free space of a page
  already started when one has room for it (the smallest that has), else into a new page;
- an allocation of a page or more starts on a page boundary and takes whole pages, the rest of
  its last page staying empty;
- the file ends on a page boundary.

So the paged copy's size follows from the sizes of the file's allocations, which are read here
from the file itself with h5py's low-level API, as ``h5stat -S`` counts them: each object's
header, group and attribute B-trees and heaps, chunk indexes (``H5Oget_native_info``), raw data
of contiguous and COMPACT datasets (COMPACT ones become CONTIGUOUS in the copy), every stored
chunk's size (``chunk_iter``), and what is left (global heaps). They are then packed into pages
as HDF5 packs them. What the repack makes anew is counted as it makes it (the 1.10 format): a
dataset made anew (COMPACT, unlimited, rechunked) gets a fixed-array chunk index (an address, and
for filtered chunks a size and a filter mask, per chunk) instead of its old one (a version-1
B-tree of full-size nodes, in files written with the earliest format); a group it makes anew (the
root, and the groups on the way to such datasets) keeps its links in its header or in a fractal
heap rather than in a symbol table. The rest is copied as it is (H5Ocopy), less the free space
the writer left in object headers.

``file_allocations(source)`` reads a file's allocations (``source``: a local path, or an h5py
``File`` already open, e.g. on an ``s3://`` object through ``inspect``'s reader);
``predict(allocations, page_size)`` packs them into pages. Calibrated against real repacks
(``benchmarks/bench_page_budget.py``, ``tests/integration/test_page_budget_calibration.py``).

Why it lives in ``layoutlab.formats``: two commands ask this question and must get one answer.
``layoutlab repack --page-size auto`` (``convert/page_budget.py``: the largest page within a size
budget) and ``layoutlab inspect --check`` (``formats/readiness.py``: the page its fixes propose,
with the estimated size change) both predict with this module. It is knowledge of the format, and
the import contracts (pyproject.toml ``[tool.importlinter]``, tests/unit/test_import_contracts.py)
let ``convert`` import ``formats`` but not the reverse, so the model sits here and the policies
sit with their commands. ``ancestor_groups`` (the groups a repack walks and makes anew) is here
for the same reason: the repack (``convert/repack_hdf5.py``) imports it from this module, so the
model and the repack share one rule.

(Plain classes and named tuples in this module, not dataclasses or typing: ``layoutlab repack``
imports it, and ``dataclasses`` (with ``inspect``) adds tens of ms to every start of a command
timed against h5repack; ``inspect --check`` builds its ``--help`` from a module that imports it.)
"""

from __future__ import annotations

import bisect
import math
import os
from collections import namedtuple

KiB = 1 << 10
MiB = 1 << 20
# HDF5's global heap collections (variable-length strings and sequences) are at least 4 KiB.
GLOBAL_HEAP_COLLECTION = 4 * KiB
# An index whose node size is not known is counted in allocations of this size.
BTREE_NODE_BYTES = 2 * KiB
# A symbol-table group (the earliest format): B-tree nodes of 544 bytes, symbol-table nodes of 328.
SYMBOL_TABLE_NODE_BYTES = 544
# New-style groups (the 1.10 format the repack writes): up to 8 links in the header, each a link
# message of ~12 bytes and its name; more go to a fractal heap indexed by a version-2 B-tree of
# 512-byte nodes holding a name hash and heap id (11 bytes) per link. Attribute indexes are such B-trees too.
COMPACT_LINKS_MAX = 8
LINK_MESSAGE_BYTES = 12
V2_BTREE_NODE_BYTES = 512
V2_NAME_RECORD_BYTES = 11
# Superblock (version 2/3: 48 bytes), its extension (file-space info, ~156 bytes) and the persisted
# free-space managers' headers (h5stat -S "Free-space managers: Header": 2,592 bytes on the samples).
FILE_SPACE_BOOKKEEPING = (48, 160, 2600)
# Free space tracked while packing, at most: HDF5 tracks all of it, and so does the packing up to
# this many sections (the most any file measured needed: 14,157, the ATL03-like 930 MB); beyond,
# the smallest are let go, which bounds the time on files of a million small chunks. (A bound of
# 1,024 made the 930 MB granule's prediction 8 MB too large at 64 KiB pages; exact without it.)
MAX_FREE_SECTIONS = 200_000
# Per section the persisted free-space managers track (a serialized section: address, size, type).
FREE_SECTION_BYTES = 16
# A fixed-array chunk index (HDF5's latest format for fixed-size chunked datasets): its header and
# data block prefix, then per chunk an address, and for filtered chunks also a size and a filter mask.
FIXED_ARRAY_BYTES = 64
FIXED_ARRAY_ADDRESS = 8
FILTER_MASK = 4


class FileAllocations:
    """The sizes of what a paged copy of a file allocates, and where the file's metadata lies now.

    (Plain classes and named tuples in this module, not dataclasses or typing: ``layoutlab repack``
    imports it, and ``dataclasses`` (with ``inspect``) adds tens of ms to every start of a command
    timed against h5repack.)
    """

    def __init__(self, path: str, size_bytes: int):
        self.path, self.size_bytes = path, size_bytes
        self.metadata: list[int] = []  # sizes of metadata allocations in the copy
        self.raw: list[int] = []  # sizes of raw-data allocations in the copy
        self.metadata_regions = 0  # separate runs of metadata (non raw-data bytes) in the file now
        self.userblock = 0
        self.global_heap_bytes = 0  # what h5stat -S leaves unaccounted, counted as global heap collections
        self.page_size_now: int | None = None  # the file's page size when it is paged already

    @property
    def metadata_bytes(self) -> int:
        return sum(self.metadata)

    @property
    def raw_bytes(self) -> int:
        return sum(self.raw)


class PagePrediction(namedtuple("PagePrediction", "page_size output_bytes overhead metadata_pages raw_pages")):
    """What a copy paged at ``page_size`` would be: its size (``output_bytes``, ``overhead`` = output /
    input - 1) and its pages (``metadata_pages``: what a page-aligned reader fetches to open the file)."""

    __slots__ = ()


def file_allocations(source, target_chunk_bytes: int | None = None, *, size_bytes: int | None = None,
                     name: str | None = None) -> FileAllocations:
    """Read the allocations of an HDF5 / NetCDF-4 file as a paged repack would make them.

    ``source``: a local path (opened and closed here), or an h5py ``File`` open for reading, left
    open: ``inspect --check`` passes the one it opens on an ``s3://`` object through ``inspect``'s
    reader, where there is no path to open. ``size_bytes``: the file's size (default: the path's,
    or for an open ``File`` HDF5's own ``H5Fget_filesize``); ``name``: what the result calls the
    file (default: the path, or the ``File``'s name).
    ``target_chunk_bytes``: the repack grows chunks along their first axis up to this many
    uncompressed bytes (rechunked-paged variants); the stored chunks are then counted merged as
    the repack merges them.
    """
    import h5py

    if isinstance(source, h5py.File):
        size = int(size_bytes) if size_bytes is not None else int(source.id.get_filesize())
        return _read_allocations(source, size, name or str(source.filename), target_chunk_bytes)
    size = int(size_bytes) if size_bytes is not None else os.path.getsize(source)
    from layoutlab.hdf5_input import open_input

    with open_input(source) as f:
        return _read_allocations(f, size, name or str(source), target_chunk_bytes)


def _read_allocations(f, size: int, label: str, target_chunk_bytes: int | None) -> FileAllocations:
    import h5py

    allocations = FileAllocations(label, size)
    metadata, raw = allocations.metadata, allocations.raw
    extents: list[tuple[int, int]] = []  # (offset, size) of raw data now: what lies between is metadata
    fcpl = f.id.get_create_plist()
    allocations.userblock = userblock = int(fcpl.get_userblock())
    if fcpl.get_file_space_strategy()[0] == h5py.h5f.FSPACE_STRATEGY_PAGE:
        allocations.page_size_now = int(fcpl.get_file_space_page_size())
    objects: dict[int, _ObjectSizes] = {}  # by address: an object linked twice is one object
    shared = [False]  # linked twice, or a named datatype: the repack copies the tree whole

    def seen(name: bytes, info) -> None:
        if info.rc > 1 or info.type == h5py.h5o.TYPE_NAMED_DATATYPE:
            shared[0] = True
        if info.addr not in objects:  # (h5py refills one info object for every call: keep its values)
            objects[info.addr] = _ObjectSizes.of("/" + name.decode("utf-8", "surrogateescape"), info)

    root = h5py.h5o.get_info(f.id)
    shared[0] = root.rc > 1
    objects[root.addr] = _ObjectSizes.of("/", root)
    h5py.h5o.visit(f.id, seen, info=True)
    remade: set[str] = set()  # datasets the repack makes anew
    for obj in objects.values():
        metadata.extend([obj.attr_heap] if obj.attr_heap else [])
        metadata.extend(_btree_nodes(obj.attr_index, V2_BTREE_NODE_BYTES))
        if obj.kind == h5py.h5o.TYPE_DATASET:
            ds = h5py.Dataset(h5py.h5d.open(f.id, obj.path.encode("utf-8", "surrogateescape")))
            header, index_allocations, anew = _dataset_allocations(ds, obj.header, obj.index, raw, extents,
                                                                   target_chunk_bytes)
            metadata.append(header)
            metadata.extend(index_allocations)
            if anew:
                remade.add(obj.path)
        elif obj.kind != h5py.h5o.TYPE_GROUP:  # a named datatype: its header
            metadata.append(obj.header)
    # Groups: "/" is always made anew, and, when nothing is linked twice, so are the groups on the
    # way to a dataset made anew (the repack walks them); the others are copied as they are.
    walked = {"/"} | (set() if shared[0] else ancestor_groups(remade))
    for obj in (o for o in objects.values() if o.kind == h5py.h5o.TYPE_GROUP):
        if obj.path in walked and (obj.index or obj.heap):  # a symbol table, made anew in the new style
            metadata.extend(_new_style_group(f[obj.path], obj.header))
        else:
            metadata.append(obj.header)
            metadata.extend(_btree_nodes(obj.index, SYMBOL_TABLE_NODE_BYTES))
            metadata.extend([obj.heap] if obj.heap else [])
    free = int(f.id.get_freespace())
    # What h5stat -S leaves unaccounted (neither metadata, raw data nor free space): the superblock
    # and, mostly, global heap collections (variable-length strings), which the copy makes again as
    # raw data.
    accounted = sum(o.accounted for o in objects.values()) + sum(n for _, n in extents)
    unaccounted = max(0, size - accounted - free - userblock)
    collections = [GLOBAL_HEAP_COLLECTION] * (unaccounted // GLOBAL_HEAP_COLLECTION)
    raw.extend(collections)
    allocations.global_heap_bytes = sum(collections)
    metadata.extend(FILE_SPACE_BOOKKEEPING)
    allocations.metadata_regions = _metadata_regions(extents, size, userblock, allocations.page_size_now)
    return allocations


def ancestor_groups(paths) -> set[str]:
    """Paths of the groups holding (at any depth) one of ``paths``, "/" included: the groups the
    repack walks and makes anew around the datasets it makes anew (``convert/repack_hdf5.py`` imports
    this one, so the model counts the groups the repack makes)."""
    groups: set[str] = set()
    for path in paths:
        parent = path.rsplit("/", 1)[0] or "/"
        while parent not in groups:
            groups.add(parent)
            if parent == "/":
                break
            parent = parent.rsplit("/", 1)[0] or "/"
    return groups


class _ObjectSizes(namedtuple("_ObjectSizes", "path kind header accounted index heap attr_index attr_heap")):
    """One object's metadata sizes (``H5Oget_native_info``: what h5stat -S adds up): ``kind`` (h5o
    TYPE_*), ``header`` without the free space the writer left in it (H5Ocopy drops it), ``accounted``
    (all of it as the input stores it), ``index`` and ``heap`` (group B-tree and local heap, or chunk
    index), ``attr_index`` and ``attr_heap`` (dense attribute storage)."""

    __slots__ = ()

    @classmethod
    def of(cls, path: str, info) -> "_ObjectSizes":
        space, meta = info.hdr.space, info.meta_size
        sizes = dict(index=int(meta.obj.index_size), heap=int(meta.obj.heap_size),
                     attr_index=int(meta.attr.index_size), attr_heap=int(meta.attr.heap_size))
        return cls(path=path, kind=int(info.type), header=int(space.total - space.free),
                   accounted=int(space.total) + sum(sizes.values()), **sizes)


def _new_style_group(group, header: int) -> list[int]:
    """A group made anew in a file of the 1.10 format: its links in its header (up to 8), else in a
    fractal heap with a version-2 B-tree of their names (HDF5's compact and dense link storage)."""
    names = [len(name) for name in _link_names(group)]
    links = sum(LINK_MESSAGE_BYTES + n for n in names)
    if len(names) <= COMPACT_LINKS_MAX:
        return [header + links]
    return [header, _fractal_heap_bytes(links), V2_BTREE_NODE_BYTES * max(1, math.ceil(
        len(names) * V2_NAME_RECORD_BYTES / V2_BTREE_NODE_BYTES))]


def _link_names(group) -> list[bytes]:
    names: list[bytes] = []
    group.id.links.iterate(lambda name: names.append(name))
    return names


def _fractal_heap_bytes(nbytes: int) -> int:
    """A fractal heap holding ``nbytes``: direct blocks of 512 bytes, doubling (HDF5's defaults)."""
    total, block = 0, 512
    while total < nbytes * 1.1:
        total += block
        block = min(block * 2, 64 * KiB)
    return total


def _btree_nodes(nbytes: int, node: int = BTREE_NODE_BYTES) -> list[int]:
    """A B-tree of ``nbytes`` as the nodes HDF5 allocates one by one."""
    whole, rest = divmod(int(nbytes), node)
    return [node] * whole + ([rest] if rest else [])


def _dataset_allocations(ds, header: int, index: int, raw: list[int], extents: list, target_chunk_bytes):
    """Record the dataset's raw allocations; return (its header size, its index allocations, made anew)
    for the copy."""
    import h5py

    dcpl = ds.id.get_create_plist()
    layout = dcpl.get_layout()
    if layout == h5py.h5d.COMPACT:  # made CONTIGUOUS: the data leaves the header for raw data
        nbytes = int(ds.id.get_storage_size())
        if nbytes:
            raw.append(nbytes)
        return max(header - nbytes, 0), [], True
    if layout == h5py.h5d.CONTIGUOUS:
        offset = ds.id.get_offset()
        nbytes = int(ds.id.get_storage_size())
        if offset is not None and nbytes:
            raw.append(nbytes)
            extents.append((int(offset), nbytes))
        return header, _btree_nodes(index), False
    if layout != h5py.h5d.CHUNKED:  # virtual datasets: a header, no data of their own
        return header, _btree_nodes(index), False
    chunks: list[tuple[tuple, int]] = []

    def on_chunk(chunk) -> None:
        chunks.append((chunk.chunk_offset, int(chunk.size)))
        extents.append((int(chunk.byte_offset), int(chunk.size)))

    ds.id.chunk_iter(on_chunk)
    shape, chunk_shape, maxshape = ds.shape, ds.chunks, ds.maxshape
    grown = _grown_first_axis(shape, chunk_shape, ds.id.get_type().get_size(),  # (no h5py dtype for H5T_TIME)
                              target_chunk_bytes)
    if grown:
        raw.extend(_merged_chunk_sizes(chunks, grown))
        count = len({(offset[0] // grown,) + tuple(offset[1:]) for offset, _ in chunks})
    else:
        raw.extend(n for _, n in chunks)
        count = len(chunks)
    made_anew = bool(grown) or (maxshape is not None and any(m is None for m in maxshape) and all(shape))
    if not made_anew:  # copied by H5Ocopy: its index as it is (a version-1 B-tree: nodes of a size per rank)
        node = _chunk_btree_node_bytes(len(shape))
        return header, _btree_nodes(index, node if index % node == 0 else max(index, 1)), False
    # the repack writes it anew, with the index HDF5's 1.10 format gives a fixed-size dataset
    per_chunk = FIXED_ARRAY_ADDRESS
    if dcpl.get_nfilters():
        largest = max((n for _, n in chunks), default=1)
        per_chunk += FILTER_MASK + max(1, math.ceil(largest.bit_length() / 8))
    return header, [FIXED_ARRAY_BYTES + per_chunk * count], True


def _chunk_btree_node_bytes(rank: int) -> int:
    """A version-1 B-tree node of a chunk index: 64 children, 65 keys (chunk size, filter mask, offsets)."""
    return 24 + 65 * (8 + 8 * (rank + 1)) + 64 * 8


def _grown_first_axis(shape, chunks, itemsize: int, target_chunk_bytes: int | None) -> int | None:
    """The first axis of the chunk the repack grows to for ``target_chunk_bytes`` (None: unchanged).

    The same rule as the repack's: grow by whole multiples of the chunk, within the dataset's extent."""
    if not target_chunk_bytes or not shape or not chunks or shape[0] <= chunks[0]:
        return None
    factor = int(target_chunk_bytes) // (math.prod(chunks) * itemsize)
    return min(shape[0], chunks[0] * factor) if factor >= 2 else None


def _merged_chunk_sizes(chunks: list[tuple[tuple, int]], first_axis: int) -> list[int]:
    """Stored sizes of the grown chunks: the old chunks each grown one covers, summed."""
    merged: dict[tuple, int] = {}
    for offset, nbytes in chunks:
        key = (offset[0] // first_axis,) + tuple(offset[1:])
        merged[key] = merged.get(key, 0) + nbytes
    return list(merged.values())


def _metadata_regions(extents: list[tuple[int, int]], size: int, userblock: int, page: int | None) -> int:
    """Separate runs of metadata now: about the requests a reader makes to see all of it.

    Unpaged: the runs of bytes between raw-data extents. Paged (``page``): the runs of pages holding
    no raw data (paged aggregation keeps metadata and raw data in pages of their own; the gaps at
    the end of raw-data pages are empty, not metadata).
    """
    if page:
        raw_pages = set()
        for offset, nbytes in extents:
            if nbytes > 0:
                raw_pages.update(range((offset - userblock) // page, (offset - userblock + nbytes - 1) // page + 1))
        pages = range(0, -(-(size - userblock) // page))
        return sum(1 for n in pages if n not in raw_pages and (n == 0 or n - 1 in raw_pages))
    regions, cursor = 0, userblock
    for offset, nbytes in sorted(e for e in extents if e[1] > 0):
        if offset > cursor:
            regions += 1
        cursor = max(cursor, offset + nbytes)
    return regions + (1 if cursor < size else 0)


def _pack(sizes: list[int], page: int) -> tuple[int, int]:
    """(pages, free sections) when HDF5 packs allocations of ``sizes`` into pages of ``page`` bytes.

    Below a page: best fit among the free space of pages started (HDF5's free-space manager finds
    the smallest section that fits), else a new page. A page or more: whole pages of its own.
    """
    pages, large_tails = 0, 0
    free: list[int] = []  # free space left in started pages, sorted
    for nbytes in sizes:
        if nbytes >= page:
            whole, tail = divmod(nbytes, page)
            pages += whole + (1 if tail else 0)
            large_tails += 1 if tail else 0
            continue
        where = bisect.bisect_left(free, nbytes)
        if where < len(free):
            rest = free.pop(where) - nbytes
        else:
            pages += 1
            rest = page - nbytes
        if rest:
            bisect.insort(free, rest)
            if len(free) > MAX_FREE_SECTIONS:  # the smallest scraps: rarely filled, and costly to keep sorted
                del free[0]
    return pages, len(free) + large_tails


def predict(allocations: FileAllocations, page_size: int) -> PagePrediction:
    """The size of a copy of the file paged at ``page_size``."""
    raw_pages, raw_sections = _pack(allocations.raw, page_size)
    metadata = allocations.metadata + [FREE_SECTION_BYTES * raw_sections]
    metadata_pages, metadata_sections = _pack(metadata, page_size)
    if metadata_sections * FREE_SECTION_BYTES > page_size:  # the free-space section list itself grows
        metadata_pages, _ = _pack(metadata + [FREE_SECTION_BYTES * metadata_sections], page_size)
    userblock = allocations.userblock
    if 0 < userblock < page_size:  # a paged file's user block is padded to a page
        userblock = page_size
    output = userblock + (metadata_pages + raw_pages) * page_size
    return PagePrediction(page_size=page_size, output_bytes=output,
                          overhead=output / allocations.size_bytes - 1 if allocations.size_bytes else 0.0,
                          metadata_pages=metadata_pages, raw_pages=raw_pages)


