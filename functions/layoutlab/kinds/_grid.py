"""What the kinds that rechunk a dataset share (``rechunk-zarr``, ``icechunk``): chunk shapes from the plan's
``chunks`` (a preset, a list or a {dimension: size} object) and ``shards``, resolved against the file.

Per role (the structure model's, ``layoutlab/structure.py``):

- a grid of any number of axes: Nguyen et al.'s ``timeseries`` / ``map`` / ``balanced`` presets over its record
  (time) axis, its level axis and its latitude / longitude (``chunk_preset_nd``; the level rule is there);
- a table: ``rows``, chunks of ``rows`` elements along the row axis of every array (a group's columns alike),
  capped at the longest table (NSIDC's ATL03 release 7 went from 10^4 to 10^5 photons a chunk);
- a swath: ``scan-lines``, blocks of whole scan lines (every pixel, every bin) of about ``target_chunk_bytes``.

Names say the shape: ``zarr-120x100x50`` (a grid's chunk), ``zarr-rows1e5`` (rows a chunk), ``zarr-lines121``
(scan lines a chunk)."""

from __future__ import annotations

import math

from layoutlab.ceilings import over as ceiling_over
from layoutlab.kinds._base import SIZE, VariantKind
from layoutlab.units import parse_size

PRESETS = ("timeseries", "map", "balanced")
# along the record axis of every array: a table's rows (``rows`` a chunk), a swath's scan lines
RECORD_PRESETS = {"rows": "table", "scan-lines": "swath"}
_EXTENTS = [{"type": "array", "minItems": 1, "maxItems": 4, "items": {"type": "integer", "minimum": 1}},
            {"type": "object", "minProperties": 1, "maxProperties": 4,
             "additionalProperties": {"type": "integer", "minimum": 1}}]
CHUNKS = {"anyOf": [{"enum": [*PRESETS, *RECORD_PRESETS]}, *_EXTENTS],
          "description": f"chunks: {', '.join([*PRESETS, *RECORD_PRESETS])}, a list of positive integers (one per "
                         "dimension) or a {dimension: size} object of positive integers"}
ROWS = {"type": "integer", "minimum": 1, "description": "with chunks \"rows\": elements a chunk along a table's rows"}
DEFAULT_SCAN_LINE_BYTES = 4 * 2**20
SHARDS = {"anyOf": _EXTENTS,
          "description": "shards: a {dimension: size} object (whole multiples of the chunks) or a list of positive "
                         "factors, one per dimension"}


def chunk_preset(preset: str, shape: tuple[int, int, int], itemsize: int = 4,
                 target_bytes: int = 4 * 2**20) -> tuple[int, int, int]:
    """Chunk shape for a (time, lat, lon) array, after Nguyen et al.'s three archetypes.

    ``timeseries``: whole time axis, 10x10 in space (their 5136x10x10);
    ``map``: one time step, whole map (their 1x721x1152);
    ``balanced``: a chunk of about ``target_bytes`` for which a time series
    and a map touch the same number of chunks (T/ct = (Y/cy)(X/cx)), which is
    where the product of the two read times is smallest when cost tracks chunks.
    """
    return chunk_preset_nd(preset, shape, ("T", "Y", "X"), itemsize, target_bytes)


def chunk_preset_nd(preset: str, shape: tuple[int, ...], axes: tuple[str | None, ...], itemsize: int = 4,
                    target_bytes: int = 4 * 2**20) -> tuple[int, ...] | None:
    """Nguyen et al.'s presets over a grid of any number of axes; ``axes`` gives each axis's kind: ``T`` (the record
    axis, time), ``Z`` (a level axis), ``Y`` / ``X`` (latitude / longitude) or None (any other, kept whole).

    ``timeseries``: the whole record axis, one level, 10 x 10 in latitude / longitude (a point's series at one
    level is one chunk: what ``point-series`` reads); ``map``: one record step, every level, the whole of
    latitude / longitude (one step's volume is one chunk: what ``record-slice`` reads, all levels); ``balanced``:
    about ``target_bytes`` a chunk, a point's series and one step's volume touching as many chunks, the level
    axis split like latitude and longitude (the chunk's space part keeps the grid's proportions). For (time,
    lat, lon) these are ``chunk_preset``'s shapes. A grid without a record axis has no time series: None for
    ``timeseries``; its ``map`` is the whole grid and its ``balanced`` tiles of about ``target_bytes``.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown chunk preset {preset!r}; one of {', '.join(PRESETS)}")
    record = axes.index("T") if "T" in axes else None
    space = [a for a, kind in enumerate(axes) if kind in ("Z", "Y", "X")]
    out = list(shape)  # any other axis: whole
    if preset == "timeseries":
        if record is None:
            return None
        for a in space:
            out[a] = 1 if axes[a] == "Z" else min(shape[a], 10)
        return tuple(out)
    if preset == "map":
        if record is not None:
            out[record] = 1
        return tuple(out)
    elements = max(1, target_bytes // itemsize)
    others = math.prod(n for a, n in enumerate(shape) if a != record and a not in space)
    elements = max(1, elements // max(1, others))
    volume = math.prod(shape[a] for a in space) or 1
    if record is not None:
        t = shape[record]
        out[record] = ct = max(1, min(t, elements, round(math.sqrt(elements * t / volume))))
        elements = max(1, elements // ct)
    # the space part: each axis in turn in proportion to the grid (for lat, lon: cy = sqrt(area * y / x))
    left = list(space)
    while left:
        a = left.pop(0)
        if not left:
            out[a] = max(1, min(shape[a], elements))
            break
        rest = math.prod(shape[b] for b in left)
        k = len(left) + 1
        out[a] = max(1, min(shape[a], elements, round((elements * shape[a] ** (k - 1) / rest) ** (1 / k))))
        elements = max(1, elements // out[a])
    return tuple(out)


def rows_label(rows: int) -> str:
    """``1e5`` for 100000 (a power of ten from 10^3), else the number: what a row-chunked variant's name says."""
    exponent = len(str(rows)) - 1
    return f"1e{exponent}" if rows >= 1000 and rows == 10 ** exponent else str(rows)


def _chunk_elements(chunks) -> tuple[int, bool] | None:
    """The elements of an explicit chunk shape and whether all three grid dimensions are given
    (a dimension not named keeps its whole extent, unknown before the file is read)."""
    if isinstance(chunks, list):
        return math.prod(chunks), len(chunks) >= 3
    if isinstance(chunks, dict):
        return math.prod(chunks.values()), len(chunks) >= 3
    return None


class GridKind(VariantKind):
    """A copy of the dataset rechunked (and sharded, optionally): a grid named ``<base>-<chunks>`` or
    ``<base>-sharded-<chunks>``; a table's rows ``<base>-rows<n>``, a swath's scan lines ``<base>-lines<n>``."""

    base: str  # of its name
    one_object = False
    needs_grid = True
    reads_in_worker = True
    options = {"target_chunk_bytes": SIZE, "chunks": CHUNKS, "shards": SHARDS, "max_mem": SIZE, "rows": ROWS}
    required = ("chunks",)

    record_layouts = False  # True: takes chunks "rows" / "scan-lines" (a copy of every array, not one grid's)

    def check(self, entry, where):
        chunks = entry.get("chunks")
        if isinstance(chunks, str) and chunks in RECORD_PRESETS:
            if not self.record_layouts:
                raise ValueError(f"{where}.chunks {chunks!r} is a layout of rechunk-zarr only ({self.name} copies one grid)")
            if entry.get("applies_to") not in (None, RECORD_PRESETS[chunks]):
                raise ValueError(f"{where}.chunks {chunks!r} is for a {RECORD_PRESETS[chunks]}, "
                                 f"not applies_to {entry['applies_to']!r}")
        elif "rows" in entry:
            raise ValueError(f"{where}.rows is taken with chunks \"rows\" only")

    def check_ceilings(self, entry, where, ceilings, input_bytes):
        explicit = _chunk_elements(entry.get("chunks"))
        if explicit and explicit[1] and explicit[0] < ceilings.min_chunk_elements:
            raise ceiling_over(f"{where}.chunks", "a chunk of", explicit[0], "min_chunk_elements",
                               ceilings.min_chunk_elements, below=True)

    def _check_grid_ceilings(self, spec, facts, ceilings):
        if not facts.grid_shape:
            return
        chunks = tuple(spec["chunks"].values())
        smallest = min(ceilings.min_chunk_elements, math.prod(facts.grid_shape))
        if math.prod(chunks) < smallest:
            raise ceiling_over(f"variant {spec['name']}: chunks", "a chunk of", math.prod(chunks),
                               "min_chunk_elements", smallest, below=True)
        block = tuple(spec["shards"].get(d, c) for d, c in zip(facts.dims, chunks)) if spec.get("shards") else chunks
        objects = math.prod(-(-n // max(1, b)) for n, b in zip(facts.grid_shape, block))
        if objects > ceilings.max_objects_per_variant:
            raise ceiling_over(f"variant {spec['name']}: chunks", f"the {'x'.join(map(str, facts.grid_shape))} grid "
                               f"in {'shards' if spec.get('shards') else 'chunks'} of {'x'.join(map(str, block))}:",
                               objects, "max_objects_per_variant", ceilings.max_objects_per_variant)

    def needs(self, entry):
        return RECORD_PRESETS.get(entry.get("chunks"), "grid") if isinstance(entry.get("chunks"), str) else "grid"

    def check_dataset_ceilings(self, spec, facts, ceilings):
        if spec.get("record_chunk"):  # every array's record axis in chunks of record_chunk elements
            objects = sum(-(-n // spec["record_chunk"]) * whole for n, whole in facts.record_arrays)
            if objects > ceilings.max_objects_per_variant:
                raise ceiling_over(f"variant {spec['name']}: chunks", f"{len(facts.record_arrays)} arrays in chunks of "
                                   f"{spec['record_chunk']} along their first axis:", objects,
                                   "max_objects_per_variant", ceilings.max_objects_per_variant)
            return
        self._check_grid_ceilings(spec, facts, ceilings)

    def expand(self, entry, facts):
        if isinstance(entry.get("chunks"), str) and entry["chunks"] in RECORD_PRESETS:
            return self._expand_records(entry, facts)
        if "grid" not in (facts.kind, facts.role) or not facts.grid_shape:
            return []
        spec = dict(entry)
        chunks = spec["chunks"]
        shape = tuple(facts.grid_shape)
        axes = tuple(facts.grid_axes) or ("T", "Y", "X")
        if isinstance(chunks, str):
            chunks = chunk_preset_nd(chunks, shape, axes, facts.itemsize,
                                     parse_size(spec.get("target_chunk_bytes", 4 * 2**20)))
            if chunks is None:  # a time-series layout of a grid without a time axis
                return []
        elif isinstance(chunks, dict):
            chunks = tuple(int(chunks.get(d, n)) for d, n in zip(facts.dims, shape))
        chunks = tuple(min(int(c), n) for c, n in zip(chunks, shape))
        spec["chunks"] = dict(zip(facts.dims, chunks))
        if isinstance(spec.get("shards"), list):  # factors: shard = chunk x factor, within the axis
            if "T" not in axes:  # (the sharded layout gathers the time axis into a shard: a grid without one has none)
                return []
            # the factors are given for (time, lat, lon): a level axis (or any other) gets 1
            given = dict(zip(("T", "Y", "X"), list(spec["shards"]) + [1] * (3 - len(spec["shards"]))))
            spec["shards"] = {d: c * max(1, min(int(given.get(axis, 1)), n // c))
                              for d, c, n, axis in zip(facts.dims, chunks, shape, axes)}
        label = "x".join(str(c) for c in chunks)
        spec["name"] = f"{self.base}-sharded-{label}" if spec.get("shards") else f"{self.base}-{label}"
        spec["format"] = self.format
        return [spec]

    def _expand_records(self, entry, facts):
        """A table's rows or a swath's scan lines in chunks along every array's first axis (its other axes whole):
        ``rows`` elements (capped at the longest table), or as many scan lines of the swath's largest variable as
        make about ``target_chunk_bytes``. Named by the elements a chunk holds: ``zarr-rows1e5``, ``zarr-lines121``."""
        role = RECORD_PRESETS[entry["chunks"]]
        if facts.role != role or not facts.record_length:
            return []
        if role == "table":
            n = max(1, min(int(entry.get("rows") or 100_000), facts.record_length))
            name = f"{self.base}-rows{rows_label(n)}"
        else:
            target = parse_size(entry.get("target_chunk_bytes", DEFAULT_SCAN_LINE_BYTES))
            n = max(1, min(facts.record_length, target // max(1, facts.record_bytes)))
            name = f"{self.base}-lines{n}"
        spec = {k: v for k, v in entry.items() if k not in ("rows", "target_chunk_bytes")}
        # (two entries capped to the same chunk give one layout: identical specs, kept once by plan.variant_specs)
        return [{**spec, "record_chunk": n, "name": name, "format": self.format}]

def extents_tuple(sizes: dict) -> str:
    """``(24, 50, 50)``: a {dimension: size} object as the tuple zarr takes."""
    return "(" + ", ".join(str(n) for n in sizes.values()) + ("," if len(sizes) == 1 else "") + ")"
