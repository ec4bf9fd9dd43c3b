"""What each variant needs stored, and its size overhead against the size budget.

A variant is read from S3, so what it costs in storage is every byte that must
stay there for it to be read: a copy (paged HDF5, Zarr, native Icechunk) is read
on its own and can replace the original; references (``virtual-kerchunk``,
``icechunk-virtual``) are read *through* the object they point at, so they need
that object too (the original, or the paged copy they were made over). The
overhead is that storage over the original's size.

The budget: the convert step records, with each VARIANT item, ``size_budget``
(a fraction, e.g. 0.05), ``within_budget``, ``page_size`` and
``page_size_choice`` (why that page). Items written before it did lack those
fields; they are judged against ``DEFAULT_SIZE_BUDGET``, and the row says the
budget was not recorded.
"""

from __future__ import annotations

from layoutlab import kinds

# Lopez et al. / NSIDC: paging should add at most 5 % to a file (ATL03 v7 in production grows ~1 %).
DEFAULT_SIZE_BUDGET = 0.05
ORIGINAL = "original"


def is_paged(name: str, item: dict | None) -> bool:
    """Variant ``name`` (VARIANT item ``item``, or None) is of a paged HDF5 kind (``kinds.kind_of``)."""
    kind = kinds.kind_of(name, item)
    return bool(kind and kind.paged)


def referenced_variant(name: str, item: dict | None) -> str | None:
    """The variant whose bytes ``name``'s references point at (None for a copy or the original)."""
    kind = kinds.kind_of(name, item)
    return kind.reads_through(item) if kind else None


def making_order(name: str, variants: dict[str, dict]) -> list[str]:
    """The variants to make, in order, for ``name`` to be readable: ``[paged-8MiB, kerchunk-paged-8MiB]``
    for references over a paged copy; ``[]`` for the original."""
    chain, seen = [], set()
    while name and name != ORIGINAL and name not in seen:
        seen.add(name)
        chain.insert(0, name)
        name = referenced_variant(name, variants.get(name))
    return chain


def storage_bytes(name: str, variants: dict[str, dict], _seen: tuple = ()) -> int | None:
    """Bytes that must stay in S3 for ``name`` to be read; None when a size was not recorded."""
    item = variants.get(name) or {}
    own = item.get("size_bytes")
    if own is None or name in _seen:
        return None
    over = referenced_variant(name, item)
    if over is None:
        return int(own)
    under = storage_bytes(over, variants, _seen + (name,))
    return None if under is None else int(own) + under


def original_bytes(variants: dict[str, dict]) -> int | None:
    """The original's size: its VARIANT item, else what a converted variant recorded as its source."""
    size = (variants.get(ORIGINAL) or {}).get("size_bytes")
    if size is not None:
        return int(size)
    sources = [v.get("source_bytes") for v in variants.values() if v.get("source_bytes")]
    return int(sources[0]) if sources else None


def budget_rows(variants: dict[str, dict]) -> list[dict]:
    """One row per variant (the original first): storage needed, overhead, budget, verdict, page size.

    ``within_budget`` is the recorded verdict for a copy; for references it is judged here from
    the storage they need (the recorded ``size_overhead`` of a references object compares the
    references alone with the original, which says nothing about what reading them keeps stored).
    ``flag`` is set on a paged variant over its budget, and on references over one.
    """
    original = original_bytes(variants)
    rows = []
    for name in sorted(variants, key=lambda n: (n != ORIGINAL, n)):
        item = variants[name] or {}
        kind = kinds.kind_of(name, item)
        kind_name = item.get("variant_kind") or (item.get("spec") or {}).get("kind") or (kind.name if kind else None)
        if item.get("status") == "SKIPPED":  # "auto" paging that could not help within the budget: nothing made
            rows.append({"variant": name, "kind": kind_name, "status": "SKIPPED", "reason": item.get("reason"),
                         "size_bytes": None, "storage_bytes": None, "references": referenced_variant(name, item),
                         "overhead": None, "size_budget": _budget(item), "budget_recorded": "size_budget" in item,
                         "within_budget": None, "flag": False, "page_size": None,
                         "page_size_choice": item.get("page_size_choice")})
            continue
        if item.get("status", "READY") not in ("READY", None):
            continue  # a failed variant stored nothing worth judging
        needed = storage_bytes(name, variants)
        over = referenced_variant(name, item)
        if kind is not None and not kind.converted:  # the upload itself
            overhead = 0.0
        elif over is None and item.get("size_overhead") is not None:
            overhead = float(item["size_overhead"])  # the converter's own figure for a copy
        elif needed is not None and original:
            overhead = needed / original - 1
        else:
            overhead = item.get("size_overhead")
        recorded = item.get("size_budget")
        budget = _budget(item)
        if over is None and isinstance(item.get("within_budget"), bool):
            within = item["within_budget"]
        else:
            within = None if overhead is None else overhead <= budget + 1e-12
        pages = (item.get("page_size"), (item.get("repack") or {}).get("page_size"),
                 (item.get("spec") or {}).get("page_size"))
        page = next((p for p in pages if isinstance(p, int) and not isinstance(p, bool)), None)  # not "auto"
        rows.append({
            "variant": name, "kind": kind_name, "status": item.get("status", "READY"),
            "size_bytes": item.get("size_bytes"), "storage_bytes": needed,
            "references": over, "overhead": overhead, "size_budget": budget,
            "budget_recorded": recorded is not None, "within_budget": within,
            "flag": within is False and (bool(kind and kind.paged) or over is not None),
            "page_size": int(page) if page else None, "page_size_choice": item.get("page_size_choice"),
            **({"lacks": list(item["lacks"])} if item.get("lacks") else {}),
        })
    return rows


def _budget(item: dict) -> float:
    recorded = item.get("size_budget")
    return float(recorded) if isinstance(recorded, (int, float)) and not isinstance(recorded, bool) \
        else DEFAULT_SIZE_BUDGET


def budget_text(row: dict) -> str:
    """``+41.8% vs a 5% budget: OVER`` (or within), saying when the budget is the default (not recorded)."""
    if row.get("status") == "SKIPPED":
        return f"not made: {row.get('reason') or 'skipped'}"
    lacks = row.get("lacks") or []
    missing = (f"; LACKS {len(lacks)} variable(s) of the upload: {'; '.join(lacks[:3])}"
               + (f"; and {len(lacks) - 3} more" if len(lacks) > 3 else "")) if lacks else ""
    if row["overhead"] is None:
        return "overhead unknown (no size recorded)" + missing
    budget = f"{row['size_budget']:.0%} budget" + ("" if row["budget_recorded"] else " (default)")
    verdict = "within" if row["within_budget"] else "OVER"
    return f"{row['overhead']:+.1%} vs a {budget}: {verdict}" + missing
