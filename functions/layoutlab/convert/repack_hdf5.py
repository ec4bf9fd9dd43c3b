"""Repack an HDF5 / NetCDF-4 file for cloud access: paged aggregation and the NSIDC recipe.

What ``h5repack -S PAGE -G N`` does, plus the rest of the production recipe of
Lopez et al.: free-space tracking persisted, COMPACT -> CONTIGUOUS, unlimited
dimensions fixed at their current size, optional larger chunks (never larger
than a page), and everything else preserved so a NetCDF-4 file stays one.

How: HDF5's ``H5Ocopy`` copies what does not change (stored chunks undecoded, attributes,
committed types, links); the datasets whose layout, dataspace, chunks or fill value must change
are decided from the source first and made once, directly (``_copy_walking``: the groups on the
way to them are rebuilt in link order, everything else copied by one ``H5Ocopy`` per member or
subtree), or, when an object is linked twice or a named datatype exists, after one ``H5Ocopy`` of
the whole tree (``_copy_whole_tree``), over their copies. References are rewritten from the
source's values at the end (H5Ocopy does not remap them across these calls). Where the chunk shape
is unchanged, a dataset made anew gets its chunks as stored bytes (``H5Dchunk_iter``, ``pread``,
``H5Dwrite_chunk``).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import itertools
import math
import os
import threading
import time
from pathlib import Path

import h5py
import numpy as np

from layoutlab.bounded_decoding import bounded_by, declared_chunk_bytes
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
    CopyDiffers,
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
from layoutlab.formats.paged_layout import ancestor_groups  # (one rule: the page model counts the groups walked)
from layoutlab.formats.sniff import is_netcdf4
from layoutlab.hdf5_input import attribute_value_bytes, hdf5_library, open_input

def check_input(path: str | os.PathLike) -> None:
    """Raise ``BadInputFile`` (naming the file and the reason) unless ``path`` is an HDF5 file h5py can open."""
    check_signature(path)
    try:
        with open_input(path):
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
    decoding=None,
    copy_written=None,
) -> RepackSummary:
    """Repack ``in_path`` into ``out_path`` with paged aggregation; return what was done.

    ``target_chunk_bytes`` grows the chunks of chunked datasets along their
    first axis (10,000 -> 100,000 photons with 400 kB for float32) up to that
    many uncompressed bytes; ``chunks`` maps dataset paths to explicit chunk
    shapes. Neither may exceed the page size. ``progress`` is called with the
    number of source bytes handled. Writes to a temporary name next to
    ``out_path`` and renames it, so a failure leaves no ``out_path`` behind.

    ``copy_written`` (with ``verify``) is called with the copy's temporary path once it is written and
    before it is verified (the convert task starts uploading it then: kinds/_transfer.PublishOnVerdict).

    ``layoutlab.convert.repack.repack`` is what callers use (it starts --verify's decode check).
    """
    in_path, out_path, page_size, target_chunk_bytes = checked_options(in_path, out_path, page_size,
                                                                        target_chunk_bytes)
    check_input(in_path)
    summary = RepackSummary(input=str(in_path), output=str(out_path), page_size=page_size,
                            input_bytes=in_path.stat().st_size)
    tmp = partial_output(out_path, os.getpid())
    started = time.perf_counter()
    try:
        with _damage_names_the_input(in_path):
            try:
                with _damage_names_the_input(in_path):
                    with _Repacker(in_path, tmp, page_size, target_chunk_bytes, dict(chunks or {}), summary,
                                   progress, decoding=decoding) as job:
                        job.run()
            except UserError as error:
                # HDF5 2.0 writing with libver "latest" gives objects HDF5 1.10's format cannot hold: the
                # copy keeps their format (the input was unreadable by 1.10 tools already); said in a note
                if NEWER_FORMAT_REFUSED not in str(error):
                    raise
                summary.notes.append(NEWER_FORMAT_NOTE)
                with _Repacker(in_path, tmp, page_size, target_chunk_bytes, dict(chunks or {}), summary,
                               progress, newest_format=True, decoding=decoding) as job:
                    job.run()
            if job.userblock:  # HDF5 reserves the user block but leaves its bytes to the application
                with open(tmp, "r+b") as stream:
                    stream.write(job.userblock)
            summary.seconds = time.perf_counter() - started
            if verify:
                if copy_written is not None:
                    copy_written(tmp)
                verify_copy(in_path, tmp, summary, decoding, source_digests=job.source_digests)
        os.replace(tmp, out_path)
    finally:
        if tmp.exists():
            tmp.unlink()
    summary.output_bytes = out_path.stat().st_size
    return summary


@contextlib.contextmanager
def _damage_names_the_input(in_path, doing="copy it"):
    """What HDF5 (through h5py) raises while copying or verifying becomes a ``UserError`` naming the input
    and what failed, without guessing at the cause (the input opened: ``check_input``); the same
    exception types raised by our own code (or a full disk) propagate."""
    try:
        yield
    except DAMAGED_HDF5_ERRORS as error:
        if not (isinstance(error, OSError) or raised_by_h5py(error)):
            raise
        raise UserError(f"{in_path}: HDF5 failed to {doing}: {damaged_reason(error)}") from None


def verify_copy(in_path, copy_path, summary: RepackSummary, decoding=None, source_digests=None) -> None:
    """``--verify``: decoded data and attributes of the copy compared with the input; ``UserError`` if they differ.

    ``decoding`` (convert/decode_check.py), when given, has been decoding every stored chunk of the
    input beside the copy: its verdict is collected here, after the comparison, instead of decoding
    in this process; a damaged chunk is the input's fault and is reported before any difference.
    ``source_digests``: what the copy decoded of the input's rechunked datasets (``compare_files``)."""
    started = time.perf_counter()
    with _damage_names_the_input(in_path, "verify the copy against it"):
        problems = compare_files(in_path, copy_path, decode=decoding is None, source_digests=source_digests)
        if decoding is not None:
            summary.decode_check = vars(decoding.result()).copy()
    summary.verify_seconds = time.perf_counter() - started
    if problems:
        raise CopyDiffers(f"{in_path}: verification of the repacked copy failed: {problems[0]}"
                        + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    summary.verified = True


# What H5Ocopy says when an object of the input is in a newer format than the copy's bounds allow (a layout,
# datatype or other message version of HDF5 2.0's "latest" format)
NEWER_FORMAT_REFUSED = "version out of bounds"
NEWER_FORMAT_NOTE = ("the input holds objects in a file format newer than HDF5 1.10's (written with libver "
                     "\"latest\" by HDF5 >= 2.0): the copy keeps that format, so HDF5 1.10 tools read neither")


class _Repacker:
    def __init__(self, src_path, dst_path, page_size, target_chunk_bytes, chunks, summary, progress,
                 newest_format=False, decoding=None):
        self.src_path, self.dst_path = Path(src_path), Path(dst_path)
        self.decoding = decoding  # --verify's decode check (decode_check.DecodeCheck), told what the copy decodes
        self.newest_format = newest_format
        self.page_size = page_size
        self.target_chunk_bytes = target_chunk_bytes
        self.explicit_chunks = {"/" + k.strip("/"): tuple(v) for k, v in chunks.items()}
        self.summary = summary
        self.progress = progress
        self.copied = {}  # source object address -> destination path (hard links, references)
        self.committed_types = {}  # source path of a named datatype -> destination path
        # (source id, destination object's path, attribute name): values hold references. The path, not
        # the open identifier: an open dataset would keep the chunks written to it in its chunk cache until
        # the file closes, placing them after everything else.
        self.deferred_attrs = []
        self.deferred_datasets = []  # source dataset paths whose values hold references
        self.unlinked: list[str] = []  # temporary paths of the copies of objects no link reaches
        self.attributes_seen: set[str] = set()  # paths whose attributes _copy_attributes copied
        self.reference_datasets: set[str] = set()  # source paths of the datasets whose type holds references
        self.walked: list = []  # walk_objects' (name, info, parent id, link name) of the source, once
        self.userblock = b""
        self.reordered_groups: set[str] = set()
        self.remade: set[str] = set()  # paths of datasets made anew (the others are H5Ocopy's copies)
        self.scale_objects = {}  # address -> source dimension scale
        self.dimension_lengths = {}  # address of a dimension scale -> its current length
        self.dst_addresses = {}  # source object address -> address of its copy
        # path of a dataset whose values the copy decoded from the input -> (shape, block chunks, digest of
        # the values read): --verify reads only the copy's values of it (compare_files' source_digests)
        self.source_digests: dict[str, tuple] = {}
        self.read_buffer = bytearray(0)
        # The chunk and attribute loops in C when the extension is built (same output; on the
        # ATL03-like granule user CPU 1.0 -> 0.7 s, see _fastcopy.c and docs/repack.md).
        self.fast = fastcopy.available()

    def __enter__(self):
        self.src = open_input(self.src_path, rdcc_nbytes=SOURCE_CHUNK_CACHE, rdcc_nslots=4_099)
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
        fapl.set_libver_bounds(h5py.h5f.LIBVER_V110,
                               h5py.h5f.LIBVER_LATEST if self.newest_format else h5py.h5f.LIBVER_V110)
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

    # --- the whole tree by H5Ocopy, then what must change ---------------------

    def run(self):
        self._copy_userblock()
        root = self.src["/"]
        self.src_fileno = h5py.h5o.get_info(root.id).fileno
        self.netcdf4 = is_netcdf4(self.src)
        # 1. Source object address -> path (the destination has the same paths); which objects are
        # linked more than once, which are named datatypes.
        self.copied[(self.src_fileno, h5py.h5o.get_info(root.id).addr)] = "/"
        kinds: dict[str, int] = {}
        shared = [h5py.h5o.get_info(root.id).rc > 1]

        # (kept for the reference pass: the same objects, each under the same first path)
        self.walked = list(walk_objects(self.src.id))
        where: dict[str, tuple] = {}  # path -> (parent group id, link name, hard link count)
        for name, info, parent, bname in self.walked:
            path = "/" + name
            if self.copied.setdefault((self.src_fileno, info.addr), path) == path:
                kinds[path] = info.type
                where[path] = (parent, bname, info.rc)
            if info.rc > 1 or info.type == h5py.h5o.TYPE_NAMED_DATATYPE:
                shared[0] = True
        self._refuse_user_defined_links_in_the_root()
        # 2. What must change (COMPACT, unlimited, rechunked, variable-length fill value), decided
        # from the source alone.
        plans: dict[str, dict] = {}
        # Opened without a chunk cache: most are copied as stored chunks or by H5Ocopy, and a cache's slot
        # table, allocated at every open and freed at every close, was HDF5's largest allocation here (GEDI
        # L2B: 1,302 datasets). A dataset whose values the copy decodes is opened again with the file's cache
        # (_source_for_decoding).
        uncached = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
        uncached.set_chunk_cache(1, 0, 1.0)
        for path, kind in kinds.items():
            if kind == h5py.h5o.TYPE_GROUP:
                self.summary.groups += 1
            elif kind == h5py.h5o.TYPE_DATASET:
                self.summary.datasets += 1
                parent, bname, links = where[path]
                sid = h5py.h5d.open(parent, bname, dapl=uncached)  # (no h5py.Dataset: _plan wraps one if needed)
                dcpl = sid.get_create_plist()  # (read once: _plan changes it into the copy's)
                layout = dcpl.get_layout()
                ftype = sid.get_type()
                if ftype.detect_class(h5py.h5t.REFERENCE):
                    self.reference_datasets.add(path)
                plan = self._plan(sid, path, dcpl, layout, ftype, links)
                if plan is not None:
                    plans[path] = plan
                    continue
                if layout == h5py.h5d.CHUNKED:
                    self.summary.chunks_copied_raw += sid.get_num_chunks()  # (H5Ocopy copies them undecoded)
        if self.decoding is not None:  # (its child waits for this before decoding: the copy decodes these)
            self.decoding.leave_to_the_copy(path for path, plan in plans.items() if _values_decoded_by_copy(plan))
        # 3. HDF5 copies every object, attribute, committed type, fill value, filter and stored chunk
        # (undecoded). When nothing is linked twice and no named datatype exists, the groups holding a
        # dataset to be made anew are walked: their other members are copied one H5Ocopy each (whole
        # subtrees where nothing changes) and those datasets are made once, directly from the source.
        # Otherwise (or when nothing changes) one H5Ocopy of the whole tree, then those datasets made
        # anew over their copies (their data copied twice).
        # A subtree more than H5OCOPY_MAX_DEPTH groups deep is walked too, never given to one H5Ocopy.
        ancestors = ancestor_groups(plans) | groups_too_deep_for_one_copy(
            path for path, kind in kinds.items() if kind == h5py.h5o.TYPE_GROUP)
        # (Also when nothing changes: the whole-tree copy puts the root's attributes on a temporary group and
        # then copies them again onto "/", so a 100 MiB root attribute was written twice.)
        if not shared[0] and self._walkable(ancestors):
            self._copy_walking(plans, ancestors)
        else:
            self._copy_whole_tree(root)
            for path, plan in plans.items():
                self._make(path, plan, replace=True)
            self._restore_link_order()
        if self.progress:
            for path, kind in kinds.items():
                if kind == h5py.h5o.TYPE_DATASET and path not in self.remade:
                    self.progress(self.src[path].id.get_storage_size())  # progress counts stored (source) bytes
        # 4. References (object and region), wherever they are, point at the copies of their targets.
        self._collect_references()
        self._rewrite_references()
        self.dst.flush()

    def _copy_whole_tree(self, root):
        """One H5Ocopy of the whole tree under a temporary group (H5Ocopy cannot copy onto "/"), its
        members then moved under "/" in the source's order, the root's attributes copied onto "/"."""
        h5py.h5o.copy(self.src.id, b"/", self.dst.id, TMP_ROOT, copypl=_copy_plist())
        tmp = h5py.h5g.open(self.dst.id, TMP_ROOT)
        for name, _, _ in _members(root):
            tmp.links.move(name.encode("utf-8", "surrogateescape"), self.dst.id,
                           name.encode("utf-8", "surrogateescape"))
        self._copy_attributes(root.id, self.dst.id, root.id.get_create_plist(), "/")
        self.dst.id.unlink(TMP_ROOT)

    def _walkable(self, ancestors) -> bool:
        """The groups to walk hold only hard, soft and external links (a user-defined link is copied
        by H5Ocopy only)."""
        allowed = (h5py.h5l.TYPE_HARD, h5py.h5l.TYPE_SOFT, h5py.h5l.TYPE_EXTERNAL)
        return all(kind in allowed for group in ancestors for _, kind, _ in _members(self.src[group]))

    def _copy_walking(self, plans, ancestors):
        """The tree rebuilt group by group along the paths to the datasets made anew, in the source's
        link order: members that do not change copied by H5Ocopy (subtrees in one call), groups on the
        way made with the source's creation properties and attributes, soft and external links made
        again, the datasets that change made once."""
        copypl = _copy_plist()
        lcpls = {}  # character set of a link name -> link creation properties with it
        root = self.src["/"]
        self._copy_attributes(root.id, self.dst.id, root.id.get_create_plist(), "/")

        # Depth first with a stack of member iterators, not recursion: the depth is the uploader's
        # (groups nested 1,500 deep over a dataset to make anew raised RecursionError).
        stack = [("/", h5py.h5g.open(self.src.id, b"/"), h5py.h5g.open(self.dst.id, b"/"), None)]
        while stack:
            src_path, src_gid, dst_gid, members = stack[-1]
            if members is None:
                members = iter(_members(src_gid))
                stack[-1] = (src_path, src_gid, dst_gid, members)
            member = next(members, None)
            if member is None:
                stack.pop()
                continue
            name, kind, _ = member
            bname = name.encode("utf-8", "surrogateescape")
            child = _join(src_path, name)
            cset = src_gid.links.get_info(bname).cset
            lcpl = lcpls.get(cset)
            if lcpl is None:
                lcpl = lcpls[cset] = h5py.h5p.create(h5py.h5p.LINK_CREATE)
                lcpl.set_char_encoding(cset)
            if kind == h5py.h5l.TYPE_SOFT:
                dst_gid.links.create_soft(bname, src_gid.links.get_val(bname), lcpl=lcpl)
            elif kind == h5py.h5l.TYPE_EXTERNAL:
                file_name, object_name = src_gid.links.get_val(bname)
                dst_gid.links.create_external(bname, file_name, object_name, lcpl=lcpl)
            elif child in plans:
                self._make(child, plans[child], parent_id=dst_gid, lcpl=lcpl)
            elif child in ancestors:
                sub = h5py.h5g.open(src_gid, bname)
                gcpl = sub.get_create_plist()
                new = h5py.h5g.create(dst_gid, bname, lcpl=lcpl, gcpl=_group_create_plist(gcpl))
                self._copy_attributes(sub, new, gcpl, child)
                stack.append((child, sub, new, None))
            else:
                h5py.h5o.copy(src_gid, bname, dst_gid, bname, copypl=copypl, lcpl=lcpl)

    def _copy_userblock(self):
        size = self.src.id.get_create_plist().get_userblock()
        if size:
            self.userblock = os.pread(self.src_fd, size, 0)

    def _copy_attributes(self, src_id, dst_id, create_plist, path, count=None, tracked=None):
        """Every attribute of the source object ``src_id`` created on ``dst_id``: same type (a
        committed type is the destination's copy of it), same stored values (variable-length ones through
        HDF5's own memory form, so NULL stays NULL), in creation order when tracked, else in the
        order HDF5 stores them. (``count`` and ``tracked``, when the caller knows them: the number of
        attributes, and whether ``create_plist`` tracks their creation order.)"""
        self.attributes_seen.add(path)
        if count is None:
            count = _attribute_count(src_id)
        if tracked is None:
            tracked = _tracks_creation_order(create_plist, "get_attr_creation_order")
        index = h5py.h5.INDEX_CRT_ORDER if tracked else h5py.h5.INDEX_NAME
        order = h5py.h5.ITER_INC if tracked else h5py.h5.ITER_NATIVE
        position = 0
        while position < count:
            if self.fast:
                # Plain attributes (fixed-size, no reference, no committed type: most of them) in C, in
                # the same order and as the same stored bytes, up to the first that is not plain.
                position, copied = fastcopy.copy_plain_attributes(src_id, dst_id, index, position, order)
                self.summary.attributes += copied
                if position >= count:
                    break
            attr = h5py.h5a.open(src_id, index=position, index_type=index, order=order)
            tid, space = attr.get_type(), attr.get_space()
            _refuse_new_style_references(self.src_path, path, tid, attr.get_name().decode("utf-8", "surrogateescape"))
            new = h5py.h5a.create(dst_id, attr.get_name(), self._file_type(tid), space)
            self.summary.attributes += 1
            if tid.detect_class(h5py.h5t.REFERENCE):  # (never a plain one: those are copied in C)
                self.deferred_attrs.append((src_id, path.encode("utf-8", "surrogateescape"), attr.get_name()))
            if space.get_simple_extent_type() != h5py.h5s.NULL:
                _copy_attribute_value(attr, new, tid, space)
            position += 1

    def _file_type(self, tid: h5py.h5t.TypeID) -> h5py.h5t.TypeID:
        """The destination's copy of a committed (named) datatype (same path: H5Ocopy made it), or the type itself."""
        if not tid.committed():
            return tid
        name = h5py.h5i.get_name(tid)
        if name and self.dst.id.links.exists(name):
            return h5py.h5t.open(self.dst.id, name)
        self.summary.notes.append("an anonymous committed datatype was copied as a plain type")
        return tid.copy()

    def _plan(self, sid, path: str, dcpl, layout: int, ftype, links: int) -> dict | None:
        """How the dataset at ``path`` must be made anew (None: H5Ocopy's copy is right as it is);
        what will change is recorded in the summary. ``dcpl`` is the source's creation properties (a copy:
        changed here into the new dataset's), ``layout`` its layout, ``ftype`` its stored type, ``links`` its
        hard link count: each read once by the caller; ``sid`` the source dataset's identifier."""
        space = sid.get_space()
        self._refuse_data_outside_the_file(path, dcpl, layout)
        _refuse_new_style_references(self.src_path, path, ftype)
        extent_type = space.get_simple_extent_type()
        if extent_type == h5py.h5s.NULL:
            return None
        if extent_type == h5py.h5s.SCALAR:
            return self._plan_scalar(sid, path, dcpl, layout, ftype, links)
        shape = space.get_simple_extent_dims()
        itemsize = ftype.get_size()  # (bytes per value as stored)
        maxshape = tuple(None if m == h5py.h5s.UNLIMITED else m for m in space.get_simple_extent_dims(True))
        src_chunks = dcpl.get_chunk() if layout == h5py.h5d.CHUNKED else None
        new_shape, new_maxshape, new_chunks = shape, maxshape, src_chunks
        changed = padded_maxshape = False
        if layout == h5py.h5d.COMPACT:
            dcpl.set_layout(h5py.h5d.CONTIGUOUS)
            self.summary.compact_to_contiguous.append(path)
            changed = True
        fill_type = ftype
        if (dcpl.fill_value_defined() == h5py.h5d.FILL_VALUE_USER_DEFINED
                and (fill_type.detect_class(h5py.h5t.VLEN) or _has_vlen_string(fill_type))):
            # H5Ocopy copies a variable-length fill value's global-heap address unchanged: the
            # copy's creation properties cannot be read (HDF5 1.10 and 2.0; h5repack's output
            # shows it). Made anew, with the fill value from the source's creation properties.
            changed = True
        if any(m is None for m in maxshape):
            if self.netcdf4:  # only NetCDF lets a variable be shorter than its (unlimited) dimension
                new_shape = self._current_extent(h5py.Dataset(sid), shape, maxshape)
            if all(n > 0 for n in new_shape):
                new_maxshape = tuple(new_shape)
                if layout == h5py.h5d.CHUNKED:
                    # An axis whose stored chunk is longer than its now fixed length keeps the chunk's length
                    # as its maximum (a fixed one: no H5S_UNLIMITED, so netCDF reads the current length as a
                    # fixed dimension and HDF5 indexes the chunks with a fixed array): the chunks are then
                    # copied as stored, where a chunk shrunk to the axis had to be decoded and compressed again
                    # (429 of ATL06's 537 datasets, 1,162 of GEDI L2B's 1,302).
                    padded = tuple(max(n, c) for n, c in zip(new_shape, src_chunks))
                    padded_maxshape = padded != new_maxshape
                    new_maxshape = padded
                self.summary.unlimited_fixed.append(path)
                changed = True
            else:  # a zero-length dimension cannot be fixed with a chunked layout; nothing to page anyway
                self.summary.unlimited_kept.append(path)
        plain_copy = False
        missing = _missing_filters_of(dcpl) if dcpl.get_nfilters() else []  # (set_layout/set_chunk keep the filters)
        if layout == h5py.h5d.CHUNKED:
            new_chunks = self._choose_chunks(path, shape, itemsize, src_chunks, new_maxshape)
            if new_chunks != src_chunks and path not in self.explicit_chunks and missing:
                # Rechunked by default, not by request, but its chunks cannot be decoded here (LZO, 305, in
                # PyTables files): copied as stored instead, as h5repack does with a filter it cannot load;
                # the note below says so. (--chunks for it is still refused: _require_filters.)
                new_chunks, plain_copy, changed = src_chunks, True, True
            elif new_chunks != src_chunks:
                if padded_maxshape:  # rechunked anyway: the maximum that kept the stored chunks is not wanted
                    new_maxshape = tuple(new_shape)
                    new_chunks = self._choose_chunks(path, shape, itemsize, src_chunks, new_maxshape)
                if any(m is not None and m > n for m, n in zip(new_maxshape, new_shape)):
                    # Made anew with its maximum size, HDF5 would index every chunk that maximum can hold
                    # (a 100-value dataset that may grow to 1e11 values: an 80 GB file): fixed at its size.
                    self.summary.notes.append(f"{path}: fixed at its current size {tuple(new_shape)} "
                                              f"(its maximum size {tuple(new_maxshape)} is not kept when rechunked)")
                    new_maxshape = tuple(new_shape)
                    new_chunks = self._choose_chunks(path, shape, itemsize, src_chunks, new_maxshape)
                dcpl.set_chunk(new_chunks)
                changed = True
                if math.prod(shape):
                    self.summary.rechunked[path] = {"from": list(src_chunks), "to": list(new_chunks)}
        elif path in self.explicit_chunks:
            new_chunks = self._checked_explicit_chunks(path, shape, itemsize, new_maxshape)
            dcpl.set_chunk(new_chunks)
            self.summary.rechunked[path] = {"from": None, "to": list(new_chunks)}
            changed = True
        if not changed:
            return None
        if new_chunks == src_chunks and missing:
            # H5Dcreate needs every mandatory filter of the creation properties: without its plugin the
            # dataset cannot be made anew (h5repack copies it as it is too). Its stored chunks are copied.
            for done in (self.summary.unlimited_fixed, self.summary.compact_to_contiguous):
                if path in done:
                    done.remove(path)
            if any(m is None for m in maxshape) and path not in self.summary.unlimited_kept:
                self.summary.unlimited_kept.append(path)
            self.summary.notes.append(f"{path}: kept as it is{', not rechunked' if plain_copy else ''}: its chunks "
                                      f"copied as stored (its filter {', '.join(missing)} is not "
                                      "installed here, and a dataset cannot be made anew without it)")
            return None
        if links > 1:
            self.summary.notes.append(f"{path}: has more than one hard link; kept as it was")
            return None
        if new_chunks != src_chunks and math.prod(shape):
            self._require_filters(missing, path)
        return {"dcpl": dcpl, "layout": layout, "shape": shape, "new_shape": new_shape,
                "new_maxshape": new_maxshape, "src_chunks": src_chunks, "new_chunks": new_chunks, "sid": sid,
                "ftype": ftype, "attr_order_tracked": _tracks_creation_order(dcpl, "get_attr_creation_order")}

    def _refuse_data_outside_the_file(self, path, dcpl, layout):
        """A virtual dataset (its sources) or a dataset with external raw-data files keeps its data outside
        the file: a copy would either point at files repack never read, or read files the input names
        (any path on this machine). Refused, naming the files."""
        if layout == h5py.h5d.VIRTUAL:
            sources = sorted({dcpl.get_virtual_filename(i) for i in range(dcpl.get_virtual_count())} - {"."})
            if not sources:  # ("." is the file itself: H5Ocopy's copy maps the copy's own datasets)
                return
            raise UserError(f"{self.src_path}: {path} is a virtual dataset: its data lives outside the file "
                            f"(in {', '.join(sources)}), and repack copies only what the file holds")
        if dcpl.get_external_count():
            names = [dcpl.get_external(i)[0].decode("utf-8", "replace") for i in range(dcpl.get_external_count())]
            raise UserError(f"{self.src_path}: {path} stores its raw data in external file(s) {', '.join(names)}: "
                            "its data lives outside the file, and repack copies only what the file holds")

    def _refuse_user_defined_links_in_the_root(self):
        """H5Ocopy copies a user-defined link inside a group it copies, but the root's members are moved
        from under a temporary group (``_copy_whole_tree``), and HDF5 moves a user-defined link only when
        its link class is registered in this process, which none is (h5repack refuses such files too):
        refused, naming the link, before anything is written."""
        for name, kind, _ in _members(self.src["/"]):
            if kind not in (h5py.h5l.TYPE_HARD, h5py.h5l.TYPE_SOFT, h5py.h5l.TYPE_EXTERNAL):
                raise UserError(f"{self.src_path}: /{name} is a user-defined link (link class {kind}) in the root "
                                "group, which HDF5 cannot move into the copy without that class registered")

    def _plan_scalar(self, sid, path, dcpl, layout, ftype, links):
        """A scalar dataset: made anew when COMPACT (-> CONTIGUOUS) or when its fill value is variable-length."""
        fill_type = ftype
        vlen_fill = (dcpl.fill_value_defined() == h5py.h5d.FILL_VALUE_USER_DEFINED
                     and (fill_type.detect_class(h5py.h5t.VLEN) or _has_vlen_string(fill_type)))
        if layout == h5py.h5d.COMPACT:
            dcpl.set_layout(h5py.h5d.CONTIGUOUS)
            self.summary.compact_to_contiguous.append(path)
        elif not vlen_fill:
            return None
        if links > 1:
            self.summary.notes.append(f"{path}: has more than one hard link; kept as it was")
            return None
        return {"dcpl": dcpl, "scalar": True, "sid": sid, "ftype": ftype,
                "attr_order_tracked": _tracks_creation_order(dcpl, "get_attr_creation_order")}

    def _make(self, path: str, plan: dict, replace=False, parent_id=None, lcpl=None):
        """The dataset at ``path`` made as ``plan`` says, with the source's attributes and values: in
        ``parent_id`` (the walk), or (``replace``) over H5Ocopy's copy of it."""
        sid = plan["sid"]
        parent, name = path.rsplit("/", 1)
        bname = name.encode("utf-8", "surrogateescape")
        if parent_id is None:
            parent_id = h5py.h5g.open(self.dst.id, (parent or "/").encode("utf-8", "surrogateescape"))
        ftype = plan["ftype"]
        if plan.get("scalar"):
            space = h5py.h5s.create(h5py.h5s.SCALAR)
        else:
            space = h5py.h5s.create_simple(tuple(plan["new_shape"]),
                                           tuple(h5py.h5s.UNLIMITED if m is None else m for m in plan["new_maxshape"]))
        dcpl = plan["dcpl"]
        tracked = plan["attr_order_tracked"]
        attributes = _attribute_count(sid)
        if not tracked and attributes > 1:
            # Readers that list attributes in creation order (netCDF) list an untracked object's in the order
            # its header stores them; a new header stores them where they fit, not in the order written.
            # Tracked in the copy, that order is the source's (copied in its stored order).
            dcpl.set_attr_creation_order(h5py.h5p.CRT_ORDER_TRACKED)
        new = h5py.h5d.create(parent_id, TMP_DATASET if replace else bname, self._file_type(ftype), space,
                              dcpl=dcpl, lcpl=None if replace else lcpl)
        self._copy_attributes(sid, new, None, path, count=attributes, tracked=tracked)
        if replace:
            parent_id.unlink(bname)  # (its storage is freed: the copy below may reuse it)
            parent_id.links.move(TMP_DATASET, parent_id, bname)
            self.reordered_groups.add(parent or "/")
        self.remade.add(path)
        if plan.get("scalar"):
            if not ftype.detect_class(h5py.h5t.REFERENCE):
                _copy_selection(h5py.Dataset(sid), h5py.Dataset(new), ())
            return
        shape, new_chunks = plan["shape"], plan["new_chunks"]
        if ftype.detect_class(h5py.h5t.REFERENCE) or not math.prod(shape):
            return  # (values holding references are written by the reference pass)
        if _values_decoded_by_copy(plan) or not self._copy_raw_chunks(sid, new, path):
            src = self._source_for_decoding(path)
            dst = h5py.Dataset(new)
            block_chunks = tuple(new_chunks or shape)
            digest = None if _needs_walk(ftype) else hashlib.blake2b()  # (fixed-size values: bytes as read)
            # (read as strictly as the decode check reads a chunk, which leaves these datasets to the copy:
            # a deflate chunk inflating past its declared size is refused, not truncated)
            bound = declared_chunk_bytes(src)
            for selection in _blocks(shape, block_chunks, ftype.get_size()):
                _copy_selection(src, dst, selection, digest, bound)
            if digest is not None:
                self.source_digests[path] = (tuple(shape), block_chunks, digest.digest())
            if self.progress:
                self.progress(src.id.get_storage_size())

    def _source_for_decoding(self, path: str) -> h5py.Dataset:
        """The source dataset at ``path`` opened with the file's chunk cache (run opened it without one)."""
        return h5py.Dataset(h5py.h5d.open(self.src.id, path.encode("utf-8", "surrogateescape")))

    def _restore_link_order(self):
        """A dataset made anew was linked last: its group's links moved out and back in the source's
        order, so creation order (NetCDF-4's order of variables and dimensions) is the source's."""
        for group_path in sorted(self.reordered_groups):
            group = h5py.h5g.open(self.dst.id, group_path.encode("utf-8", "surrogateescape"))
            hold = h5py.h5g.create(self.dst.id, TMP_HOLD)
            names = [name.encode("utf-8", "surrogateescape") for name, _, _ in _members(self.src[group_path])]
            for name in names:
                group.links.move(name, hold, name)
            for name in names:
                hold.links.move(name, group, name)
            self.dst.id.unlink(TMP_HOLD)

    def _require_filters(self, missing: list[str], path):
        """Refused when a filter of the dataset to rechunk is not installed (``missing``: _missing_filters_of)."""
        if missing:
            raise UserError(f"{self.src_path}: {path} is compressed with filter {missing[0]}, whose plugin is not "
                            "installed here: it cannot be rechunked (a plain repack copies its chunks undecoded)")

    def _collect_references(self):
        # Each object once, under the path the scan gave it (walk_objects' first path), opened relative to
        # its parent: opening each by its full path costs the square of the nesting depth.
        # (attributes copied by _copy_attributes were looked at there; a dataset's type was looked at by run)
        root = [("", None, self.src.id, b".")]
        for name, _, parent, bname in itertools.chain(root, self.walked):
            path = "/" + name
            if path in self.attributes_seen and path not in self.reference_datasets:
                continue
            oid = h5py.h5o.open(parent, bname)
            # (attributes copied by _copy_attributes were looked at there; only H5Ocopy's are looked at here)
            for attr_name in [] if path in self.attributes_seen else _attribute_names(oid):
                attr = h5py.h5a.open(oid, attr_name)  # (by name: by index re-reads the whole dense attribute index)
                if attr.get_type().detect_class(h5py.h5t.REFERENCE):
                    _refuse_new_style_references(self.src_path, path, attr.get_type(), attr.get_name().decode(
                        "utf-8", "surrogateescape"))
                    self.deferred_attrs.append((oid, path.encode("utf-8", "surrogateescape"), attr.get_name()))
            if path in self.reference_datasets:
                self.deferred_datasets.append((h5py.Dataset(oid), self.dst[path]))

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

    def _choose_chunks(self, path, shape, itemsize: int, chunks, new_maxshape) -> tuple[int, ...]:
        if path in self.explicit_chunks:
            return self._checked_explicit_chunks(path, shape, itemsize, new_maxshape)
        new = list(chunks)
        if self.target_chunk_bytes and shape and shape[0] > chunks[0]:
            chunk_bytes = math.prod(chunks) * itemsize
            factor = self.target_chunk_bytes // chunk_bytes
            if factor >= 2:
                new[0] = min(shape[0], chunks[0] * factor)
        # A fixed dimension cannot be smaller than its chunk: shrink the chunk to fit.
        for axis, limit in enumerate(new_maxshape):
            if limit is not None and new[axis] > limit:
                new[axis] = limit
        return tuple(new)

    def _checked_explicit_chunks(self, path, shape, itemsize: int, new_maxshape) -> tuple[int, ...]:
        new = self.explicit_chunks[path]
        if len(new) != len(shape):
            raise UserError(f"--chunks {path}: {len(new)} values for a {len(shape)}-d dataset {tuple(shape)}")
        if math.prod(new) * itemsize > self.page_size:
            raise UserError(f"--chunks {path}={','.join(map(str, new))}: "
                            f"{math.prod(new) * itemsize} bytes, larger than the page size {self.page_size}")
        return tuple(min(c, m) if m is not None else c for c, m in zip(new, new_maxshape))

    def _copy_raw_chunks(self, sid, dst_id, path: str) -> bool:
        """Stored chunk bytes copied as they are: no decompression, no recompression. False (nothing
        written) when a chunk is listed wholly beyond the shape: the listing is not where readers find
        the values (fastcopy_stored_chunks in _fastcopy.c says when), which are then copied decoded."""
        if self.fast:
            done = fastcopy.copy_chunks(sid, dst_id, self.src_fd, sid.rank, READ_SPAN_BYTES,
                                        READ_GAP_BYTES, self.progress)
            if done is None:
                return False
            self.summary.chunks_copied_raw += done[0]
            return True
        located = []
        sid.chunk_iter(lambda info: located.append((info.chunk_offset, info.filter_mask, info.byte_offset, info.size)))
        extent = dst_id.get_space().get_simple_extent_dims()
        if not _listed_within(located, extent):
            return False
        located.sort(key=lambda item: item[2])  # read the source front to back
        write = dst_id.write_direct_chunk
        done = 0
        for span_start, span_end, members in read_spans(located):
            # One read per run of neighbouring chunks (up to READ_SPAN_BYTES) into one
            # reused buffer (a fresh multi-MB bytes object per read costs page faults),
            # sliced without copying.
            length = span_end - span_start
            if len(self.read_buffer) < length:
                self.read_buffer = bytearray(length)
            view = memoryview(self.read_buffer)[:length]
            if os.preadv(self.src_fd, [view], span_start) != length:
                raise OSError(f"{path}: chunks up to byte {span_end} lie beyond the end of the file")
            for offset, mask, address, size in members:
                write(offset, view[address - span_start : address - span_start + size], mask)
            done += span_end - span_start
            if self.progress and done >= 16 * MiB:
                self.progress(done)
                done = 0
        if self.progress and done:
            self.progress(done)
        self.summary.chunks_copied_raw += len(located)
        return True

    # --- references -------------------------------------------------------------

    def _rewrite_references(self):
        # (Rewriting may find a reference to an object no link reaches, whose copy adds its own references to
        # rewrite to both lists: until neither grows.)
        attrs_done = datasets_done = 0
        while attrs_done < len(self.deferred_attrs) or datasets_done < len(self.deferred_datasets):
            attrs_done = self._rewrite_attribute_references(attrs_done)
            datasets_done = self._rewrite_dataset_references(datasets_done)
        # The copies of objects no link reaches are left so: linked nowhere, still counted once (H5Oincr_refcount,
        # then the temporary link removed), as in the input.
        library = _reference_calls()
        for path in self.unlinked:
            oid = h5py.h5o.open(self.dst.id, path.encode())
            with h5py._objects.phil:
                if library.H5Oincr_refcount(oid.id) < 0:
                    raise OSError(f"cannot keep the copy of an unlinked object ({path})")
            del oid
            self.dst.id.unlink(path.encode())
        if self.unlinked:
            self.dst.id.unlink(TMP_UNLINKED)

    def _rewrite_attribute_references(self, start: int) -> int:
        for src_id, dst_path, bname in itertools.islice(self.deferred_attrs, start, None):
            start += 1
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
            # Region references, or references inside variable-length sequences (h5repack_attr_refs.h5:
            # a vlen of region references; h5py's conversion of that crashed the process, SIGSEGV): rewritten
            # in HDF5's own memory form of the file type, where they lie (_remap_in_memory).
            space = src_attr.get_space()
            data = np.empty(space.get_simple_extent_dims(), dtype=_opaque_dtype(tid.get_size()))
            src_attr.read(data, mtype=tid)
            try:
                self._remap_in_memory(tid, data.ctypes.data, data.size)
                dst_attr.write(data, mtype=dst_attr.get_type())
            finally:
                _reclaim(tid, space, data)
        return start

    def _rewrite_dataset_references(self, start: int) -> int:
        for src, dst in itertools.islice(self.deferred_datasets, start, None):
            start += 1
            if src.shape and math.prod(src.shape) == 0:
                continue
            tid = src.id.get_type()
            offsets = _object_reference_offsets(tid)
            if offsets is not None:
                # Object references among fixed-size and variable-length parts (a compound of strings and
                # references): HDF5's memory form, addresses rewritten in place, every other byte as stored
                # (through numpy, NULL strings would become "" and bytes after a string's NUL be lost).
                data = np.empty(src.shape, dtype=_opaque_dtype(tid.get_size()))
                src.id.read(h5py.h5s.ALL, h5py.h5s.ALL, data, mtype=tid)
                self._remap_addresses(data, offsets)
                dst.id.write(h5py.h5s.ALL, h5py.h5s.ALL, data, mtype=dst.id.get_type())
                continue
            space = src.id.get_space()
            data = np.empty(src.shape, dtype=_opaque_dtype(tid.get_size()))
            src.id.read(h5py.h5s.ALL, h5py.h5s.ALL, data, mtype=tid)
            try:
                self._remap_in_memory(tid, data.ctypes.data, data.size)
                dst.id.write(h5py.h5s.ALL, h5py.h5s.ALL, data, mtype=dst.id.get_type())
            finally:
                _reclaim(tid, space, data)
        return start

    def _dst_address(self, src_address: int) -> int:
        """Address in the destination of the copy of the source object at ``src_address``."""
        if src_address not in self.dst_addresses:
            dst_path = self.copied.get((self.src_fileno, src_address)) or self._copy_unlinked(src_address)
            if dst_path is None:  # not the address of any object in the file: kept as stored
                self.summary.notes.append(f"a reference to address {src_address}, where the file has no object, "
                                          "was kept as stored")
                return src_address
            oid = h5py.h5o.open(self.dst.id, dst_path.encode("utf-8", "surrogateescape"))
            self.dst_addresses[src_address] = h5py.h5o.get_info(oid).addr
        return self.dst_addresses[src_address]

    def _copy_unlinked(self, src_address: int) -> str | None:
        """A dataset or group at ``src_address`` that no link reaches (OMPS NO2 L2's dimension scales list
        such datasets in REFERENCE_LIST: left by the subsetter, h5dump prints them as ``DATASET 23592 ""``)
        copied by H5Ocopy under a temporary link, which ``_rewrite_references`` removes at the end; its own
        references are rewritten too. None when no such object is there."""
        oid = _open_by_address(self.src, src_address)
        if oid is None:
            return None
        if not self.unlinked:
            h5py.h5g.create(self.dst.id, TMP_UNLINKED)
        path = f"/{TMP_UNLINKED.decode()}/{src_address}"
        h5py.h5o.copy(oid, b".", self.dst.id, path.encode(), copypl=_copy_plist())
        self.unlinked.append(path)
        self.copied[(self.src_fileno, src_address)] = path
        self.summary.notes.append(f"an object no link reaches (at address {src_address}), which a reference "
                                  "points at, was copied, still linked nowhere")
        for attr_name in _attribute_names(oid):
            attr = h5py.h5a.open(oid, attr_name)
            if attr.get_type().detect_class(h5py.h5t.REFERENCE):
                _refuse_new_style_references(self.src_path, path, attr.get_type(), attr_name.decode(errors="replace"))
                self.deferred_attrs.append((oid, path.encode(), attr_name))
        if isinstance(oid, h5py.h5d.DatasetID) and oid.get_type().detect_class(h5py.h5t.REFERENCE):
            _refuse_new_style_references(self.src_path, path, oid.get_type())
            self.deferred_datasets.append((h5py.Dataset(oid), self.dst[path]))
        return path

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

    def _remap_in_memory(self, tid, address: int, count: int) -> None:
        """The ``count`` values of type ``tid`` at ``address`` (HDF5's memory form of the file type, as
        H5Aread / H5Dread give it with that type) made to point at the copies of their targets, in place:
        object references (8 bytes, an object's address) get the copy's address; region references (12
        bytes, an entry in the source's global heap) are made again in the copy (H5Rcreate) with the
        source's selection (H5Rget_region); compounds, arrays and variable-length sequences are walked to
        the references inside them. Null references stay null."""
        if not count or not tid.detect_class(h5py.h5t.REFERENCE):
            return
        kind, size = tid.get_class(), tid.get_size()
        if kind == h5py.h5t.REFERENCE:
            for at in range(address, address + count * size, size):
                self._remap_one(size, at)
        elif kind == h5py.h5t.COMPOUND:
            members = [(tid.get_member_type(i), tid.get_member_offset(i)) for i in range(tid.get_nmembers())]
            for at in range(address, address + count * size, size):
                for member, offset in members:
                    self._remap_in_memory(member, at + offset, 1)
        elif kind == h5py.h5t.ARRAY:
            self._remap_in_memory(tid.get_super(), address, count * math.prod(tid.get_array_dims()))
        elif kind == h5py.h5t.VLEN:  # (hvl_t: the length, then a pointer to the elements)
            base = tid.get_super()
            for at in range(address, address + count * size, size):
                length, pointer = (ctypes.c_uint64 * 2).from_address(at)
                if pointer:
                    self._remap_in_memory(base, pointer, length)

    def _remap_one(self, size: int, at: int) -> None:
        if size == 8:  # an object reference: the target's address
            cell = ctypes.c_uint64.from_address(at)
            if cell.value not in (0, int(UNDEFINED_ADDRESS)):
                cell.value = self._dst_address(cell.value)
                self.summary.references_rewritten += 1
            return
        if size != 12 or not any((ctypes.c_ubyte * 12).from_address(at)):  # (new-style: refused before; null)
            return
        library = _reference_calls()
        with h5py._objects.phil:
            length = library.H5Rget_name(self.src.id.id, _H5R_DATASET_REGION, at, None, 0)
            name = ctypes.create_string_buffer(max(length, 0) + 1)
            if length < 0 or library.H5Rget_name(self.src.id.id, _H5R_DATASET_REGION, at, name, len(name)) < 0:
                raise OSError("cannot resolve a region reference")
            region = library.H5Rget_region(self.src.id.id, _H5R_DATASET_REGION, at)
            if region < 0:
                raise OSError(f"cannot read the selection of a region reference to {name.value!r}")
            try:
                if library.H5Rcreate(at, self.dst.id.id, name.value, _H5R_DATASET_REGION, region) < 0:
                    raise OSError(f"cannot make a region reference to {name.value!r} in the copy")
            finally:
                library.H5Sclose(region)
        self.summary.references_rewritten += 1


def _open_by_address(f: h5py.File, address: int):
    """The dataset or group of ``f`` whose object header is at ``address`` (through an object reference to
    it, H5Rdereference2: found whether a link reaches it or not), or None."""
    library = _reference_calls()
    stored = ctypes.c_uint64(address)
    with h5py._objects.phil:
        hid = library.H5Rdereference2(f.id.id, 0, 0, ctypes.byref(stored))  # (H5P_DEFAULT, H5R_OBJECT)
        kind = library.H5Iget_type(hid) if hid >= 0 else -1
    if kind == _H5I_DATASET:
        return h5py.h5d.DatasetID(hid)
    if kind == _H5I_GROUP:
        return h5py.h5g.GroupID(hid)
    if hid >= 0:
        h5py.h5o.ObjectID(hid)  # (a named datatype: closed when this goes)
    return None


_H5I_GROUP, _H5I_DATASET = 2, 5
_H5R_DATASET_REGION = 1  # (H5R_DATASET_REGION1 in HDF5 1.12 and later: the 12-byte region reference)
_REFERENCE_CALLS = []


def _reference_calls():
    """HDF5's calls for old-style region references (h5py offers them only on its own objects), declared once."""
    if not _REFERENCE_CALLS:
        library = hdf5_library()
        i64, c, pointer = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
        for name, restype, argtypes in (
                ("H5Rget_name", ctypes.c_ssize_t, [i64, c, pointer, ctypes.c_char_p, ctypes.c_size_t]),
                ("H5Rget_region", i64, [i64, c, pointer]), ("H5Rcreate", c, [pointer, i64, ctypes.c_char_p, c, i64]),
                ("H5Sclose", c, [i64]), ("H5Rdereference2", i64, [i64, i64, c, pointer]),
                ("H5Iget_type", c, [i64]), ("H5Oincr_refcount", c, [i64])):
            function = getattr(library, name)
            function.restype, function.argtypes = restype, argtypes
        _REFERENCE_CALLS.append(library)
    return _REFERENCE_CALLS[0]


def _reclaim(tid, space, data: np.ndarray) -> None:
    """Free what HDF5 allocated for the variable-length parts of ``data`` (read with the file type ``tid``)."""
    if _needs_walk(tid):
        with h5py._objects.phil:
            hdf5_library().H5Treclaim(tid.id, space.id, 0, data.ctypes.data)  # (0: H5P_DEFAULT)


def _copy_attribute_value(attr, new, tid, space) -> None:
    """The attribute's stored values written to ``new`` in HDF5's memory form of the file type (NULL strings
    stay NULL, bytes after a NUL stay), through HDF5's own calls: h5py reads a variable-length value through
    a conversion buffer of its own (one more copy of a 100 MiB string). Its variable-length parts are freed
    at once (H5Treclaim)."""
    data = np.empty(space.get_simple_extent_dims(), dtype=_opaque_dtype(tid.get_size()))
    library = hdf5_library()
    name = attr.get_name().decode("utf-8", "surrogateescape")
    with h5py._objects.phil:
        if library.H5Aread(attr.id, tid.id, data.ctypes.data) < 0:
            raise OSError(f"cannot read attribute {name!r}")
        try:
            if library.H5Awrite(new.id, tid.id, data.ctypes.data) < 0:
                raise OSError(f"cannot write the copy of attribute {name!r}")
        finally:
            if _needs_walk(tid):
                library.H5Treclaim(tid.id, space.id, 0, data.ctypes.data)  # (0: H5P_DEFAULT)


def _listed_within(located, extent) -> bool:
    """Every listed chunk (its offset first) starts inside ``extent``. HDF5 2.0's H5Dchunk_iter lists
    (0, 6) and (0, 9) for the extensible-array index of HDF5's tools' h5fc_ext1_f.h5, a 4 x 6 dataset
    whose reads find those chunks at (2, 0) and (2, 3): such a listing is not where the values are."""
    return all(all(o < n for o, n in zip(item[0], extent)) for item in located)


def read_spans(located, max_gap=None, max_span=None):
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


def _group_create_plist(source_gcpl):
    """Creation properties for the copy of a group whose own are ``source_gcpl``: its creation-order
    tracking and attribute storage thresholds in a new list, as h5repack does. Never the source's list
    itself: HDF5 puts the group's link-info message in it, with the addresses of the group's fractal heap
    and B-trees in the *source* file, and a group created with it in another file uses them there (groups
    of more than 8 links tracked in creation order: ICESat-2 and GPM products failed with "wrong fractal
    heap header signature" at the next link made in the copy)."""
    gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
    gcpl.set_link_creation_order(source_gcpl.get_link_creation_order())
    gcpl.set_attr_creation_order(source_gcpl.get_attr_creation_order())
    gcpl.set_attr_phase_change(*source_gcpl.get_attr_phase_change())
    return gcpl


def _copy_plist():
    """H5Ocopy's options: soft and external links stay links; references are fixed afterwards."""
    plist = h5py.h5p.create(h5py.h5p.OBJECT_COPY)
    plist.set_copy_object(0)
    return plist


# H5Ocopy recurses over the depth of what it copies (~6 C frames a level): under a 1 MiB stack (a
# thread's, a small task's) one call on groups nested ~1,240 deep crashed (SIGSEGV, which the guard can
# only report as damage). Deeper subtrees are walked group by group, each H5Ocopy kept to this depth.
H5OCOPY_MAX_DEPTH = 32


def groups_too_deep_for_one_copy(groups) -> set[str]:
    """Of the group paths ``groups`` (each group once), those with more than H5OCOPY_MAX_DEPTH levels
    of groups below them, "/" included when it has: always whole chains from "/" down."""
    height: dict[str, int] = {}
    for path in sorted(groups, key=lambda p: p.count("/"), reverse=True):  # (children before parents)
        parent = path.rsplit("/", 1)[0] or "/"
        height[parent] = max(height.get(parent, 0), height.get(path, 0) + 1)
    return {path for path, levels in height.items() if levels > H5OCOPY_MAX_DEPTH}


TMP_ROOT = b".layoutlab-repack-root"
TMP_DATASET = b".layoutlab-repack-dataset"
TMP_HOLD = b".layoutlab-repack-hold"
TMP_UNLINKED = b".layoutlab-repack-unlinked"
UNDEFINED_ADDRESS = np.uint64(0xFFFFFFFFFFFFFFFF)


def _refuse_new_style_references(src_path, path, tid, attribute=None):
    """HDF5 1.12's references (``H5R_ref_t``: object, region and attribute references that may name
    other files) are not yet pointed at the copies (h5py cannot read them, h5repack 1.10 refuses them
    too): refused, naming where."""
    if tid.detect_class(h5py.h5t.REFERENCE) and _object_reference_offsets(tid) is None and _has_new_style_reference(tid):
        where = f"{path} (attribute {attribute!r})" if attribute else path
        raise UserError(f"{src_path}: {where} holds HDF5 1.12-style references (H5R_ref_t), which repack cannot "
                        "yet point at the copies of their targets")


def _has_new_style_reference(tid) -> bool:
    kind = tid.get_class()
    if kind == h5py.h5t.REFERENCE:
        return tid.get_size() not in (8, 12)  # (old-style: 8-byte object, 12-byte region references)
    if kind == h5py.h5t.COMPOUND:
        return any(_has_new_style_reference(tid.get_member_type(i)) for i in range(tid.get_nmembers()))
    if kind in (h5py.h5t.ARRAY, h5py.h5t.VLEN):
        return _has_new_style_reference(tid.get_super())
    return False


def _object_reference_offsets(tid) -> list[int] | None:
    """Byte offsets of the old-style object references in a value of ``tid`` as HDF5's memory form
    lays it out (``[]``: none), or None when it holds references that cannot be rewritten as raw
    addresses (region or new-style references, references inside variable-length sequences).
    Variable-length parts without references are pointers in that form, left as they are."""
    kind = tid.get_class()
    if kind == h5py.h5t.REFERENCE:
        return [0] if tid.get_size() == 8 and tid.equal(h5py.h5t.STD_REF_OBJ) else None
    if not tid.detect_class(h5py.h5t.REFERENCE):
        return []
    if kind == h5py.h5t.COMPOUND:
        offsets = []
        for index in range(tid.get_nmembers()):
            inner = _object_reference_offsets(tid.get_member_type(index))
            if inner is None:
                return None
            offsets += [tid.get_member_offset(index) + o for o in inner]
        return offsets
    if kind == h5py.h5t.ARRAY:
        base = tid.get_super()
        inner = _object_reference_offsets(base)
        if inner is None:
            return None
        return [i * base.get_size() + o for i in range(math.prod(tid.get_array_dims())) for o in inner]
    return None


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


def _attribute_names(oid) -> list[bytes]:
    """The names of an object's attributes in one pass (H5Aiterate2): opening them by index makes HDF5
    rebuild its table of a dense attribute index each time, which costs the square of their number."""
    names: list[bytes] = []
    if _attribute_count(oid):
        h5py.h5a.iterate(oid, lambda name: names.append(name) or None)
    return names


def walk_objects(root_gid):
    """(path, object info, parent group id, link name) of every object below ``root_gid`` reached by hard
    links, each object once under the first path found, depth first with members by name: what H5Ovisit
    gives (soft, external and user-defined links are not followed), but linear in the number of objects.
    H5Ovisit (and H5Lvisit, and opening objects by their full paths) costs the square of the nesting
    depth: the scan and --verify took minutes on groups nested 2,000 deep. Each member is looked at
    relative to its already-open parent group, with no recursion (the depth is the uploader's)."""
    seen = {h5py.h5o.get_info(root_gid).addr}
    stack = [(root_gid, "", iter(_link_names(root_gid)))]
    while stack:
        gid, prefix, names = stack[-1]
        bname = next(names, None)
        if bname is None:
            stack.pop()
            continue
        if gid.links.get_info(bname).type != h5py.h5l.TYPE_HARD:
            continue
        info = h5py.h5o.get_info(gid, bname)
        if info.addr in seen:
            continue
        seen.add(info.addr)
        path = prefix + bname.decode("utf-8", "surrogateescape")
        yield path, info, gid, bname
        if info.type == h5py.h5o.TYPE_GROUP:
            sub = h5py.h5g.open(gid, bname)
            stack.append((sub, path + "/", iter(_link_names(sub))))


def _link_names(gid) -> list[bytes]:
    """The link names of a group by name, in increasing order (H5Ovisit's order)."""
    names: list[bytes] = []
    gid.links.iterate(lambda name: names.append(name) or None, idx_type=h5py.h5.INDEX_NAME, order=h5py.h5.ITER_INC)
    return names


def _join(parent: str, name: str) -> str:
    return f"{parent.rstrip('/')}/{name}"


def _tracks_creation_order(plist, getter) -> bool:
    return bool(getattr(plist, getter)() & h5py.h5p.CRT_ORDER_TRACKED)


def _members(group) -> list[tuple[str, int, int]]:
    """(name, link type, object address) in creation order when the group tracks it (NetCDF-4 does), else by name."""
    gid = group.id if isinstance(group, h5py.Group) else group  # (an h5py Group or a GroupID)
    gcpl = gid.get_create_plist()
    index = h5py.h5.INDEX_CRT_ORDER if _tracks_creation_order(gcpl, "get_link_creation_order") else h5py.h5.INDEX_NAME
    members: list[tuple[str, int, int]] = []
    gid.links.iterate(
        lambda name, info: members.append((name.decode("utf-8", "surrogateescape"), info.type, info.u)) or None,
        idx_type=index, info=True)
    return members


def _has_vlen_string(tid) -> bool:
    if isinstance(tid, h5py.h5t.TypeStringID):
        return tid.is_variable_str()
    if isinstance(tid, h5py.h5t.TypeCompoundID):
        return any(_has_vlen_string(tid.get_member_type(i)) for i in range(tid.get_nmembers()))
    if isinstance(tid, (h5py.h5t.TypeArrayID, h5py.h5t.TypeVlenID)):
        return _has_vlen_string(tid.get_super())
    return False


def _type_kind(tid: h5py.h5t.TypeID) -> str:
    """``"fixed"`` when the stored bytes can be copied as they are, else ``"convert"``."""
    if tid.detect_class(h5py.h5t.VLEN) or tid.detect_class(h5py.h5t.REFERENCE):
        return "convert"
    if isinstance(tid, h5py.h5t.TypeStringID) and tid.is_variable_str():
        return "convert"
    if isinstance(tid, (h5py.h5t.TypeCompoundID, h5py.h5t.TypeArrayID)) and tid.detect_class(h5py.h5t.STRING):
        return "convert"  # may hide a variable-length string member: let h5py convert
    return "fixed"


def _itemsize(dataset: h5py.Dataset) -> int:
    """Bytes per value as stored, from HDF5's type: h5py has no dtype for some types (H5T_TIME, which
    PyTables writes, alone or nested in a compound: "No NumPy equivalent for TypeTimeID exists")."""
    return dataset.id.get_type().get_size()


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


def _values_decoded_by_copy(plan: dict) -> bool:
    """Whether ``_make`` reads every stored chunk of the dataset ``plan`` makes anew (within its shape)
    through HDF5's filters, rather than copying stored chunks or nothing (references, no values)."""
    if plan.get("scalar"):
        return False
    ftype = plan["ftype"]
    if ftype.detect_class(h5py.h5t.REFERENCE) or not math.prod(plan["shape"]):
        return False
    return not (plan["layout"] == h5py.h5d.CHUNKED and plan["new_chunks"] == plan["src_chunks"]
                and _type_kind(ftype) == "fixed")


def _copy_selection(src: h5py.Dataset, dst: h5py.Dataset, selection, digest=None, bound=None) -> int:
    """Copy ``src[selection]`` into ``dst`` exactly (decoded; variable-length values through HDF5's own
    memory form, so a NULL string stays NULL, opaque and bitfield bytes stay bytes); return the bytes moved.
    ``digest`` (a hashlib object) is fed the values as read from ``src``, before they are written; ``bound``:
    the bytes a stored chunk of ``src`` decodes to (bounded_decoding: a deflate chunk inflating past it is
    refused; the read only, not the write)."""
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
    file_space = src.id.get_space()
    file_space.select_hyperslab(start, count)
    with bounded_by(bound):
        src.id.read(memory, file_space, buffer, mtype=ftype)
    if digest is not None:
        digest.update(buffer.reshape(-1).view(np.uint8))
    file_space = dst.id.get_space()
    file_space.select_hyperslab(start, count)
    dst.id.write(memory, file_space, buffer, mtype=dst.id.get_type())
    return buffer.nbytes


def _holds_references(dtype) -> bool:
    """Whether values of ``dtype`` (a numpy dtype, or the ``str`` / ``bytes`` h5py gives as the base of a
    variable-length string) hold object or region references anywhere."""
    if dtype in (str, bytes):
        return False
    dtype = np.dtype(dtype)
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


def compare_files(a_path, b_path, block_bytes=BLOCK_BYTES, decode: bool = True, source_digests=None) -> list[str]:
    """Differences in decoded data and attributes between two HDF5 files (empty list: same content).

    ``decode=False``: chunks found identical as stored are not decoded here (the caller decodes the
    input's chunks elsewhere: convert/decode_check.py).
    ``source_digests`` (repack's copy): dataset path -> (shape, block chunks, digest) of the values the copy
    read from ``a_path`` block by block and wrote anew (rechunked: no stored bytes to compare). Those
    datasets are decoded in ``b_path`` only, their digest compared (the input's values were decoded by
    the copy, and its chunks by the decode check: a third decode found nothing they did not); where the
    digests differ the values of both are compared as without it, to name the block.

    Layout (chunking, page strategy, unlimited vs fixed maximum shape) is allowed
    to differ; shapes, dtypes, values, fill values, filters' decoded result and
    attributes are not. References are compared by the path of their target.
    """
    problems: list[str] = []
    deferred: list[tuple[str, str]] = []  # (object path, attribute name): large values, compared at the end
    _PATHS.clear()  # reference-target indexes are per open file
    # (both files' h5py objects and descriptors made once: per dataset, ``.file`` makes a new File object and
    # the stored-chunk comparison opened both files again)
    with h5py.File(a_path, "r") as a, h5py.File(b_path, "r") as b, open(a_path, "rb") as raw_a, \
            open(b_path, "rb") as raw_b:
        files, descriptors = (a, b), (raw_a.fileno(), raw_b.fileno())
        _compare_attrs(a["/"], b["/"], problems, deferred, files)
        # Both files walked together, group by group, each member opened relative to its already-open
        # parent, without recursion: linear in the number of links whatever the nesting depth (H5Lvisit
        # and opening every object by its full path cost the square of the depth: 12 s at depth 500).
        # Every link of the input is checked (a group linked twice is entered once, as H5Lvisit does).
        entered = {h5py.h5o.get_info(a.id).addr}
        pending = [(a["/"], b["/"], "")]
        while pending:
            group_a, group_b, prefix = pending.pop()
            names_a, names_b = _link_names(group_a.id), _link_names(group_b.id)
            for bname in sorted(set(names_b) - set(names_a)):
                problems.append(f"/{prefix}{bname.decode('utf-8', 'surrogateescape')}: present in the copy only")
            present = set(names_b)
            subgroups = []
            for bname in names_a:
                name = prefix + bname.decode("utf-8", "surrogateescape")
                if bname not in present:
                    problems.append(f"/{name}: missing from the copy")
                    continue
                info_a, info_b = group_a.id.links.get_info(bname), group_b.id.links.get_info(bname)
                if info_a.type != info_b.type:
                    problems.append(f"/{name}: link kind {info_a.type} became {info_b.type}")
                    continue
                if info_a.type != h5py.h5l.TYPE_HARD:  # soft, external, user-defined: the link itself, not a target
                    if info_a.type in (h5py.h5l.TYPE_SOFT, h5py.h5l.TYPE_EXTERNAL) and \
                            group_a.id.links.get_val(bname) != group_b.id.links.get_val(bname):
                        problems.append(f"/{name}: link value changed")
                    continue
                obj_a, obj_b = _open_member(group_a, bname), _open_member(group_b, bname)
                if type(obj_a) is not type(obj_b):
                    problems.append(f"/{name}: {type(obj_a).__name__} became {type(obj_b).__name__}")
                    continue
                if isinstance(obj_a, h5py.Datatype):
                    if not obj_a.id.equal(obj_b.id):  # (HDF5's types: h5py has no dtype for some, H5T_TIME)
                        problems.append(f"/{name}: named type changed")
                    continue
                _compare_attrs(obj_a, obj_b, problems, deferred, files)
                if isinstance(obj_a, h5py.Dataset):
                    try:
                        _compare_dataset(obj_a, obj_b, problems, block_bytes, decode,
                                         (source_digests or {}).get("/" + name), files, descriptors)
                    except OSError:
                        missing = missing_filters(obj_a)
                        if not missing:
                            raise
                        raise UserError(f"{a_path}: --verify cannot decode /{name}: its filter {', '.join(missing)} is "
                                        "not installed here (a missing plugin: set HDF5_PLUGIN_PATH or pip install "
                                        "hdf5plugin, or skip the check with --no-verify); the copy was not checked") from None
                elif isinstance(obj_a, h5py.Group):
                    address = h5py.h5o.get_info(obj_a.id).addr
                    if address not in entered:
                        entered.add(address)
                        subgroups.append((obj_a, obj_b, name + "/"))
            pending.extend(reversed(subgroups))  # (depth first, by name, as H5Lvisit)
    _PATHS.clear()
    for object_path, name in deferred:
        if _attribute_digest(a_path, object_path, name) != _attribute_digest(b_path, object_path, name):
            problems.append(f"{object_path}: attribute {name!r} differs")
    return problems


def _open_member(group: h5py.Group, bname: bytes):
    """``group[bname]`` (a hard link's target), without h5py's per-object cost: its ``Group.__getitem__`` makes
    a File object per dataset to ask the file's mode (GEDI L2B: 2,604 of them, a fifth of --verify's walk)."""
    oid = h5py.h5o.open(group.id, bname)
    kind = h5py.h5i.get_type(oid)
    if kind == h5py.h5i.DATASET:
        return h5py.Dataset(oid)
    if kind == h5py.h5i.GROUP:
        return h5py.Group(oid)
    if kind == h5py.h5i.DATATYPE:
        return h5py.Datatype(oid)
    raise TypeError(f"{group.name}/{bname.decode('utf-8', 'surrogateescape')}: unknown object type {kind}")


def missing_filters(dataset: h5py.Dataset) -> list[str]:
    """The dataset's filters whose plugin this HDF5 cannot load, as "32004 (lz4)"."""
    return _missing_filters_of(dataset.id.get_create_plist())


def _missing_filters_of(dcpl) -> list[str]:
    """The filters of the dataset creation properties ``dcpl`` whose plugin this HDF5 cannot load."""
    missing = []
    for index in range(dcpl.get_nfilters()):
        code, _, _, name = dcpl.get_filter(index)
        if not h5py.h5z.filter_avail(code):
            missing.append(f"{code} ({name.decode(errors='replace') or 'unnamed'})")
    return missing


def _compare_attrs(a, b, problems, deferred=None, files=None):
    # The plain attributes are compared in C when it is there (fastcopy.same_plain_attributes: through
    # h5py each attribute costs ~30 Python objects); the rest here, through the low-level API, with the
    # two files' objects made once.
    files = files or (a.file, b.file)
    left = fastcopy.same_plain_attributes(a.id, b.id, DEFERRED_ATTRIBUTE_BYTES) if fastcopy.available() else None
    if left is None:
        names_a, names_b = set(_attribute_names(a.id)), set(_attribute_names(b.id))
        if names_a != names_b:
            problems.append(f"{a.name}: attributes differ: "
                            f"{sorted(n.decode('utf-8', 'surrogateescape') for n in names_a ^ names_b)}")
        left = sorted(names_a & names_b)
    for bname in left:
        _compare_attribute(a, b, bname, problems, deferred, files)


def _compare_attribute(a, b, bname: bytes, problems, deferred, files):
    name = bname.decode("utf-8", "surrogateescape")
    attr_a, attr_b = h5py.h5a.open(a.id, bname), h5py.h5a.open(b.id, bname)
    if not attr_a.get_type().equal(attr_b.get_type()):
        problems.append(f"{a.name}: attribute {name!r} type changed")
        return
    space = attr_a.get_space()
    if space.get_simple_extent_type() != attr_b.get_space().get_simple_extent_type():
        problems.append(f"{a.name}: attribute {name!r} dataspace changed")
        return
    if space.get_simple_extent_type() == h5py.h5s.NULL:
        return
    if space.get_simple_extent_dims() != attr_b.get_space().get_simple_extent_dims():
        problems.append(f"{a.name}: attribute {name!r} shape changed")
        return
    if deferred is not None and not attr_a.get_type().detect_class(h5py.h5t.REFERENCE):
        size_a = attribute_value_bytes(attr_a)  # (from the descriptors: a variable-length value is not read)
        if size_a is not None and size_a > DEFERRED_ATTRIBUTE_BYTES:
            size_b = attribute_value_bytes(attr_b)
            if size_b != size_a:
                problems.append(f"{a.name}: attribute {name!r} differs (a value of {size_a} bytes became {size_b})")
            else:
                deferred.append((a.name, name))
            return
    if not _same_stored_values(attr_a, attr_b, files[0], files[1], attr=True, name=name, owners=(a, b)):
        problems.append(f"{a.name}: attribute {name!r} differs")


# An attribute's value is read whole (HDF5 reads no part of one). One larger than this is compared once the
# walk has closed both files, each file then opened alone and its value reduced to a digest: HDF5 keeps what
# it read of a file (for a variable-length value, its heap collection, an image of it and a table 1.5 times
# its size) until that file closes, and the values were decoded into Python objects: verifying a 100 MiB
# string took 1,374 MB, the copy 582 MB.
DEFERRED_ATTRIBUTE_BYTES = 8 * MiB


def _attribute_digest(path, object_path: str, name: str) -> bytes:
    """SHA-256 of an attribute's values in HDF5's memory form of the file type: fixed-size bytes as stored,
    a variable-length string or sequence as its length and bytes (NULL apart from ""), other values as the
    canonical form the comparison walks (``_Walker``); the file opened for this alone and closed after."""
    import hashlib

    digest = hashlib.sha256()
    library = hdf5_library()
    with open_input(path) as f:
        owner = h5py.h5o.open(f.id, object_path.encode("utf-8", "surrogateescape"))
        attr = h5py.h5a.open(owner, name.encode("utf-8", "surrogateescape"))
        tid, space = attr.get_type(), attr.get_space()
        data = np.empty(space.get_simple_extent_dims(), dtype=_opaque_dtype(tid.get_size()))
        with h5py._objects.phil:
            if library.H5Aread(attr.id, tid.id, data.ctypes.data) < 0:
                raise OSError(f"{object_path}: cannot read attribute {name!r}")
            try:
                if not _needs_walk(tid):
                    digest.update(data.reshape(-1).view(np.uint8))
                else:
                    _digest_variable_values(tid, data, digest, f)
            finally:
                if _needs_walk(tid):
                    library.H5Treclaim(tid.id, space.id, 0, data.ctypes.data)  # (0: H5P_DEFAULT)
        del data
    with h5py._objects.phil:
        library.H5garbage_collect()  # (HDF5's free lists keep its conversion buffer otherwise)
    return digest.digest()


def _digest_variable_values(tid, data, digest, f) -> None:
    """Variable-length values fed to ``digest`` from HDF5's memory (no Python copy of a value)."""
    import ctypes

    if isinstance(tid, h5py.h5t.TypeStringID) and tid.is_variable_str():
        strlen = ctypes.CDLL(None).strlen
        strlen.restype, strlen.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
        for pointer in data.reshape(-1).view("<u8").tolist():
            if not pointer:
                digest.update(b"N")  # (NULL, not "")
                continue
            length = strlen(pointer)
            digest.update(b"S" + length.to_bytes(8, "little"))
            digest.update((ctypes.c_char * length).from_address(pointer))
        return
    base = tid.get_super() if isinstance(tid, h5py.h5t.TypeVlenID) else None
    if base is not None and not _needs_walk(base):
        item = base.get_size()
        descriptors = data.reshape(-1).view("<u8").reshape(-1, 2).tolist()  # (hvl_t: length, pointer)
        for length, pointer in descriptors:
            digest.update(b"V" + length.to_bytes(8, "little") + (b"N" if not pointer else b""))
            if pointer and length:
                digest.update((ctypes.c_char * (length * item)).from_address(pointer))
        return
    digest.update(repr(_Walker(tid, f).values(data.tobytes())).encode())


def _raw_fill_value(dcpl, tid) -> bytes:
    """A fixed-size fill value's bytes in the dataset's own type (H5Pget_fill_value asked for that type
    itself: no conversion). Through h5py the value is asked for as a numpy type, and HDF5 has no
    conversion from some types to any (H5T_TIME: "no appropriate function for conversion path")."""
    value = np.zeros((), dtype=_opaque_dtype(tid.get_size()))
    with h5py._objects.phil:
        if hdf5_library().H5Pget_fill_value(dcpl.id, tid.id, value.ctypes.data) < 0:
            raise OSError("cannot read the fill value")
    return value.tobytes()


def _read_exact(obj, tid, shape, selection=None, attr=False):
    """The values of a dataset/attribute in HDF5's own memory form of its type (no numpy
    conversion: bytes as stored for fixed-size types, pointers for variable-length parts)."""
    data = np.empty(shape, dtype=_opaque_dtype(tid.get_size()))
    if attr:
        obj.read(data, mtype=tid)
    elif selection is None:
        obj.read(h5py.h5s.ALL, h5py.h5s.ALL, data, mtype=tid)
    else:
        start = tuple(s.start for s in selection)
        count = tuple(s.stop - s.start for s in selection)
        space = obj.get_space()
        space.select_hyperslab(start, count)
        obj.read(h5py.h5s.create_simple(count), space, data, mtype=tid)
    return data


def _needs_walk(tid) -> bool:
    return bool(tid.detect_class(h5py.h5t.VLEN) or tid.detect_class(h5py.h5t.REFERENCE) or _has_vlen_string(tid))


def _plain_refs_only(tid) -> bool:
    """References in ``tid`` (if any) are all old-style ones: 8-byte object and 12-byte region references
    (``_Walker`` reads both)."""
    kind = tid.get_class()
    if kind == h5py.h5t.REFERENCE:
        return tid.get_size() in (8, 12)  # (old-style object and region references: _Walker reads both)
    if kind == h5py.h5t.COMPOUND:
        return all(_plain_refs_only(tid.get_member_type(i)) for i in range(tid.get_nmembers()))
    if kind in (h5py.h5t.ARRAY, h5py.h5t.VLEN):
        return _plain_refs_only(tid.get_super())
    return True


def _same_stored_values(obj_a, obj_b, file_a, file_b, attr=False, name=None, owners=None, selection=None,
                        shape=None) -> bool:
    """Exact comparison: bytes as stored for fixed-size types (opaque, bitfield, compound, enum, ...);
    variable-length values walked in HDF5's memory form (NULL differs from ""); object references
    compared by their target's path."""
    tid = obj_a.get_type()
    if shape is None:
        shape = obj_a.get_space().get_simple_extent_dims() if obj_a.get_space().get_simple_extent_type() == h5py.h5s.SIMPLE else ()
    if not _needs_walk(tid):
        return _read_exact(obj_a, tid, shape, selection, attr).tobytes() == \
            _read_exact(obj_b, obj_b.get_type(), shape, selection, attr).tobytes()
    if not _plain_refs_only(tid):  # region or new-style references: h5py's view, targets by path
        if attr:
            return _same_values(owners[0].attrs[name], owners[1].attrs[name], file_a, file_b)
        dsa, dsb = h5py.Dataset(obj_a), h5py.Dataset(obj_b)
        sel = selection if selection is not None else ()
        return _same_values(dsa[sel], dsb[sel], file_a, file_b)
    raw_a = _read_exact(obj_a, tid, shape, selection, attr)
    raw_b = _read_exact(obj_b, obj_b.get_type(), shape, selection, attr)
    walk_a, walk_b = _Walker(tid, file_a), _Walker(obj_b.get_type(), file_b)
    return walk_a.values(raw_a.tobytes()) == walk_b.values(raw_b.tobytes())


class _Walker:
    """Canonical Python values of an HDF5 memory buffer: bytes for fixed parts, None for a NULL
    variable-length string, lists for sequences, target paths for object references."""

    def __init__(self, tid, file):
        self.tid, self.file = tid, file

    def values(self, raw: bytes) -> list:
        size = self.tid.get_size()
        return [self._one(self.tid, raw, i * size) for i in range(len(raw) // size)]

    def _one(self, tid, raw, offset):
        import ctypes

        kind = tid.get_class()
        if kind == h5py.h5t.STRING and tid.is_variable_str():
            pointer = int.from_bytes(raw[offset:offset + 8], "little")
            return None if pointer == 0 else ctypes.string_at(pointer)
        if kind == h5py.h5t.VLEN:
            length = int.from_bytes(raw[offset:offset + 8], "little")
            pointer = int.from_bytes(raw[offset + 8:offset + 16], "little")
            base = tid.get_super()
            size = base.get_size()
            if pointer == 0 or length == 0:
                return ("vlen", length, pointer == 0)
            inner = ctypes.string_at(pointer, length * size)
            return [self._one(base, inner, i * size) for i in range(length)]
        if kind == h5py.h5t.COMPOUND:
            return tuple(self._one(tid.get_member_type(i), raw, offset + tid.get_member_offset(i))
                         for i in range(tid.get_nmembers()))
        if kind == h5py.h5t.ARRAY:
            base = tid.get_super()
            size = base.get_size()
            return tuple(self._one(base, raw, offset + i * size) for i in range(math.prod(tid.get_array_dims())))
        if kind == h5py.h5t.REFERENCE and tid.get_size() == 12:  # a region reference: its target and selection
            return ("region",) + _region_of(self.file, raw[offset:offset + 12])
        if kind == h5py.h5t.REFERENCE:
            address = int.from_bytes(raw[offset:offset + 8], "little")
            if address in (0, 0xFFFFFFFFFFFFFFFF):
                return ("ref", None)
            index = _address_index(self.file)
            if address in index:
                return ("ref", index[address])
            return ("ref", _unlinked_target(self.file, address))
        return raw[offset:offset + tid.get_size()]


def _region_of(f: h5py.File, stored: bytes) -> tuple:
    """(path of the target, its selection as H5Sencode gives it) of an old-style region reference's 12
    bytes in ``f``; (None, None) for a null one. Read through HDF5's calls: h5py's reading of a region
    reference inside a variable-length sequence crashed the process (SIGSEGV)."""
    if not any(stored):
        return (None, None)
    library = _reference_calls()
    cell = ctypes.create_string_buffer(stored, 12)
    with h5py._objects.phil:
        length = library.H5Rget_name(f.id.id, _H5R_DATASET_REGION, cell, None, 0)
        name = ctypes.create_string_buffer(max(length, 0) + 1)
        if length < 0 or library.H5Rget_name(f.id.id, _H5R_DATASET_REGION, cell, name, len(name)) < 0:
            raise OSError("cannot resolve a region reference")
        region = library.H5Rget_region(f.id.id, _H5R_DATASET_REGION, cell)
        if region < 0:
            raise OSError(f"cannot read the selection of a region reference to {name.value!r}")
    return (name.value, h5py.h5s.SpaceID(region).encode())  # (the SpaceID closes it)


def _unlinked_target(f: h5py.File, address: int):
    """What a reference to ``address``, which no link of ``f`` reaches, points at, as comparable across
    files: the kind of object there, its shape and attribute names (a copy of it lies elsewhere in the
    copy), or the address itself when no object is there."""
    oid = _open_by_address(f, address)
    if oid is None:
        return f"?{address}"
    shape = oid.shape if isinstance(oid, h5py.h5d.DatasetID) else None
    return ("unlinked", h5py.h5o.get_info(oid).type, shape, tuple(sorted(_attribute_names(oid))))


def _address_index(f: h5py.File) -> dict:
    key = f.id.id
    if key not in _PATHS:
        index = {h5py.h5o.get_info(f.id).addr: "/"}
        for name, info, _, _ in walk_objects(f.id):  # (H5Ovisit: the square of the depth)
            index.setdefault(info.addr, "/" + name)
        _PATHS[key] = index
    return _PATHS[key]


def _filters(dcpl) -> list:
    return [dcpl.get_filter(i)[:3] for i in range(dcpl.get_nfilters())]


def _compare_dataset(a: h5py.Dataset, b: h5py.Dataset, problems, block_bytes, decode=True, source_digest=None,
                     files=None, descriptors=None):
    file_a, file_b = files or (a.file, b.file)
    space_a, space_b = a.id.get_space(), b.id.get_space()
    kind = space_a.get_simple_extent_type()
    tid, tid_b = a.id.get_type(), b.id.get_type()  # (each read once)
    if kind != space_b.get_simple_extent_type() or not tid.equal(tid_b):
        problems.append(f"{a.name}: type or dataspace kind changed")
        return
    shape_a = space_a.get_simple_extent_dims() if kind == h5py.h5s.SIMPLE else ()
    shape_b = space_b.get_simple_extent_dims() if kind == h5py.h5s.SIMPLE else ()
    maxshape = space_a.get_simple_extent_dims(True) if kind == h5py.h5s.SIMPLE else ()
    grown = shape_a != shape_b and len(shape_a) == len(shape_b) and all(
        nb == na or (nb > na and m == h5py.h5s.UNLIMITED) for na, nb, m in zip(shape_a, shape_b, maxshape))
    if shape_a != shape_b and not grown:
        problems.append(f"{a.name}: shape {shape_a} became {shape_b}")
        return
    dcpl_a, dcpl_b = a.id.get_create_plist(), b.id.get_create_plist()
    if _filters(dcpl_a) != _filters(dcpl_b):
        problems.append(f"{a.name}: filters changed")
    if dcpl_a.fill_value_defined() != dcpl_b.fill_value_defined():
        problems.append(f"{a.name}: fill value defined-ness changed")
    elif dcpl_a.fill_value_defined() == h5py.h5d.FILL_VALUE_USER_DEFINED and not _needs_walk(tid):
        if _raw_fill_value(dcpl_a, tid) != _raw_fill_value(dcpl_b, tid_b):
            problems.append(f"{a.name}: fill value changed")
    if dcpl_a.get_external_count() or kind == h5py.h5s.NULL:
        if dcpl_a.get_external_count() and [dcpl_a.get_external(i) for i in range(dcpl_a.get_external_count())] != \
                [dcpl_b.get_external(i) for i in range(dcpl_b.get_external_count())]:
            problems.append(f"{a.name}: external storage changed")
        return  # (external raw data is not copied: the copy points at the same external files)
    if kind == h5py.h5s.SCALAR:
        if not _same_stored_values(a.id, b.id, file_a, file_b):
            problems.append(f"{a.name}: value differs")
        return
    if math.prod(shape_a) == 0:
        return
    if grown and not _extension_is_fill(a, b, block_bytes):
        problems.append(f"{a.name}: the part beyond the original shape {shape_a} is not fill value")
    same_chunks = (dcpl_a.get_layout() == dcpl_b.get_layout() == h5py.h5d.CHUNKED
                   and dcpl_a.get_chunk() == dcpl_b.get_chunk())
    same_stored = _same_stored_chunks(a, b, descriptors, shape_a) if same_chunks and not _needs_walk(tid) else None
    if same_stored is not None:
        if not same_stored:
            # Chunks of the same shape are written anew when the copy converts the values (a compound
            # holding strings, test_table_le.h5's /table2) or encodes them again: an edge chunk's bytes
            # beyond the shape (undefined: the input's held leftovers, the copy's zeros) or a compressor's
            # output may differ where every value is the same. The values decide; a chunk of the copy that
            # does not decode, or decodes to other values (a flipped byte), is still a difference.
            if missing_filters(a) or not _same_decoded(a, b, shape_a, tid, block_bytes):
                problems.append(f"{a.name}: stored chunks differ")
            return
        if decode and _filters(dcpl_a):  # the same bytes prove a faithful copy, not readable data: decode them once
            decode_blocks(a, block_bytes)
        return
    if a.id.get_storage_size() == 0 and b.id.get_storage_size() == 0:
        return  # nothing written in either: both read as fill (or undefined) values
    if source_digest is not None and _copy_matches_digest(b, tid, shape_a, source_digest):
        return
    for selection in _blocks(shape_a, (a.chunks or shape_a), tid.get_size(), block_bytes):
        if not _same_stored_values(a.id, b.id, file_a, file_b, selection=selection,
                                   shape=tuple(s.stop - s.start for s in selection)):
            problems.append(f"{a.name}: values differ in {selection}")
            return


def _copy_matches_digest(b: h5py.Dataset, tid, shape, source_digest) -> bool:
    """The copy ``b``'s values over ``shape``, read in the blocks the copy wrote, hash to the digest of the
    input's values the copy read (``compare_files``' ``source_digests``); False also when the digest was
    made for another shape or a type whose memory form holds pointers (then compared value by value)."""
    digest_shape, block_chunks, expected = source_digest
    if tuple(digest_shape) != tuple(shape) or _needs_walk(tid):
        return False
    digest = hashlib.blake2b()
    try:
        for selection in _blocks(shape, block_chunks, tid.get_size()):
            count = tuple(s.stop - s.start for s in selection)
            digest.update(_read_exact(b.id, b.id.get_type(), count, selection).reshape(-1).view(np.uint8))
    except OSError:  # (a chunk of the copy that does not decode: the block-by-block comparison names it)
        return False
    return digest.digest() == expected


def _same_decoded(a: h5py.Dataset, b: h5py.Dataset, shape, tid, block_bytes) -> bool:
    """Every value of ``a`` and ``b`` (same shape) read back equal, block by block; False when a block of the
    copy ``b`` cannot be decoded. One of the input that cannot is the input's damage (raised as such)."""
    for selection in _blocks(shape, (a.chunks or shape), tid.get_size(), block_bytes):
        count = tuple(s.stop - s.start for s in selection)
        try:
            raw_b = _read_exact(b.id, b.id.get_type(), count, selection)
        except OSError:
            return False
        if _read_exact(a.id, tid, count, selection).tobytes() != raw_b.tobytes():
            return False
    return True


def decode_blocks(dataset: h5py.Dataset, block_bytes: int, within: tuple[slice, ...] | None = None) -> None:
    """Run the filters over every stored chunk of ``dataset`` (the input's), or of the region ``within``;
    a chunk they cannot decode is damage in the input, named as such (a copy of its bytes would be as
    unreadable as the original). A filter whose plugin is not installed here cannot run: identical
    stored bytes are then all there is to check (the copy keeps them as stored)."""
    if missing_filters(dataset):
        return
    region = within or tuple(slice(0, n) for n in dataset.shape)
    itemsize = dataset.id.get_type().get_size()
    for selection in _shifted_blocks(region, dataset.chunks, itemsize, block_bytes):
        try:
            dataset[selection]
        except OSError as error:
            if missing_filters(dataset):
                raise  # (compare_files names the missing plugin)
            for chunk in _shifted_blocks(selection, dataset.chunks, itemsize, 1):  # which chunk: one at a time
                try:
                    dataset[chunk]
                except OSError as chunk_error:
                    selection, error = chunk, chunk_error
                    break
            where = ", ".join(f"{part.start}:{part.stop}" for part in selection)
            raise BadInputFile(dataset.file.filename, f"a stored chunk of {dataset.name} in [{where}] cannot be "
                                                      f"decoded (damaged data): {damaged_reason(error)}") from None


def _shifted_blocks(region: tuple[slice, ...], chunks, itemsize: int, block_bytes: int):
    """``_blocks`` over ``region`` (chunk-aligned slices), in the dataset's coordinates."""
    extent = tuple(r.stop - r.start for r in region)
    for block in _blocks(extent, chunks, itemsize, block_bytes):
        yield tuple(slice(r.start + b.start, r.start + b.stop) for r, b in zip(region, block))


def _same_stored_chunks(a: h5py.Dataset, b: h5py.Dataset, descriptors=None, shape=None) -> bool:
    """Same chunks stored at the same positions with the same bytes and filter masks (no filter runs);
    None when the input lists a chunk wholly beyond its shape (not where readers find its values:
    compared decoded). ``descriptors``: the two files open for reading (else opened here); ``shape``: the
    input's (else read here)."""
    def located(ds):
        found = {}
        ds.id.chunk_iter(lambda info: found.__setitem__(tuple(info.chunk_offset),
                                                        (info.filter_mask, info.size, info.byte_offset)))
        return found

    chunks_a, chunks_b = located(a), located(b)
    if not _listed_within([(offset,) for offset in chunks_a], a.shape if shape is None else shape):
        return None
    if {k: v[:2] for k, v in chunks_a.items()} != {k: v[:2] for k, v in chunks_b.items()}:
        return False
    # The stored bytes read with pread at the addresses the chunk indexes give: H5Dread_chunk through
    # h5py costs ~40 % more here (a chunk-cache lookup and a Python object per call).
    with contextlib.ExitStack() as opened:
        if descriptors is None:
            descriptors = tuple(opened.enter_context(open(ds.file.filename, "rb")).fileno() for ds in (a, b))
        fd_a, fd_b = descriptors
        return all(_same_bytes(fd_a, at_a, fd_b, at_b, size)
                   for at_a, at_b, size in _back_to_back_runs(chunks_a, chunks_b))


def _back_to_back_runs(chunks_a: dict, chunks_b: dict):
    """(address in a, address in b, bytes) of runs of chunks stored back to back, in the same order, in
    both files: compared as one span each (ATL03-like: 55,518 chunks in 1,848 runs; 0.6 s of a 1.7 s
    comparison was the Python around each chunk). Same keys in both (checked by the caller)."""
    run = None
    for offset, (_, size, at_a) in sorted(chunks_a.items(), key=lambda item: item[1][2]):
        at_b = chunks_b[offset][2]
        if run and at_a == run[0] + run[2] and at_b == run[1] + run[2]:
            run[2] += size
            continue
        if run:
            yield tuple(run)
        run = [at_a, at_b, size]
    if run:
        yield tuple(run)


COMPARE_PIECE_BYTES = 256 * 1024
_piece_buffers = threading.local()


def _same_bytes(fd_a: int, at_a: int, fd_b: int, at_b: int, size: int) -> bool:
    """The ``size`` bytes at ``at_a`` in one file equal those at ``at_b`` in the other.

    Whole pieces are read into two buffers made once per thread and compared whole (bytearray equality
    is one memcmp): a new object per read (``os.pread``) of that size is a block glibc maps fresh and
    unmaps when freed, a page fault per byte compared (the GEOS-like input's comparison: 0.98-1.27 s,
    0.22 s without), and two pieces are all it holds whatever a chunk's size (a chunk may hold 4 GiB).
    What is left, a small chunk or the end of a run, is read as new objects: once a run, and at these
    sizes cheaper than through the buffers (a 17 kB ATL03-like chunk: 9-11 us, 14-21 us)."""
    if size < COMPARE_PIECE_BYTES:
        return os.pread(fd_a, size, at_a) == os.pread(fd_b, size, at_b)
    if not hasattr(_piece_buffers, "pair"):
        _piece_buffers.pair = (bytearray(COMPARE_PIECE_BYTES), bytearray(COMPARE_PIECE_BYTES))
    piece_a, piece_b = _piece_buffers.pair
    rest = size % COMPARE_PIECE_BYTES
    for start in range(0, size - rest, COMPARE_PIECE_BYTES):
        got = os.preadv(fd_a, [piece_a], at_a + start)
        if os.preadv(fd_b, [piece_b], at_b + start) != got:
            return False
        if got < COMPARE_PIECE_BYTES:  # (both files end inside the chunk)
            return piece_a[:got] == piece_b[:got]
        if piece_a != piece_b:
            return False
    return not rest or os.pread(fd_a, rest, at_a + size - rest) == os.pread(fd_b, rest, at_b + size - rest)


_PATHS: dict = {}


def _path_of(f: h5py.File, ref) -> str:
    """Path of a reference's target, from a per-file address index (h5py's ``.name`` on an
    object opened by reference searches the whole file: ~6 ms each on a granule)."""
    key = f.id.id
    if key not in _PATHS:
        index = {h5py.h5o.get_info(f.id).addr: "/"}
        for name, info, _, _ in walk_objects(f.id):  # (H5Ovisit: the square of the depth)
            index.setdefault(info.addr, "/" + name)
        _PATHS[key] = index
    return _PATHS[key].get(h5py.h5o.get_info(f[ref].id).addr, "?")


def _extension_is_fill(a: h5py.Dataset, b: h5py.Dataset, block_bytes) -> bool:
    if b.id.get_create_plist().fill_value_defined() == h5py.h5d.FILL_VALUE_UNDEFINED:
        return True  # (no fill value: what lies beyond is undefined in the input too)
    for axis, (na, nb) in enumerate(zip(a.shape, b.shape)):
        if nb == na:
            continue
        region = tuple(slice(na, nb) if i == axis else slice(0, n) for i, n in enumerate(b.shape))
        extent = tuple(s.stop - s.start for s in region)
        for selection in _blocks(extent, b.chunks or extent, _itemsize(b), block_bytes):
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
