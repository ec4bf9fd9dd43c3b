"""Repack an HDF5 / NetCDF-4 file for cloud access: paged aggregation and the NSIDC recipe.

What ``h5repack -S PAGE -G N`` does, plus the rest of the production recipe of
Lopez et al.: free-space tracking persisted, COMPACT -> CONTIGUOUS, unlimited
dimensions fixed at their current size, optional larger chunks (never larger
than a page), and everything else preserved so a NetCDF-4 file stays one.

Why by hand rather than ``H5Ocopy`` (h5py ``Group.copy``) of the whole tree:
H5Ocopy keeps each dataset's layout and dataspace, so it cannot fix unlimited
dimensions or COMPACT layouts, and object references (the ``DIMENSION_LIST`` /
``REFERENCE_LIST`` attributes that make dimension scales, hence NetCDF
dimensions) are only remapped between objects copied in the *same* call;
copied one object at a time they point at addresses of the source file. So
each dataset is recreated with its source creation property list (filters,
fill value, attribute creation order, ...) and the new layout, and every
reference is rewritten once all objects exist. Where the chunk shape is
unchanged, chunks are copied as stored bytes (no decode, no re-encode):
located with one ``H5Dchunk_iter`` pass, read with ``pread`` and written with
``H5Dwrite_chunk``; measured per chunk this is as cheap as H5Ocopy's own copy.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from pathlib import Path

import h5py
import numpy as np

from layoutlab.convert import fastcopy
from layoutlab.convert.repack_common import (  # noqa: F401  (re-exported: the module's public names)
    BLOCK_BYTES,
    DEFAULT_PAGE_SIZE,
    METADATA_CACHE_BYTES,
    PAGE_BUFFER_MIN_META_PERCENT,
    PAGE_BUFFER_PAGES,
    MiB,
    READ_GAP_BYTES,
    READ_SPAN_BYTES,
    SOURCE_CHUNK_CACHE,
    RepackSummary,
    check_signature,
    checked_options,
    parse_chunk_spec,
    parse_size,
    partial_output,
    partial_output_remover,
)
from layoutlab.convert.preallocate import expected_output_bytes, preallocate, release_preallocation
from layoutlab.errors import DAMAGED_HDF5_ERRORS, BadInputFile, UserError, damaged_reason, raised_by_h5py
from layoutlab.formats.sniff import is_netcdf4

def check_input(path: str | os.PathLike) -> None:
    """Raise ``BadInputFile`` (naming the file and the reason) unless ``path`` is an HDF5 file h5py can open."""
    check_signature(path)
    try:
        with h5py.File(path, "r"):
            pass
    except DAMAGED_HDF5_ERRORS as error:
        raise BadInputFile(path, f"HDF5 signature found but the file cannot be opened (truncated or damaged): "
                                 f"{damaged_reason(error)}") from None


def repack(
    in_path: str | os.PathLike,
    out_path: str | os.PathLike,
    page_size: int | str = DEFAULT_PAGE_SIZE,
    target_chunk_bytes: int | str | None = None,
    chunks: dict[str, tuple[int, ...]] | None = None,
    verify: bool = False,
    progress=None,
    native: bool = True,
) -> RepackSummary:
    """Repack ``in_path`` into ``out_path`` with paged aggregation; return what was done.

    ``target_chunk_bytes`` grows the chunks of chunked datasets along their
    first axis (10,000 -> 100,000 photons with 400 kB for float32) up to that
    many uncompressed bytes; ``chunks`` maps dataset paths to explicit chunk
    shapes. Neither may exceed the page size. ``progress`` is called with the
    number of source bytes handled. Writes to a temporary name next to
    ``out_path`` and renames it, so a failure leaves no ``out_path`` behind.

    With ``native`` (the default) this is ``repack_native.repack``: the native
    engine writes the copy when it can (no rechunking asked for, nothing it
    declines); otherwise this module's Python engine does, and ``notes`` says why.
    """
    if native:  # (it tries the native engine, then comes back here with native=False if it must)
        from layoutlab.convert import repack_native

        return repack_native.repack(in_path, out_path, page_size, target_chunk_bytes, chunks, verify, progress)
    in_path, out_path, page_size, target_chunk_bytes = checked_options(in_path, out_path, page_size,
                                                                        target_chunk_bytes)
    check_input(in_path)
    summary = RepackSummary(input=str(in_path), output=str(out_path), page_size=page_size,
                            input_bytes=in_path.stat().st_size)
    tmp = partial_output(out_path, os.getpid())
    started = time.perf_counter()
    try:
        with _damage_names_the_input(in_path):
            with _Repacker(in_path, tmp, page_size, target_chunk_bytes, dict(chunks or {}), summary,
                           progress) as job:
                job.run()
            if job.userblock:  # HDF5 reserves the user block but leaves its bytes to the application
                with open(tmp, "r+b") as stream:
                    stream.write(job.userblock)
            summary.seconds = time.perf_counter() - started
            if verify:
                verify_copy(in_path, tmp, summary)
        os.replace(tmp, out_path)
    finally:
        if tmp.exists():
            tmp.unlink()
    summary.output_bytes = out_path.stat().st_size
    return summary


@contextlib.contextmanager
def _damage_names_the_input(in_path):
    """What HDF5 (through h5py) raises for unreadable bytes becomes ``BadInputFile`` naming the input;
    the same exception types raised by our own code (or a full disk) propagate."""
    try:
        yield
    except DAMAGED_HDF5_ERRORS as error:
        if not (isinstance(error, OSError) or raised_by_h5py(error)):
            raise
        raise BadInputFile(in_path, f"cannot be read completely (truncated or damaged?): {damaged_reason(error)}") from None


def verify_copy(in_path, copy_path, summary: RepackSummary) -> None:
    """``--verify``: decoded data and attributes of the copy compared with the input; ``UserError`` if they differ."""
    started = time.perf_counter()
    with _damage_names_the_input(in_path):  # (stored chunks are copied undecoded: a damaged one shows here)
        problems = compare_files(in_path, copy_path)
    summary.verify_seconds = time.perf_counter() - started
    if problems:
        raise UserError(f"{in_path}: verification of the repacked copy failed: {problems[0]}"
                        + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    summary.verified = True


class _Repacker:
    def __init__(self, src_path, dst_path, page_size, target_chunk_bytes, chunks, summary, progress):
        self.src_path, self.dst_path = Path(src_path), Path(dst_path)
        self.page_size = page_size
        self.target_chunk_bytes = target_chunk_bytes
        self.explicit_chunks = {"/" + k.strip("/"): tuple(v) for k, v in chunks.items()}
        self.summary = summary
        self.progress = progress
        self.copied = {}  # source object address -> destination path (hard links, references)
        self.committed_types = {}  # source path of a named datatype -> destination path
        # (source id, destination object's path, attribute name): values hold references. The path, not
        # the open identifier: an open dataset would keep the chunks written to it in its chunk cache until
        # the file closes, placing them after everything else (the native engine closes it at once).
        self.deferred_attrs = []
        self.deferred_datasets = []  # source dataset paths whose values hold references
        self.userblock = b""
        self.scale_objects = {}  # address -> source dimension scale
        self.dimension_lengths = {}  # address of a dimension scale -> its current length
        self.dst_addresses = {}  # source object address -> address of its copy
        self.dst_refs = {}  # destination path -> object reference to it
        self.read_buffer = bytearray(0)
        # The chunk and attribute loops in C when the extension is built (same output; on the
        # ATL03-like granule user CPU 1.0 -> 0.7 s, see _fastcopy.c and README).
        self.fast = fastcopy.available()

    def __enter__(self):
        self.src = h5py.File(self.src_path, "r", rdcc_nbytes=SOURCE_CHUNK_CACHE, rdcc_nslots=4_099)
        # (a small slot table: every open dataset allocates nslots pointers up front)
        self.src_fd = os.open(self.src_path, os.O_RDONLY)
        self.dst = self._create_destination()
        self.dst_fd = preallocate(self.dst_path, expected_output_bytes(self.src_path, self.page_size))
        return self

    def __exit__(self, *exc):
        try:
            self.dst.close()
            if self.dst_fd is not None:
                release_preallocation(self.dst_fd)
        finally:
            if self.dst_fd is not None:
                os.close(self.dst_fd)
            self.src.close()
            os.close(self.src_fd)

    def _create_destination(self) -> h5py.File:
        src_fcpl = self.src.id.get_create_plist()
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        # Keep the root group's creation-order tracking: NetCDF-4 lists
        # variables and attributes in creation order.
        root_gcpl = self.src["/"].id.get_create_plist()  # the file's own fcpl does not report these
        fcpl.set_link_creation_order(root_gcpl.get_link_creation_order())
        fcpl.set_attr_creation_order(root_gcpl.get_attr_creation_order())
        userblock = src_fcpl.get_userblock()
        if userblock and userblock < self.page_size:
            # HDF5 wants a user block of a paged file to be at least a page: pad it.
            if self.page_size & (self.page_size - 1):
                raise UserError(f"{self.src_path}: has a {userblock}-byte user block; a paged copy needs a "
                                f"power-of-two page size (got {self.page_size})")
            self.summary.notes.append(f"user block padded from {userblock} to {self.page_size} bytes (one page)")
            userblock = self.page_size
        fcpl.set_userblock(userblock)
        fcpl.set_file_space_strategy(h5py.h5f.FSPACE_STRATEGY_PAGE, True, 1)
        fcpl.set_file_space_page_size(self.page_size)
        fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        # The 1.10 file format, no newer: readable by HDF5 1.10 (Debian's ncdump links
        # it), and fixed-size chunked datasets get a single-block "fixed array" chunk
        # index instead of a B-tree (fewer metadata objects; measured faster to write).
        fapl.set_libver_bounds(h5py.h5f.LIBVER_V110, h5py.h5f.LIBVER_V110)
        # Whole pages are assembled in memory and written once.
        if PAGE_BUFFER_PAGES:
            fapl.set_page_buffer_size(PAGE_BUFFER_PAGES * self.page_size, PAGE_BUFFER_MIN_META_PERCENT, 0)
        # A metadata cache big enough for a granule's headers: no evictions while
        # thousands of objects are created (measured ~20% faster on ATL03-like files).
        if METADATA_CACHE_BYTES:
            mdc = fapl.get_mdc_config()
            mdc.set_initial_size = True
            mdc.initial_size, mdc.min_size, mdc.max_size = METADATA_CACHE_BYTES, METADATA_CACHE_BYTES // 2, 2 * METADATA_CACHE_BYTES
            fapl.set_mdc_config(mdc)
        fid = h5py.h5f.create(str(self.dst_path).encode(), h5py.h5f.ACC_TRUNC, fapl=fapl, fcpl=fcpl)
        return h5py.File(fid)

    # --- walk -----------------------------------------------------------------

    def run(self):
        self._copy_userblock()
        root = self.src["/"]
        self.src_fileno = h5py.h5o.get_info(root.id).fileno
        self.netcdf4 = is_netcdf4(self.src)
        self.copied[_address(root)] = "/"
        self._copy_attributes(root.id, self.dst["/"].id)
        self._copy_members(root, self.dst["/"], "/")
        self._rewrite_references()
        self.dst.flush()

    def _copy_userblock(self):
        size = self.src.id.get_create_plist().get_userblock()
        if size:
            self.userblock = os.pread(self.src_fd, size, 0)

    def _copy_members(self, src_group: h5py.Group, dst_group: h5py.Group, dst_name: str):
        for name, link_type, address in _members(src_group):
            bname = name.encode("utf-8", "surrogateescape")
            if link_type == h5py.h5l.TYPE_SOFT:
                dst_group[name] = h5py.SoftLink(src_group.id.links.get_val(bname).decode("utf-8", "surrogateescape"))
                continue
            if link_type == h5py.h5l.TYPE_EXTERNAL:
                link = src_group.get(name, getlink=True)
                dst_group[name] = h5py.ExternalLink(link.filename, link.path)
                continue
            key = (self.src_fileno, address)
            if key in self.copied:  # a second hard link to an object already copied
                dst_group[name] = self.dst[self.copied[key]]
                continue
            dst_path = _join(dst_name, name)
            self.copied[key] = dst_path
            oid = h5py.h5o.open(src_group.id, bname)
            kind = h5py.h5i.get_type(oid)
            if kind == h5py.h5i.GROUP:
                src = h5py.Group(oid)
                gcpl = oid.get_create_plist()
                new = h5py.Group(h5py.h5g.create(dst_group.id, bname, gcpl=gcpl))
                self.summary.groups += 1
                self._copy_attributes(oid, new.id, gcpl)
                self._copy_members(src, new, dst_path)
            elif kind == h5py.h5i.DATATYPE:
                self._copy_named_type(_join(src_group.name, name), dst_group, name, dst_path)
            else:
                self.summary.datasets += 1
                self._copy_dataset(h5py.Dataset(oid), dst_group, name, _join(src_group.name, name))

    def _copy_named_type(self, src_path, dst_group, name, dst_path):
        if src_path in self.committed_types:  # already copied on first use
            dst_group[name] = self.dst[self.committed_types[src_path]]
            return
        h5py.h5o.copy(self.src.id, src_path.encode(), dst_group.id, name.encode())
        self.committed_types[src_path] = dst_path

    def _file_type(self, tid: h5py.h5t.TypeID) -> h5py.h5t.TypeID:
        """The destination's copy of a committed (named) datatype, or the type itself."""
        if not tid.committed():
            return tid
        src_name = h5py.h5i.get_name(tid).decode()
        if src_name not in self.committed_types:
            # Used before its definition in creation order: copy it now, at its own path.
            parent = src_name.rsplit("/", 1)[0] or "/"
            self.dst.require_group(parent)
            h5py.h5o.copy(self.src.id, src_name.encode(), self.dst.id, src_name.encode())
            self.committed_types[src_name] = src_name
            self.copied[_address(self.src[src_name])] = src_name
        return h5py.h5t.open(self.dst.id, self.committed_types[src_name].encode())

    # --- attributes -------------------------------------------------------------

    def _copy_attributes(self, oid, dst_id, create_plist=None):
        """Every attribute of the object ``oid`` onto ``dst_id`` (HDF5 identifiers, not h5py objects)."""
        # Low-level calls only: this runs for every attribute (~6,000 in an
        # ATL03 granule) and h5py's high-level dtype translation dominates otherwise.
        # Attributes are opened by position (no name listing, no name lookup).
        count = _attribute_count(oid)
        if not count:
            return
        plist = create_plist if create_plist is not None else oid.get_create_plist()
        index = (h5py.h5.INDEX_CRT_ORDER if _tracks_creation_order(plist, "get_attr_creation_order")
                 else h5py.h5.INDEX_NAME)
        position = 0
        while position < count:
            if self.fast:
                # Plain attributes (most of them) in C, in order, up to the first that is
                # not plain: that one is copied here, then C goes on after it.
                position, copied = fastcopy.copy_plain_attributes(oid, dst_id, index, position)
                self.summary.attributes += copied
                if position >= count:
                    break
            self._copy_attribute(oid, dst_id, position, index)
            position += 1

    def _copy_attribute(self, oid, dst_id, position, index):
        src_attr = h5py.h5a.open(oid, index=position, index_type=index)
        bname = src_attr.get_name()
        src_type = src_attr.get_type()
        tid = self._file_type(src_type)
        space = src_attr.get_space()
        dst_attr = h5py.h5a.create(dst_id, bname, tid, space)
        self.summary.attributes += 1
        if space.get_simple_extent_type() == h5py.h5s.NULL:
            return
        if _type_kind(src_type) == "fixed":
            # Bytes as stored, with the file type as memory type: no conversion
            # (h5py's numpy view of a NULLTERM string would lose its last byte).
            data = np.empty(space.get_simple_extent_dims(), dtype=_opaque_dtype(src_type.get_size()))
            src_attr.read(data, mtype=src_type)
            dst_attr.write(data, mtype=tid)
            return
        dtype = src_attr.dtype
        if _holds_references(dtype):
            # written once every target exists
            self.deferred_attrs.append((oid, h5py.h5i.get_name(dst_id), bname))
            return
        data = np.empty(space.get_simple_extent_dims(), dtype=dtype)
        src_attr.read(data)
        dst_attr.write(data)

    # --- datasets ---------------------------------------------------------------

    def _copy_dataset(self, src: h5py.Dataset, dst_group: h5py.Group, name: str, path: str):
        dcpl = src.id.get_create_plist()
        layout = dcpl.get_layout()
        space = src.id.get_space()
        is_simple = space.get_simple_extent_type() == h5py.h5s.SIMPLE
        # Shapes from the dataspace and creation plist, not h5py's properties: each
        # of those opens fresh identifiers, and a granule has ~1,000 datasets.
        src_shape = space.get_simple_extent_dims() if is_simple else ()
        shape = src_shape
        maxshape = (tuple(None if m == h5py.h5s.UNLIMITED else m for m in space.get_simple_extent_dims(True))
                    if is_simple else ())
        src_chunks = dcpl.get_chunk() if layout == h5py.h5d.CHUNKED else None
        new_chunks = src_chunks
        ftype = src.id.get_type()
        if layout == h5py.h5d.VIRTUAL:
            raise UserError(f"{self.src_path}: {path} is a virtual dataset; repack does not support VDS")
        if layout == h5py.h5d.COMPACT:
            dcpl.set_layout(h5py.h5d.CONTIGUOUS)
            self.summary.compact_to_contiguous.append(path)
        new_maxshape = maxshape
        if is_simple and any(m is None for m in maxshape):
            if self.netcdf4:  # only NetCDF lets a variable be shorter than its (unlimited) dimension
                shape = self._current_extent(src, shape, maxshape)
            if all(n > 0 for n in shape):
                new_maxshape = tuple(shape)
                self.summary.unlimited_fixed.append(path)
            else:  # a zero-length dimension cannot be fixed with a chunked layout; nothing to page anyway
                self.summary.unlimited_kept.append(path)
        if layout == h5py.h5d.CHUNKED and is_simple and math.prod(src_shape) == 0:
            # Nothing stored: keep the chunk shape, shrunk to fit fixed dimensions.
            new_chunks = tuple(c if m is None else min(c, m) for c, m in zip(src_chunks, new_maxshape))
            if new_chunks != src_chunks:
                dcpl.set_chunk(new_chunks)
        elif layout == h5py.h5d.CHUNKED and is_simple:
            new_chunks = self._choose_chunks(src, path, src_shape, src_chunks, new_maxshape)
            if new_chunks != src_chunks:
                dcpl.set_chunk(new_chunks)
                self.summary.rechunked[path] = {"from": list(src_chunks), "to": list(new_chunks)}
        elif path in self.explicit_chunks and is_simple:
            new_chunks = self._checked_explicit_chunks(path, src, new_maxshape)
            dcpl.set_chunk(new_chunks)
            self.summary.rechunked[path] = {"from": None, "to": list(new_chunks)}
        if is_simple:
            new_space = h5py.h5s.create_simple(tuple(shape),
                                               tuple(h5py.h5s.UNLIMITED if m is None else m for m in new_maxshape))
        else:
            new_space = space.copy()
        tid = self._file_type(ftype)
        dst_id = h5py.h5d.create(dst_group.id, name.encode(), tid, new_space, dcpl=dcpl)
        self._copy_attributes(src.id, dst_id, dcpl)
        # (H5Tdetect_class looks inside compound, array and vlen types: the
        # costlier numpy dtype is built only for types that hold a reference)
        if ftype.detect_class(h5py.h5t.REFERENCE) and _holds_references(src.dtype):
            self.deferred_datasets.append((src, h5py.Dataset(dst_id)))
        elif not is_simple:
            if space.get_simple_extent_type() == h5py.h5s.SCALAR:
                _copy_selection(src, h5py.Dataset(dst_id), ())
        elif math.prod(shape) == 0:
            pass
        elif layout == h5py.h5d.CHUNKED and new_chunks == src_chunks and _type_kind(ftype) == "fixed":
            # (variable-length values live in the file's global heap: their chunks
            # hold heap addresses of the source file and must be converted instead)
            self._copy_raw_chunks(src, dst_id)
        else:
            self._copy_decoded(src, h5py.Dataset(dst_id), new_chunks)

    def _current_extent(self, src: h5py.Dataset, shape, maxshape) -> tuple[int, ...]:
        """Each unlimited axis at its current size: the dataset's own or, if longer, that of the
        dimension scale on the axis. NetCDF variables may be shorter than an unlimited
        dimension (the rest reads as fill) but not than a fixed one."""
        new = list(shape)
        scales = self._attached_scales(src)
        for axis, limit in enumerate(maxshape):
            if limit is None:
                for key in scales.get(axis, ()):
                    new[axis] = max(new[axis], self._dimension_length(key))
        return tuple(new)

    def _attached_scales(self, src: h5py.Dataset) -> dict[int, list]:
        attrs = src.attrs
        if attrs.get("CLASS") == b"DIMENSION_SCALE":
            key = _address(src)
            self.scale_objects.setdefault(key, src)
            return {0: [key]}
        if "DIMENSION_LIST" not in attrs:
            return {}
        scales: dict[int, list] = {}
        for axis, refs in enumerate(attrs["DIMENSION_LIST"]):
            for ref in refs:
                if ref:
                    scale = self.src[ref]
                    key = _address(scale)
                    self.scale_objects.setdefault(key, scale)
                    scales.setdefault(axis, []).append(key)
        return scales

    def _dimension_length(self, key) -> int:
        if key not in self.dimension_lengths:
            scale = self.scale_objects[key]
            self.dimension_lengths[key] = max(scale.shape[0] if scale.shape else 0, _scale_length(scale))
        return self.dimension_lengths[key]

    def _choose_chunks(self, src: h5py.Dataset, path, shape, chunks, new_maxshape) -> tuple[int, ...]:
        if path in self.explicit_chunks:
            return self._checked_explicit_chunks(path, src, new_maxshape)
        new = list(chunks)
        if self.target_chunk_bytes and shape and shape[0] > chunks[0]:
            chunk_bytes = math.prod(chunks) * src.dtype.itemsize
            factor = self.target_chunk_bytes // chunk_bytes
            if factor >= 2:
                new[0] = min(shape[0], chunks[0] * factor)
        # A fixed dimension cannot be smaller than its chunk: shrink the chunk to fit.
        for axis, limit in enumerate(new_maxshape):
            if limit is not None and new[axis] > limit:
                new[axis] = limit
        return tuple(new)

    def _checked_explicit_chunks(self, path, src, new_maxshape) -> tuple[int, ...]:
        new = self.explicit_chunks[path]
        if len(new) != len(src.shape):
            raise UserError(f"--chunks {path}: {len(new)} values for a {len(src.shape)}-d dataset {src.shape}")
        if math.prod(new) * src.dtype.itemsize > self.page_size:
            raise UserError(f"--chunks {path}={','.join(map(str, new))}: "
                            f"{math.prod(new) * src.dtype.itemsize} bytes, larger than the page size {self.page_size}")
        return tuple(min(c, m) if m is not None else c for c, m in zip(new, new_maxshape))

    def _copy_raw_chunks(self, src: h5py.Dataset, dst_id):
        """Stored chunk bytes copied as they are: no decompression, no recompression."""
        if self.fast:
            chunks, _ = fastcopy.copy_chunks(src.id, dst_id, self.src_fd, src.id.rank, READ_SPAN_BYTES,
                                             READ_GAP_BYTES, self.progress)
            self.summary.chunks_copied_raw += chunks
            return
        located = []
        src.id.chunk_iter(lambda info: located.append((info.chunk_offset, info.filter_mask, info.byte_offset, info.size)))
        located.sort(key=lambda item: item[2])  # read the source front to back
        write = dst_id.write_direct_chunk
        done = 0
        for span_start, span_end, members in _read_spans(located):
            # One read per run of neighbouring chunks (up to READ_SPAN_BYTES) into one
            # reused buffer (a fresh multi-MB bytes object per read costs page faults),
            # sliced without copying.
            length = span_end - span_start
            if len(self.read_buffer) < length:
                self.read_buffer = bytearray(length)
            view = memoryview(self.read_buffer)[:length]
            if os.preadv(self.src_fd, [view], span_start) != length:
                raise OSError(f"{src.name}: chunks up to byte {span_end} lie beyond the end of the file")
            for offset, mask, address, size in members:
                write(offset, view[address - span_start : address - span_start + size], mask)
            done += span_end - span_start
            if self.progress and done >= 16 * MiB:
                self.progress(done)
                done = 0
        if self.progress and done:
            self.progress(done)
        self.summary.chunks_copied_raw += len(located)

    def _copy_decoded(self, src: h5py.Dataset, dst: h5py.Dataset, new_chunks):
        for selection in _blocks(src.shape, new_chunks or src.chunks, src.dtype.itemsize):
            _copy_selection(src, dst, selection)
        if self.progress:
            self.progress(src.id.get_storage_size())  # progress counts stored (source) bytes

    # --- references -------------------------------------------------------------

    def _rewrite_references(self):
        for src_id, dst_path, bname in self.deferred_attrs:
            src_attr = h5py.h5a.open(src_id, bname)
            dst_attr = h5py.h5a.open(h5py.h5o.open(self.dst.id, dst_path), bname)
            tid = src_attr.get_type()
            offsets = _object_reference_offsets(tid)
            if offsets is not None:
                # Fixed-size values whose references are plain object addresses
                # (REFERENCE_LIST of every dimension scale): rewritten in place.
                data = np.empty(src_attr.shape, dtype=f"V{tid.get_size()}")
                src_attr.read(data, mtype=tid)
                self._remap_addresses(data, offsets)
                dst_attr.write(data, mtype=dst_attr.get_type())
                continue
            data = np.empty(src_attr.shape, dtype=src_attr.dtype)
            src_attr.read(data)
            dst_attr.write(self._map_references(data))
        for src, dst in self.deferred_datasets:
            if src.shape and math.prod(src.shape) == 0:
                continue
            dst[()] = self._map_references(np.asarray(src[()]))

    def _dst_address(self, src_address: int) -> int:
        """Address in the destination of the copy of the source object at ``src_address``."""
        if src_address not in self.dst_addresses:
            dst_path = self.copied[(self.src_fileno, src_address)]
            oid = h5py.h5o.open(self.dst.id, dst_path.encode("utf-8", "surrogateescape"))
            self.dst_addresses[src_address] = h5py.h5o.get_info(oid).addr
        return self.dst_addresses[src_address]

    def _remap_addresses(self, data: np.ndarray, offsets: list[int]):
        if not offsets or data.size == 0:
            return
        raw = data.reshape(-1).view(np.uint8).reshape(data.size, -1)
        for offset in offsets:
            addresses = raw[:, offset : offset + 8].copy().view("<u8").ravel()
            mapped = np.array([self._dst_address(int(a)) if a not in (0, UNDEFINED_ADDRESS) else a
                               for a in addresses], dtype="<u8")
            raw[:, offset : offset + 8] = mapped.view(np.uint8).reshape(-1, 8)
            self.summary.references_rewritten += int(np.count_nonzero(addresses))

    def _map_references(self, data):
        """The same values with each reference pointing at the destination's copy of its target."""
        dtype = data.dtype
        if dtype.names:
            out = np.empty(data.shape, dtype=dtype)
            for field_name in dtype.names:
                out[field_name] = self._map_references(data[field_name])
            return out
        vlen_base = h5py.check_vlen_dtype(dtype)
        if vlen_base is not None and _holds_references(vlen_base):
            out = np.empty(data.shape, dtype=dtype)
            for index in np.ndindex(data.shape):
                out[index] = self._map_references(np.asarray(data[index], dtype=vlen_base))
            return out
        ref_kind = h5py.check_ref_dtype(dtype)
        if ref_kind is None:
            return data
        out = np.empty(data.shape, dtype=dtype)
        for index in np.ndindex(data.shape):
            out[index] = self._map_one(data[index], ref_kind)
            self.summary.references_rewritten += 1
        return out

    def _map_one(self, ref, ref_kind):
        if not ref:
            return ref
        # Low-level dereference + address: h5py's self.src[ref] costs ~0.35 ms and
        # .name on such an object makes HDF5 search the whole file (~1 ms).
        src_address = h5py.h5o.get_info(h5py.h5r.dereference(ref, self.src.id)).addr
        dst_path = self.copied[(self.src_fileno, src_address)]
        if ref_kind is h5py.RegionReference:
            region = h5py.h5r.get_region(ref, self.src.id)
            return h5py.h5r.create(self.dst.id, dst_path.encode(), h5py.h5r.DATASET_REGION, region)
        if dst_path not in self.dst_refs:
            self.dst_refs[dst_path] = h5py.h5r.create(self.dst.id, dst_path.encode("utf-8", "surrogateescape"),
                                                      h5py.h5r.OBJECT)
        return self.dst_refs[dst_path]


def _read_spans(located, max_gap=None, max_span=None):
    """Group chunks sorted by address into (start, end, chunks) runs read with one call each:
    neighbours closer than ``max_gap``, runs up to ``max_span`` bytes (default
    ``READ_SPAN_BYTES``; a larger chunk is a run of its own)."""
    max_span = READ_SPAN_BYTES if max_span is None else max_span
    max_gap = READ_GAP_BYTES if max_gap is None else max_gap
    run: list = []
    start = end = 0
    for item in located:
        address, size = item[2], item[3]
        if run and (address - end > max_gap or address + size - start > max_span or address < end):
            yield start, end, run
            run = []
        if not run:
            start = address
        run.append(item)
        end = max(end, address + size) if len(run) > 1 else address + size
    if run:
        yield start, end, run


UNDEFINED_ADDRESS = np.uint64(0xFFFFFFFFFFFFFFFF)


def _object_reference_offsets(tid) -> list[int] | None:
    """Byte offsets of the old-style object references in a fixed-size type (``[]``: none),
    or None when the type holds references that cannot be rewritten as raw addresses
    (region references, variable-length parts)."""
    kind = tid.get_class()
    if kind == h5py.h5t.REFERENCE:
        return [0] if tid.get_size() == 8 and tid.equal(h5py.h5t.STD_REF_OBJ) else None
    if kind == h5py.h5t.COMPOUND:
        offsets = []
        for index in range(tid.get_nmembers()):
            inner = _object_reference_offsets(tid.get_member_type(index))
            if inner is None:
                return None
            offsets += [tid.get_member_offset(index) + o for o in inner]
        return offsets
    if tid.detect_class(h5py.h5t.REFERENCE) or tid.detect_class(h5py.h5t.VLEN):
        return None
    return []


def _scale_length(scale: h5py.Dataset) -> int:
    """Longest extent among the dataset dimensions a dimension scale is attached to (0 if none)."""
    if scale.attrs.get("CLASS") != b"DIMENSION_SCALE" or "REFERENCE_LIST" not in scale.attrs:
        return 0
    length = 0
    for entry in scale.attrs["REFERENCE_LIST"]:
        target = scale.file[entry[0]]
        length = max(length, target.shape[int(entry[1])] if target.shape else 0)
    return length


def _address(obj) -> tuple[int, int]:
    info = h5py.h5o.get_info(obj.id)
    return (info.fileno, info.addr)


def _attribute_count(oid) -> int:
    """Number of attributes of an object: H5Aget_num_attrs reads only that (~4 µs), where
    H5Oget_info fills in every field of the object's info (~14 µs; ~1,200 objects per granule)."""
    if hasattr(h5py.h5a, "get_num_attrs"):  # (a deprecated call: HDF5 may be built without it)
        return h5py.h5a.get_num_attrs(oid)
    return h5py.h5o.get_info(oid).num_attrs


def _join(parent: str, name: str) -> str:
    return f"{parent.rstrip('/')}/{name}"


def _tracks_creation_order(plist, getter) -> bool:
    return bool(getattr(plist, getter)() & h5py.h5p.CRT_ORDER_TRACKED)


def _members(group: h5py.Group) -> list[tuple[str, int, int]]:
    """(name, link type, object address) in creation order when the group tracks it (NetCDF-4 does), else by name."""
    gcpl = group.id.get_create_plist()
    index = h5py.h5.INDEX_CRT_ORDER if _tracks_creation_order(gcpl, "get_link_creation_order") else h5py.h5.INDEX_NAME
    members: list[tuple[str, int, int]] = []
    group.id.links.iterate(
        lambda name, info: members.append((name.decode("utf-8", "surrogateescape"), info.type, info.u)) or None,
        idx_type=index, info=True)
    return members


def _type_kind(tid: h5py.h5t.TypeID) -> str:
    """``"fixed"`` when the stored bytes can be copied as they are, else ``"convert"``."""
    if tid.detect_class(h5py.h5t.VLEN) or tid.detect_class(h5py.h5t.REFERENCE):
        return "convert"
    if isinstance(tid, h5py.h5t.TypeStringID) and tid.is_variable_str():
        return "convert"
    if isinstance(tid, (h5py.h5t.TypeCompoundID, h5py.h5t.TypeArrayID)) and tid.detect_class(h5py.h5t.STRING):
        return "convert"  # may hide a variable-length string member: let h5py convert
    return "fixed"


_OPAQUE_DTYPES: dict[int, np.dtype] = {}


def _opaque_dtype(size: int) -> np.dtype:
    """``V<size>``: a numpy type that holds any stored value's bytes unchanged (cached: one per size)."""
    if size not in _OPAQUE_DTYPES:
        _OPAQUE_DTYPES[size] = np.dtype(f"V{size}")
    return _OPAQUE_DTYPES[size]


def _is_fixed_size(dtype: np.dtype) -> bool:
    """No variable-length parts (vlen strings/sequences, references): bytes can be copied as stored."""
    if dtype.kind == "O" or _holds_references(dtype):
        return False
    if dtype.names:
        return all(_is_fixed_size(dtype.fields[n][0]) for n in dtype.names)
    if dtype.subdtype is not None:
        return _is_fixed_size(dtype.subdtype[0])
    return True


def _copy_selection(src: h5py.Dataset, dst: h5py.Dataset, selection) -> int:
    """Copy ``src[selection]`` into ``dst`` (decoded); return the bytes moved."""
    if not _is_fixed_size(src.dtype):
        data = src[selection]
        dst[selection] = data
        return getattr(data, "nbytes", 0)
    ftype = src.id.get_type()
    if selection == ():
        buffer = np.empty((), dtype=f"V{ftype.get_size()}")
        src.id.read(h5py.h5s.ALL, h5py.h5s.ALL, buffer, mtype=ftype)
        dst.id.write(h5py.h5s.ALL, h5py.h5s.ALL, buffer, mtype=dst.id.get_type())
        return buffer.nbytes
    start = tuple(s.start for s in selection)
    count = tuple(s.stop - s.start for s in selection)
    buffer = np.empty(count, dtype=f"V{ftype.get_size()}")
    memory = h5py.h5s.create_simple(count)
    for dataset, call, mtype in ((src, "read", ftype), (dst, "write", dst.id.get_type())):
        file_space = dataset.id.get_space()
        file_space.select_hyperslab(start, count)
        getattr(dataset.id, call)(memory, file_space, buffer, mtype=mtype)
    return buffer.nbytes


def _holds_references(dtype: np.dtype) -> bool:
    if h5py.check_ref_dtype(dtype) is not None:
        return True
    if dtype.names:
        return any(_holds_references(dtype.fields[n][0]) for n in dtype.names)
    if dtype.subdtype is not None:
        return _holds_references(dtype.subdtype[0])
    base = h5py.check_vlen_dtype(dtype)
    return base is not None and base is not str and base is not bytes and _holds_references(np.dtype(base))


def _blocks(shape, chunks, itemsize, limit=BLOCK_BYTES):
    """Slices that tile ``shape``, aligned to whole ``chunks``, each at most ~``limit`` bytes decoded."""
    chunks = tuple(chunks) if chunks else tuple(shape)
    ndim = len(shape)
    # Grow the block from the last axis backwards while it stays under the limit.
    block = list(chunks)
    for axis in range(ndim - 1, -1, -1):
        others = math.prod(block) // block[axis] * itemsize
        whole_chunks = max(1, limit // max(1, others * chunks[axis]))
        block[axis] = min(shape[axis], chunks[axis] * whole_chunks)
        if block[axis] < shape[axis]:
            break
    ranges = [range(0, shape[axis], max(1, block[axis])) for axis in range(ndim)]
    for starts in np.ndindex(*[len(r) for r in ranges]):
        yield tuple(slice(r[i], min(r[i] + block[axis], shape[axis])) for axis, (r, i) in enumerate(zip(ranges, starts)))


# --- verification -------------------------------------------------------------


def compare_files(a_path, b_path, block_bytes=BLOCK_BYTES) -> list[str]:
    """Differences in decoded data and attributes between two HDF5 files (empty list: same content).

    Layout (chunking, page strategy, unlimited vs fixed maximum shape) is allowed
    to differ; shapes, dtypes, values, fill values, filters' decoded result and
    attributes are not. References are compared by the path of their target.
    """
    problems: list[str] = []
    _PATHS.clear()  # reference-target indexes are per open file
    with h5py.File(a_path, "r") as a, h5py.File(b_path, "r") as b:
        _compare_attrs(a["/"], b["/"], problems)
        seen: list[str] = []
        a.visit_links(seen.append) if hasattr(a, "visit_links") else a.visit(seen.append)
        for name in seen:
            if name not in b:
                problems.append(f"/{name}: missing from the copy")
                continue
            link_a, link_b = a.get(name, getlink=True), b.get(name, getlink=True)
            if type(link_a) is not type(link_b):
                problems.append(f"/{name}: link kind {type(link_a).__name__} became {type(link_b).__name__}")
                continue
            if isinstance(link_a, (h5py.SoftLink, h5py.ExternalLink)):
                continue
            obj_a, obj_b = a[name], b[name]
            if type(obj_a) is not type(obj_b):
                problems.append(f"/{name}: {type(obj_a).__name__} became {type(obj_b).__name__}")
                continue
            if isinstance(obj_a, h5py.Datatype):
                if obj_a.dtype != obj_b.dtype:
                    problems.append(f"/{name}: named type {obj_a.dtype} became {obj_b.dtype}")
                continue
            _compare_attrs(obj_a, obj_b, problems)
            if isinstance(obj_a, h5py.Dataset):
                _compare_dataset(obj_a, obj_b, problems, block_bytes)
        extra = []
        b.visit(extra.append)
        missing_in_a = set(extra) - set(seen)
        for name in sorted(missing_in_a):
            problems.append(f"/{name}: present in the copy only")
    _PATHS.clear()
    return problems


def _compare_attrs(a, b, problems):
    names_a, names_b = set(a.attrs), set(b.attrs)
    if names_a != names_b:
        problems.append(f"{a.name}: attributes differ: {sorted(names_a ^ names_b)}")
    for name in names_a & names_b:
        try:
            va, vb = a.attrs[name], b.attrs[name]
        except (OSError, TypeError) as error:  # e.g. empty (H5S_NULL) attributes of odd types
            va = vb = repr(error)
        if not _same_values(va, vb, a.file, b.file):
            problems.append(f"{a.name}: attribute {name!r} differs")
        elif a.attrs.get_id(name).dtype != b.attrs.get_id(name).dtype:
            problems.append(f"{a.name}: attribute {name!r} type {a.attrs.get_id(name).dtype} "
                            f"became {b.attrs.get_id(name).dtype}")


def _compare_dataset(a: h5py.Dataset, b: h5py.Dataset, problems, block_bytes):
    grown = (a.shape is not None and b.shape is not None and a.shape != b.shape and len(a.shape) == len(b.shape)
             and all(nb == na or (nb > na and m is None) for na, nb, m in zip(a.shape, b.shape, a.maxshape)))
    if grown and a.dtype == b.dtype:
        # An unlimited axis fixed at its dimension's length: the original part must match, the rest is fill.
        if not _extension_is_fill(a, b, block_bytes):
            problems.append(f"{a.name}: the part beyond the original shape {a.shape} is not fill value")
    elif a.shape != b.shape or a.dtype != b.dtype:
        problems.append(f"{a.name}: shape/dtype {a.shape} {a.dtype} became {b.shape} {b.dtype}")
        return
    if a.compression != b.compression or a.shuffle != b.shuffle or a.fletcher32 != b.fletcher32:
        problems.append(f"{a.name}: filters changed ({a.compression}, shuffle={a.shuffle} -> "
                        f"{b.compression}, shuffle={b.shuffle})")
    fill_a, fill_b = a.id.get_create_plist(), b.id.get_create_plist()
    if fill_a.fill_value_defined() != fill_b.fill_value_defined() or not _same_values(a.fillvalue, b.fillvalue):
        problems.append(f"{a.name}: fill value {a.fillvalue!r} became {b.fillvalue!r}")
    if a.shape is None:
        return
    if not a.shape:
        if not _same_values(a[()], b[()], a.file, b.file):
            problems.append(f"{a.name}: value differs")
        return
    if math.prod(a.shape) == 0:
        return
    for selection in _blocks(a.shape, a.chunks or a.shape, a.dtype.itemsize, block_bytes):
        if not _same_values(a[selection], b[selection], a.file, b.file):
            problems.append(f"{a.name}: values differ in {selection}")
            return


_PATHS: dict = {}


def _path_of(f: h5py.File, ref) -> str:
    """Path of a reference's target, from a per-file address index (h5py's ``.name`` on an
    object opened by reference searches the whole file: ~6 ms each on a granule)."""
    key = f.id.id
    if key not in _PATHS:
        index = {h5py.h5o.get_info(f.id).addr: "/"}
        f.visititems(lambda name, obj: index.setdefault(h5py.h5o.get_info(obj.id).addr, "/" + name) and None)
        _PATHS[key] = index
    return _PATHS[key].get(h5py.h5o.get_info(f[ref].id).addr, "?")


def _extension_is_fill(a: h5py.Dataset, b: h5py.Dataset, block_bytes) -> bool:
    for axis, (na, nb) in enumerate(zip(a.shape, b.shape)):
        if nb == na:
            continue
        region = tuple(slice(na, nb) if i == axis else slice(0, n) for i, n in enumerate(b.shape))
        extent = tuple(s.stop - s.start for s in region)
        for selection in _blocks(extent, b.chunks or extent, b.dtype.itemsize, block_bytes):
            shifted = tuple(slice(r.start + s.start, r.start + s.stop) for r, s in zip(region, selection))
            values = b[shifted]
            fill = np.full(values.shape, b.fillvalue, dtype=b.dtype) if b.dtype.kind != "O" else None
            if fill is not None and not _same_values(values, fill):
                return False
    return True


def _same_values(x, y, file_x=None, file_y=None) -> bool:
    if isinstance(x, h5py.Empty) or isinstance(y, h5py.Empty):
        return isinstance(x, h5py.Empty) and isinstance(y, h5py.Empty) and x.dtype == y.dtype
    if isinstance(x, h5py.Reference) or isinstance(x, h5py.RegionReference):
        if not x or not y:
            return bool(x) == bool(y)
        return _path_of(file_x, x) == _path_of(file_y, y)
    x_arr, y_arr = np.asarray(x), np.asarray(y)
    if x_arr.shape != y_arr.shape:
        return False
    if x_arr.dtype.names:
        return all(_same_values(x_arr[n], y_arr[n], file_x, file_y) for n in x_arr.dtype.names)
    if x_arr.dtype.kind == "O":
        if x_arr.ndim == 0:
            p, q = x_arr[()], y_arr[()]
            if isinstance(p, (np.ndarray, h5py.Reference, h5py.RegionReference)):
                return _same_values(p, q, file_x, file_y)
            return type(p) is type(q) and bool(p == q)
        return all(_same_values(p, q, file_x, file_y) for p, q in zip(x_arr.ravel(), y_arr.ravel()))
    if x_arr.dtype.kind in "fc":
        return bool(np.array_equal(x_arr, y_arr, equal_nan=True))
    return bool(np.array_equal(x_arr, y_arr))
