"""The page size for a paged copy, chosen from the file so that paging stays within a size budget.

The policy of ``layoutlab repack --page-size auto`` (and plans' ``"page_size": "auto"``). The
model it works from, how large a copy paged at a given page size becomes (the file's allocations
read with h5py, packed into pages as HDF5's paged aggregation packs them), is
``layoutlab.formats.paged_layout``: ``layoutlab inspect --check`` estimates its fixes' size change
with the same model, so the two commands give one number for one page. (The model sits in
``formats`` because the import contracts let ``convert`` import ``formats`` and not the reverse;
its public names are re-exported here for the callers that import them from this module.)

``choose_page_size`` picks the largest power of two (fewer, larger pages: the metadata in as few
pages as possible, what a reader fetches to open the file) whose predicted overhead (copy size /
input size - 1) stays within the budget, or decides to skip paging and says why: a file a
single request reads whole, metadata already in as few regions as the pages would be, or no
page size that both fits the budget and cuts the number of metadata reads.

NSIDC's budget for their cloud-optimized ICESat-2 products is 5 % (their files grow ~1 %); an
8 MiB page on a 30 MB granule costs +42 %, most of it the last, mostly empty, pages.
"""

from __future__ import annotations

import os

from layoutlab.formats.paged_layout import (  # noqa: F401  (re-exported: the model, moved to formats)
    FileAllocations,
    PagePrediction,
    file_allocations,
    predict,
)

KiB = 1 << 10
MiB = 1 << 20
DEFAULT_BUDGET = 0.05
MIN_PAGE_SIZE = 4 * KiB
MAX_PAGE_SIZE = 8 * MiB
# One request of up to this many bytes costs about as much as a smaller one (latency dominates,
# Lopez et al.; inspect's SMALL_CHUNK_BYTES): a file this small is read whole in one request.
ONE_REQUEST_BYTES = 1 * MiB


class PageChoice:
    """``page_size`` to use (None: skip paging), why, and what was predicted for every size tried
    (from the largest down to the one chosen, or all of them when paging is skipped)."""

    def __init__(self, page_size: int | None, reason: str, budget: float, input_bytes: int,
                 predicted_overhead: float | None = None, predictions: list[PagePrediction] | None = None):
        self.page_size, self.reason, self.budget, self.input_bytes = page_size, reason, budget, input_bytes
        self.predicted_overhead = predicted_overhead
        self.predictions = list(predictions or [])

    @property
    def skip(self) -> bool:
        return self.page_size is None

    def record(self) -> dict:
        """The fields a VARIANT item carries (names shared with the report)."""
        return {"page_size": self.page_size, "page_size_choice": self.reason, "size_budget": self.budget,
                "predicted_overhead": (round(self.predicted_overhead, 6) if self.predicted_overhead is not None
                                       else None)}

    def __repr__(self) -> str:
        return f"PageChoice({self.page_size}, {self.reason!r})"


AUTO = "auto"  # a plan's or the CLI's page size that asks for choose_page_size


def is_auto(page_size) -> bool:
    return isinstance(page_size, str) and page_size.strip().lower() == AUTO


def parse_budget(value, what: str = "size_budget") -> float:
    """A size budget as a fraction: ``0.05``, ``"0.05"`` and ``"5%"`` -> 0.05.

    A bare number must be below 1 (``5`` is refused rather than read as 500 %); a percentage may be
    anything from 0 %. Raises ValueError naming ``what`` (the field or option) and what was expected.
    """
    text = str(value).strip()
    try:
        if isinstance(value, bool):
            raise ValueError
        if text.endswith("%"):
            budget = float(text[:-1]) / 100
        else:
            budget = float(text)
            if budget >= 1:
                raise ValueError
    except ValueError:
        raise ValueError(f"{what} {value!r}: expected a fraction below 1 (0.05) or a percentage (5%)") from None
    if not budget >= 0:  # (also NaN)
        raise ValueError(f"{what} {value!r}: must not be negative")
    return budget


def candidate_page_sizes(min_page: int = MIN_PAGE_SIZE, max_page: int = MAX_PAGE_SIZE) -> list[int]:
    """Powers of two from ``min_page`` to ``max_page``, largest first."""
    sizes, page = [], 1 << max(0, (int(max_page)).bit_length() - 1)
    while page >= min_page:
        sizes.append(page)
        page //= 2
    return sizes


def choose_page_size(path: str | os.PathLike, budget: float = DEFAULT_BUDGET, *, min_page: int = MIN_PAGE_SIZE,
                     max_page: int = MAX_PAGE_SIZE, target_chunk_bytes: int | None = None,
                     allocations: FileAllocations | None = None) -> PageChoice:
    """The largest page size whose paged copy of ``path`` stays within ``budget``, or a reasoned skip.

    ``budget``: the overhead allowed (0.05: the copy at most 5 % larger than the input).
    ``min_page``/``max_page``: the powers of two tried (4 KiB .. 8 MiB). ``target_chunk_bytes``:
    for a rechunked-paged copy (its chunks grow to this size, which no page may be smaller than).
    """
    budget = parse_budget(budget)
    if target_chunk_bytes:
        min_page = max(min_page, 1 << (int(target_chunk_bytes) - 1).bit_length())
    if min_page > max_page:
        raise ValueError(f"no page size between {min_page} and {max_page} bytes")
    allocations = allocations or readable_allocations(path, target_chunk_bytes)
    size = allocations.size_bytes
    if size <= ONE_REQUEST_BYTES:
        return PageChoice(None, f"the file ({_mb(size)}) is read whole by one request of "
                                f"{ONE_REQUEST_BYTES // MiB} MiB; pages cannot save a request", budget, size)
    regions = allocations.metadata_regions
    predictions = []
    for page in candidate_page_sizes(min_page, max_page):  # largest first: stop at the first that does
        predictions.append(predict(allocations, page))
        if predictions[-1].overhead <= budget and predictions[-1].metadata_pages < regions:
            break
    within = [p for p in predictions if p.overhead <= budget]
    helping = [p for p in within if p.metadata_pages < regions]
    if helping:
        best = helping[0]  # the largest
        reason = (f"{_label(best.page_size)}: the largest page within the {budget:.0%} budget "
                  f"(predicted {best.overhead:+.1%}; metadata {_mb(allocations.metadata_bytes)} in "
                  f"{best.metadata_pages} page{'s' * (best.metadata_pages != 1)}, now in {regions} regions)")
        if predictions[0].page_size != best.page_size:
            reason += f"; {_label(predictions[0].page_size)} would add {predictions[0].overhead:+.1%}"
        return PageChoice(best.page_size, reason, budget, size, best.overhead, predictions)
    if within:  # pages that fit the budget, none of them fewer than the file's metadata regions now
        fewest = min(within, key=lambda p: p.metadata_pages)
        reason = (f"metadata already contiguous (in {regions} region{'s' * (regions != 1)}); "
                  f"the fewest pages a copy within the {budget:.0%} budget would need is {fewest.metadata_pages} "
                  f"({_label(fewest.page_size)})")
        if allocations.page_size_now:
            reason += f"; the file is paged already ({_label(allocations.page_size_now)} pages)"
        return PageChoice(None, reason, budget, size, None, predictions)
    smallest = min(predictions, key=lambda p: p.overhead)
    return PageChoice(None, f"no page size meets the {budget:.0%} budget (the smallest overhead is "
                            f"{smallest.overhead:+.1%}, with {_label(smallest.page_size)} pages)",
                      budget, size, None, predictions)


def compare_with_repack(path, page_sizes, scratch_dir, target_chunk_bytes: int | None = None) -> list[dict]:
    """The model against the repack: ``path`` repacked at each page size (into ``scratch_dir``, then
    removed) beside its prediction. One row per page size: ``predicted_bytes``, ``actual_bytes``,
    ``error_bytes`` (predicted - actual), the two overheads, and what the tolerance is made of
    (``metadata_bytes``, ``global_heap_bytes``: the estimated part; the raw data is packed exactly)."""
    from pathlib import Path

    from layoutlab.convert.repack import repack

    allocations = file_allocations(path, target_chunk_bytes)
    rows = []
    for page in page_sizes:
        predicted = predict(allocations, page)
        out = Path(scratch_dir) / f".page-budget-{os.getpid()}-{page}.h5"
        try:
            actual = repack(path, out, page_size=page, target_chunk_bytes=target_chunk_bytes).output_bytes
        finally:
            out.unlink(missing_ok=True)
        rows.append({"file": str(path), "input_bytes": allocations.size_bytes, "page_size": page,
                     "predicted_bytes": predicted.output_bytes, "actual_bytes": actual,
                     "error_bytes": predicted.output_bytes - actual,
                     "predicted_overhead": predicted.overhead, "actual_overhead": actual / allocations.size_bytes - 1,
                     "metadata_bytes": allocations.metadata_bytes,
                     "global_heap_bytes": allocations.global_heap_bytes})
    return rows


def readable_allocations(path, target_chunk_bytes: int | None = None) -> FileAllocations:
    """``file_allocations``, with a file that is not HDF5, or is damaged, refused in one line naming it."""
    from layoutlab.convert.repack_common import check_signature
    from layoutlab.errors import DAMAGED_HDF5_ERRORS, BadInputFile, damaged_reason, raised_by_h5py

    check_signature(path)
    try:
        return file_allocations(path, target_chunk_bytes)
    except DAMAGED_HDF5_ERRORS as error:
        if not raised_by_h5py(error):
            raise
        raise BadInputFile(path, f"cannot be read to choose a page size (truncated or damaged): "
                                 f"{damaged_reason(error)}") from None


def _label(nbytes: int) -> str:
    from layoutlab.units import size_label

    return size_label(int(nbytes))


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 100_000 else f"{nbytes / 1e3:.1f} kB"
