"""``layoutlab inspect --check``: does a file follow the rules that matter for reading it from object storage?

What ``rio cogeo validate`` is to Cloud-Optimized GeoTIFF. ``check_report`` judges one
``inspect_file`` report (made with ``per_dataset=True``) against ``Thresholds`` and returns
its problems, each with the measured value, the threshold and the command that fixes it
(``layoutlab repack``, and the h5repack / nccopy equivalent where one exists). ``RULES`` is
the one description of the rules: the command's ``--help`` and the docs table come from it.

A fix that pages the file proposes its page and estimates the copy's size change with
``layoutlab.formats.paged_layout``, the model ``layoutlab repack --page-size auto`` chooses by
(calibrated against real repacks): one number for one page, whichever command a user asks. The
model reads the file itself (``read_allocations``: through ``inspect``'s reader, so ``s3://``
objects too), only when a fix needs a page.

This module imports nothing heavy at load (the CLI builds ``--help`` from it).
"""

from __future__ import annotations

import math
import os
import posixpath

KiB, MiB = 1 << 10, 1 << 20
# (name, default threshold as written on the command line, why it matters, what fixes it)
RULES = (
    ("not-hdf5", "HDF5 / NetCDF-4",
     "NetCDF-3 and other formats have no chunks or pages to check; a reader fetches the whole file or "
     "guesses byte ranges",
     "nccopy -k nc4 IN OUT.nc, then layoutlab repack"),
    ("not-paged", "file-space strategy PAGE",
     "without paged aggregation HDF5 writes metadata wherever space was free: opening the file costs "
     "one small read per object header, B-tree node and heap",
     "layoutlab repack IN OUT --page-size P (h5repack -S PAGE -P 1 -G P); P: the power of two that "
     "passes the other rules and pads the file least, its estimated size change shown"),
    ("scattered-metadata", "--max-metadata-requests 4",
     "a reader with a page-sized block cache or HDF5's page buffer fetches every page holding metadata "
     "(object headers, heaps, B-trees, chunk indexes) before it reads a value, and a small GET waits "
     "tens of ms (AWS's S3 performance guide): 4 keeps opening a file to a fraction of a second; 4 pages "
     "of 8 MiB hold 32 MiB of metadata. Paged files: the pages HDF5's page buffer reads (variable-length "
     "attribute values sit in raw-data pages, where paging does not gather them: shown, not counted); "
     "unpaged files: the --page-size blocks holding non-raw bytes",
     "layoutlab repack IN OUT --page-size P (larger pages gather metadata into fewer)"),
    ("small-chunks", "--min-chunk 100KB",
     "one ranged GET per chunk, and a small GET costs its latency (tens of ms, AWS's S3 performance "
     "guide), not its transfer: below ~100 kB reads are latency-bound (Lopez et al. suggest 1-10 MB). "
     "Datasets stored in one chunk are exempt: one GET reads them",
     "layoutlab repack IN OUT --target-chunk-bytes N (h5repack -l VAR:CHUNK=DIMS)"),
    ("large-chunks", "--max-chunk 16MiB",
     "the smallest read of a dataset fetches and decodes a whole chunk; 8 or 16 MB is AWS's typical "
     "byte-range request, so a larger chunk costs more than one typical GET (and that much memory) "
     "for a single value",
     "layoutlab repack IN OUT --chunks VAR=DIMS (h5repack -l VAR:CHUNK=DIMS)"),
    ("chunks-over-page", "the file's page (paged files; an unpaged file's fix picks a page holding its chunks)",
     "a chunk larger than a page bypasses HDF5's page buffer (its 'bypasses' count) and spans pages: "
     "the page no longer bounds a read",
     "layoutlab repack IN OUT --page-size P>=largest chunk, or smaller chunks (--chunks VAR=DIMS)"),
    ("unlimited", "none (zero-length datasets exempt)",
     "an unlimited dimension gives its datasets an extensible chunk index (an extensible array or "
     "B-tree spread over several metadata blocks, where a fixed-size dataset has one fixed array); "
     "Lopez et al. and the NSIDC recipe fix them before paging",
     "layoutlab repack (fixes them at their current length; nccopy -u for NetCDF)"),
    ("compact", "none",
     "COMPACT datasets keep their data inside the object header, where no byte-range reference can "
     "point: kerchunk 0.2.10 writes no chunk for them, so a reader of its references gets fill values",
     "layoutlab repack (makes them CONTIGUOUS; h5repack -l VAR:CONTI)"),
)
RULE_NAMES = tuple(name for name, *_ in RULES)
ALLOWABLE = tuple(name for name in RULE_NAMES if name != "not-hdf5")  # a file that is not HDF5 cannot be checked
LISTED = 3  # dataset names a problem line shows
SCATTER_BLOCK = 8 * MiB  # an unpaged file's metadata is counted in blocks of this (a block-cache reader's reads)
MIN_PAGE = 4 * KiB  # HDF5's default page size
MAX_PROPOSED_PAGE = 64 * MiB


class Thresholds:
    """What ``check_report`` holds a file to (the defaults are ``RULES``'); ``allow``: rule names not failed.

    (A plain class: ``dataclasses`` imports ``inspect``, ~8 ms of the start of every command.)"""

    def __init__(self, min_chunk: int = 100_000, max_chunk: int = 16 * MiB, max_metadata_requests: int = 4,
                 page_size: int | None = None, allow=()):
        self.min_chunk = min_chunk  # stored bytes ("100KB")
        self.max_chunk = max_chunk  # stored bytes
        self.max_metadata_requests = max_metadata_requests
        # --page-size: the block an unpaged file's metadata scatter is measured in (None: 8 MiB) and the
        # smallest page its fixes propose (None: the smallest that passes)
        self.page_size = page_size
        self.allow = frozenset(allow)


def check_file(location: str, thresholds: Thresholds) -> dict:
    """``{file, ok, format, problems, summary}`` for ``location`` (raises ``BadInputFile`` when it cannot be read)."""
    from layoutlab.formats.inspect import inspect_file

    report = inspect_file(location, page_size=thresholds.page_size or SCATTER_BLOCK, per_dataset=True)
    return judge(report, thresholds, allocations=lambda: read_allocations(location))


def read_allocations(location: str):
    """The file's allocations for the page model (``paged_layout.file_allocations``), ``location``
    opened through ``inspect``'s reader (a local path, or an ``s3://`` object read by s3fs in cached
    blocks): the model needs an open h5py ``File`` and the object's size, not a local path.

    A second open of the file after ``inspect_file``'s: ``check_report`` asks for it only when a fix
    needs a page chosen (a paged file that passes never reads it)."""
    from layoutlab.errors import DAMAGED_HDF5_ERRORS, BadInputFile, damaged_reason
    from layoutlab.formats.inspect import _open_bytes
    from layoutlab.formats.paged_layout import file_allocations
    from layoutlab.hdf5_input import open_input

    with _open_bytes(location) as (stream, size):
        try:
            with open_input(stream, location) as f:
                return file_allocations(f, size_bytes=size, name=location)
        except DAMAGED_HDF5_ERRORS as error:
            raise BadInputFile(location, f"cannot be read to estimate a paged copy's size (truncated or damaged): "
                                         f"{damaged_reason(error)}") from None


def judge(report: dict, thresholds: Thresholds, allocations=None) -> dict:
    problems = [p for p in check_report(report, thresholds, allocations) if p["rule"] not in thresholds.allow]
    result = {"file": report["location"], "ok": not problems, "format": report["format"], "problems": problems,
              "allowed": sorted(thresholds.allow)}
    if not problems:
        result["summary"] = _why_ready(report, thresholds)
    return result


def check_report(report: dict, t: Thresholds, allocations=None) -> list[dict]:
    """Every problem of an ``inspect_file(..., per_dataset=True)`` report, allowed ones included.

    ``allocations``: the file's ``paged_layout.FileAllocations``, or a function returning them (called
    only when a fix needs its page chosen), for the page model to choose the fixes' page and estimate
    their size change. Without them (a report made by hand) the fixes propose the smallest page that
    passes the rules, with no estimate."""
    location = report["location"]
    h = report["hdf5"]
    if h is None:
        fix = (f"nccopy -k nc4 {_local(location)} {_out(location, '-nc4', '.nc')}, then layoutlab repack that"
               if report["format"] == "netcdf3" else report["verdict"]["problems"][0]["fix"])
        return [_problem("not-hdf5", f"not checkable: {report['verdict']['summary']}", report["format"],
                         "hdf5 or netcdf4", f"format {report['format']} vs HDF5 / NetCDF-4 required", fix)]
    space, scatter = h["file_space"], h["metadata_scatter"]
    datasets = h["chunked_datasets"]
    requests = scatter["metadata_pages"]
    small = [d for d in datasets if d["stored_count"] > 1 and d["stored_median"] < t.min_chunk]
    large = [d for d in datasets if d["stored_max"] > t.max_chunk]
    fix_page, overhead = _fix_page(report, t, small, allocations)
    repack = _repack(location, fix_page)
    h5repack = f"h5repack -S PAGE -P 1 -G {fix_page} {_local(location)} {_out(location)}"
    estimate = f"; estimated size {overhead:+.0%}" if overhead is not None else ""
    paging = f"{repack} ({h5repack}{estimate})"
    # what a paging fix proposes, as numbers (--json): the page and paged_layout.predict's overhead for it
    proposal = {"page_size": fix_page, "estimated_overhead": round(overhead, 6) if overhead is not None else None}
    problems = []
    if not space["paged"]:
        problems.append(_problem(
            "not-paged", "not paged", space["strategy"], "PAGE",
            f"file-space strategy {space['strategy']} vs PAGE required", paging, proposal=proposal))
    if requests > t.max_metadata_requests:
        block = _size(space["page_size"] if space["paged"] else scatter["assumed_page_size"])
        problems.append(_problem(
            "scattered-metadata",
            "metadata scattered", requests, t.max_metadata_requests,
            f"{requests} ranged GETs of {block} to read it vs at most {t.max_metadata_requests}", paging,
            proposal=proposal))
    if small:
        problems.append(_small_chunks(location, small, t, fix_page))
    if large:
        problems.append(_large_chunks(location, large, t, fix_page))
    # (an unpaged file has no page: the repack that pages it picks one that holds its chunks)
    page = space["page_size"]
    over_page = [d for d in datasets if d["stored_max"] > page] if space["paged"] else []
    if over_page:
        biggest = max(d["stored_max"] for d in over_page)
        fix = paging if biggest <= t.max_chunk else "smaller chunks, as for large-chunks"
        problems.append(_problem(
            "chunks-over-page", f"chunks larger than the page in {_count(over_page)}", biggest, page,
            f"largest stored chunk {_size(biggest)} vs page {_size(page)}", fix,
            datasets=[d["name"] for d in over_page], proposal=proposal if fix == paging else None))
    unlimited = h["unlimited_datasets"]
    if unlimited["with_data"]:
        nccopy = f"; or nccopy -u {_local(location)} {_out(location)}" if report["format"] == "netcdf4" else ""
        problems.append(_problem(
            "unlimited",
            f"unlimited dimensions in {_count(unlimited['with_data_names'], unlimited['with_data'])}",
            unlimited["with_data"], 0, f"{unlimited['with_data']} extensible dataset(s) holding data vs none",
            f"{repack} (fixes them at their current length{nccopy})", datasets=unlimited["with_data_names"]))
    compact = h["compact_datasets"]
    if compact["count"]:
        problems.append(_problem(
            "compact", f"COMPACT layout in {_count(compact['names'], compact['count'])}", compact["count"], 0,
            f"{compact['count']} COMPACT dataset(s) vs none",
            f"{repack} (makes them CONTIGUOUS; h5repack -l {compact['names'][0]}:CONTI per dataset)",
            datasets=compact["names"]))
    return problems


def _small_chunks(location, small, t: Thresholds, page) -> dict:
    smallest = min(d["stored_median"] for d in small)
    decimal = _is_decimal(t.min_chunk)
    example = small[0]
    h5repack = f"h5repack -l {example['name']}:CHUNK={'x'.join(map(str, _grown(example, t, page)))} per dataset"
    # --target-chunk-bytes (uncompressed) grows each chunk along its first axis: enough for every
    # dataset whose first axis is not already whole. (It and --chunks exclude each other.)
    stuck = [d for d in small if d["shape"][0] <= d["chunks"][0]]
    if not stuck:
        wanted = max(d["chunk_bytes"] * math.ceil(t.min_chunk / max(d["stored_median"], 1)) for d in small)
        option = f"--target-chunk-bytes {_label(min(page, _pow2_at_least(wanted)))}"
    else:
        option = _chunks_options(small, lambda d: _grown(d, t, page))
    return _problem(
        "small-chunks", f"small chunks in {_count(small)}", smallest, t.min_chunk,
        f"{'smallest ' if len(small) > 1 else ''}median stored chunk {_size(smallest, decimal)} vs at least "
        f"{_size(t.min_chunk, decimal)}",
        f"layoutlab repack {_local(location)} {_out(location)} --page-size {_label(page)} {option} ({h5repack})",
        datasets=[d["name"] for d in small])


def _large_chunks(location, large, t: Thresholds, page) -> dict:
    biggest = max(d["stored_max"] for d in large)
    decimal = _is_decimal(t.max_chunk)
    example = large[0]
    h5repack = f"h5repack -l {example['name']}:CHUNK={'x'.join(map(str, _shrunk(example, t, page)))} per dataset"
    return _problem(
        "large-chunks", f"large chunks in {_count(large)}", biggest, t.max_chunk,
        f"largest stored chunk {_size(biggest, decimal)} vs at most {_size(t.max_chunk, decimal)}",
        f"layoutlab repack {_local(location)} {_out(location)} --page-size {_label(page)} "
        f"{_chunks_options(large, lambda d: _shrunk(d, t, page))} ({h5repack})",
        datasets=[d["name"] for d in large])


def _chunks_options(datasets, shape_of) -> str:
    options = " ".join(f"--chunks {d['name'].lstrip('/')}={','.join(map(str, shape_of(d)))}"
                       for d in datasets[:LISTED])
    return options + (f" ... (one --chunks per dataset: {len(datasets) - LISTED} more)"
                      if len(datasets) > LISTED else "")


def _grown(d: dict, t: Thresholds, page: int) -> list[int]:
    """A chunk shape whose stored size reaches ``min_chunk`` (at the dataset's compression ratio), grown
    axis by axis from the first, within the dataset's shape and never over the page uncompressed."""
    factor = math.ceil(t.min_chunk / max(d["stored_median"], 1))
    chunks = list(d["chunks"])
    for axis, extent in enumerate(d["shape"]):
        if factor <= 1:
            break
        room = min(math.ceil(extent / chunks[axis]), factor)
        room = min(room, max(1, page // max(math.prod(chunks) * d["itemsize"], 1)))
        if room > 1:
            chunks[axis] = min(extent, chunks[axis] * room)
            factor = math.ceil(factor / room)
    return chunks


def _shrunk(d: dict, t: Thresholds, page: int) -> list[int]:
    """A chunk shape within a quarter of ``max_chunk`` stored (and a page uncompressed, as repack requires),
    halving axes from the first."""
    ratio = d["stored_max"] / max(d["chunk_bytes"], 1)  # stored / uncompressed
    limit = min(t.max_chunk / 4, page * ratio) if ratio else t.max_chunk / 4
    chunks = list(d["chunks"])
    axis = 0
    while math.prod(chunks) * d["itemsize"] * ratio > limit and any(c > 1 for c in chunks):
        if chunks[axis] > 1:
            chunks[axis] = (chunks[axis] + 1) // 2
        else:
            axis = (axis + 1) % len(chunks)
    return chunks


def _fix_page(report: dict, t: Thresholds, small: list[dict], allocations=None) -> tuple[int, float | None]:
    """(page size the fixes propose, the repacked file's estimated size overhead, None when unknown).

    A paged file keeps its page unless a rule needs another. Otherwise: of the powers of two that pass
    the rules (``fix_page_candidates``), the one that pads the file least, as
    ``layoutlab.formats.paged_layout.predict`` predicts it from the file's ``allocations`` (a
    ``FileAllocations`` or a function returning one); its overhead is the estimate shown. That is the
    model ``layoutlab repack --page-size auto`` chooses by (calibrated against real repacks), so the
    check and ``auto`` give one number for one page; the policies differ: ``auto`` takes the largest
    page within a size budget, the check the page that passes its rules (chunks within a page,
    metadata in few GETs) and pads least. Padding matters: issue 17's 30 MB granule grew 42 % with
    8 MiB pages, and a page just under two chunks wastes nearly half of itself. Without allocations
    (a report made by hand) the smallest page that passes, with no estimate."""
    h = report["hdf5"]
    space, requests = h["file_space"], h["metadata_scatter"]["metadata_pages"]
    if space["paged"]:
        page = space["page_size"]
        if requests <= t.max_metadata_requests and not small and all(
                d["stored_max"] <= page or d["stored_max"] > t.max_chunk  # (those are shrunk instead)
                for d in h["chunked_datasets"]):
            return page, None  # (no paging fix is shown: nothing to estimate)
    candidates = fix_page_candidates(report, t, small)
    if allocations is None:
        return candidates[0], None
    from layoutlab.formats.paged_layout import predict

    if callable(allocations):
        allocations = allocations()
    predictions = [predict(allocations, page) for page in candidates]
    best = min(predictions, key=lambda p: (p.output_bytes, p.page_size))
    return best.page_size, best.overhead


def fix_page_candidates(report: dict, t: Thresholds, small: list[dict]) -> list[int]:
    """The powers of two a fix may propose, smallest first: from the smallest that passes the rules
    (HDF5's default 4 KiB, or ``--page-size``, and at least: the metadata in half the allowed GETs
    (paging leaves pages part-filled), every chunk up to ``max_chunk`` within a page, and so the chunks
    the small-chunks fix grows (repack keeps a chunk within a page)) up to the first page at least the
    file's size (at most 64 MiB)."""
    h = report["hdf5"]
    space, requests = h["file_space"], h["metadata_scatter"]["metadata_pages"]
    datasets = h["chunked_datasets"]
    meta = h["metadata_bytes_estimate"]
    if space["paged"]:
        meta = min(meta, requests * space["page_size"])  # (a paged file's non-raw bytes include the tails of raw pages)
    lowest = max([MIN_PAGE, t.page_size or MIN_PAGE, _pow2_at_least(math.ceil(2 * meta / t.max_metadata_requests))]
                 + [_pow2_at_least(d["stored_max"]) for d in datasets if d["stored_max"] <= t.max_chunk]
                 + [_pow2_at_least(_grown_bytes(d, t)) for d in small])
    highest = max(lowest, min(MAX_PROPOSED_PAGE, _pow2_at_least(report["size_bytes"])))
    return [lowest << k for k in range((highest // lowest).bit_length())]


def _grown_bytes(d: dict, t: Thresholds) -> int:
    """Uncompressed bytes of a chunk grown until its stored size reaches ``min_chunk`` (at most the dataset)."""
    factor = math.ceil(t.min_chunk / max(d["stored_median"], 1))
    whole = math.prod(d["shape"]) * d["itemsize"]
    return min(d["chunk_bytes"] * factor, max(whole, d["chunk_bytes"]))


def _why_ready(report: dict, t: Thresholds) -> str:
    h = report["hdf5"]
    space, datasets = h["file_space"], h["chunked_datasets"]
    scatter = h["metadata_scatter"]
    heap_pages = scatter.get("attribute_heap_pages")
    parts = [f"paged, {_size(space['page_size'])} pages" if space["paged"] else "not paged (allowed)",
             f"metadata in {scatter['metadata_pages']} page(s)"
             + (f" (+{heap_pages} raw-data page(s) holding variable-length attribute values)" if heap_pages else "")]
    stored = [d["stored_median"] for d in datasets if d["stored_count"] > 1]
    if stored:
        low, high = _size(min(stored)), _size(max(stored))
        parts.append(f"median stored chunk {low if low == high else f'{low} to {high}'}")
    elif datasets:
        parts.append("chunked datasets are one chunk each")
    else:
        parts.append("no chunked datasets")
    if not h["unlimited_datasets"]["with_data"] and not h["compact_datasets"]["count"]:
        parts.append("no unlimited or COMPACT datasets")
    if t.allow:
        parts.append("allowed: " + ",".join(sorted(t.allow)))
    return "; ".join(parts)


def format_result(result: dict) -> list[str]:
    """``FILE: PROBLEM (measured vs threshold) — fix: COMMAND`` per problem, or ``FILE: cloud-ready (why)``."""
    if result["ok"]:
        return [f"{result['file']}: cloud-ready ({result['summary']})"]
    return [f"{result['file']}: {p['message']} ({p['measured']}) — fix: {p['fix']}" for p in result["problems"]]


def _problem(rule, message, value, threshold, measured, fix, datasets=None, proposal=None) -> dict:
    """One broken rule: ``value`` and ``threshold`` as numbers (bytes, counts) or names; ``measured`` says
    both in words. ``proposal``: a paging fix's ``page_size`` and ``estimated_overhead``, as fields."""
    problem = {"rule": rule, "message": message, "value": value, "threshold": threshold, "measured": measured,
               "fix": fix}
    if datasets is not None:
        problem["datasets"] = list(datasets)
    if proposal is not None:
        problem.update(proposal)
    return problem


def _count(items, total=None) -> str:
    """``2 datasets (/a, /b)``; at most ``LISTED`` names."""
    total = len(items) if total is None else total
    return f"{total} dataset{'s' if total != 1 else ''} ({_names(items, total)})"


def _names(items, total=None) -> str:
    names = [d["name"] if isinstance(d, dict) else d for d in items]
    total = len(names) if total is None else total
    shown = ", ".join(names[:LISTED])
    return shown + (f" and {total - LISTED} more" if total > LISTED else "")


def _repack(location: str, page: int) -> str:
    return f"layoutlab repack {_local(location)} {_out(location)} --page-size {_label(page)}"


def _local(location: str) -> str:
    """The file a fix command names: the path itself, or an s3:// object's local copy (its base name)."""
    return posixpath.basename(location) if location.startswith("s3://") else location


def _out(location: str, tag: str = "-cloud", suffix: str | None = None) -> str:
    stem, ext = os.path.splitext(_local(location))
    return f"{stem}{tag}{suffix if suffix is not None else (ext or '.h5')}"


def _dims(shape) -> str:
    return ",".join(str(n) for n in shape)


def _pow2_at_least(n: int) -> int:
    return 1 << (max(int(n), 1) - 1).bit_length()


def _label(n: int) -> str:
    from layoutlab.units import size_label

    return size_label(n)


def _is_decimal(n: int) -> bool:
    """A threshold written in decimal units (100KB), shown so, with the values compared to it."""
    return bool(n) and n % 1000 == 0 and n % 1024 != 0


def _size(n: int, decimal: bool = False) -> str:
    units = (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)) if decimal else (("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB))
    for unit, factor in units:
        if n >= factor:
            return f"{n / factor:.{0 if n % factor == 0 else 1}f} {unit}"
    return f"{n} B"
