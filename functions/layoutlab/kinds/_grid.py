"""What the kinds that rechunk a grid share (``rechunk-zarr``, ``icechunk``): chunk shapes from the plan's
``chunks`` (a preset, a list or a {dimension: size} object) and ``shards``, resolved against the grid."""

from __future__ import annotations

import math

from layoutlab.ceilings import over as ceiling_over
from layoutlab.kinds._base import SIZE, VariantKind
from layoutlab.units import parse_size

PRESETS = ("timeseries", "map", "balanced")
_EXTENTS = [{"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "integer", "minimum": 1}},
            {"type": "object", "minProperties": 1, "maxProperties": 3,
             "additionalProperties": {"type": "integer", "minimum": 1}}]
CHUNKS = {"anyOf": [{"enum": list(PRESETS)}, *_EXTENTS],
          "description": f"chunks: {', '.join(PRESETS)}, a list of positive integers (one per dimension) or a "
                         "{dimension: size} object of positive integers"}
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
    t, y, x = shape
    if preset == "timeseries":
        return (t, min(y, 10), min(x, 10))
    if preset == "map":
        return (1, y, x)
    if preset == "balanced":
        elements = max(1, target_bytes // itemsize)
        ct = max(1, min(t, elements, round(math.sqrt(elements * t / (y * x)))))
        area = max(1, elements // ct)
        cy = max(1, min(y, area, round(math.sqrt(area * y / x))))
        cx = max(1, min(x, area // cy))
        return (ct, cy, cx)
    raise ValueError(f"unknown chunk preset {preset!r}; one of {', '.join(PRESETS)}")


def _chunk_elements(chunks) -> tuple[int, bool] | None:
    """The elements of an explicit chunk shape and whether all three grid dimensions are given
    (a dimension not named keeps its whole extent, unknown before the file is read)."""
    if isinstance(chunks, list):
        return math.prod(chunks), len(chunks) >= 3
    if isinstance(chunks, dict):
        return math.prod(chunks.values()), len(chunks) >= 3
    return None


class GridKind(VariantKind):
    """A copy of the grid rechunked (and sharded, optionally); named ``<base>-<chunks>`` or
    ``<base>-sharded-<chunks>``."""

    base: str  # of its name
    one_object = False
    needs_grid = True
    reads_in_worker = True
    options = {"target_chunk_bytes": SIZE, "chunks": CHUNKS, "shards": SHARDS, "max_mem": SIZE}
    required = ("chunks",)

    def check_ceilings(self, entry, where, ceilings, input_bytes):
        explicit = _chunk_elements(entry.get("chunks"))
        if explicit and explicit[1] and explicit[0] < ceilings.min_chunk_elements:
            raise ceiling_over(f"{where}.chunks", "a chunk of", explicit[0], "min_chunk_elements",
                               ceilings.min_chunk_elements, below=True)

    def check_dataset_ceilings(self, spec, facts, ceilings):
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

    def expand(self, entry, facts):
        if "grid" not in (facts.kind, facts.role) or not facts.grid_shape:
            return []
        spec = dict(entry)
        chunks = spec["chunks"]
        if isinstance(chunks, str):
            chunks = chunk_preset(chunks, facts.grid_shape, facts.itemsize,
                                  parse_size(spec.get("target_chunk_bytes", 4 * 2**20)))
        elif isinstance(chunks, dict):
            chunks = tuple(int(chunks.get(d, n)) for d, n in zip(facts.dims, facts.grid_shape))
        chunks = tuple(min(int(c), n) for c, n in zip(chunks, facts.grid_shape))
        spec["chunks"] = dict(zip(facts.dims, chunks))
        if isinstance(spec.get("shards"), list):  # factors: shard = chunk x factor, within the axis
            factors = list(spec["shards"]) + [1] * (3 - len(spec["shards"]))
            spec["shards"] = {d: c * max(1, min(int(f), n // c))
                              for d, c, n, f in zip(facts.dims, chunks, facts.grid_shape, factors)}
        label = "x".join(str(c) for c in chunks)
        spec["name"] = f"{self.base}-sharded-{label}" if spec.get("shards") else f"{self.base}-{label}"
        spec["format"] = self.format
        return [spec]


def extents_tuple(sizes: dict) -> str:
    """``(24, 50, 50)``: a {dimension: size} object as the tuple zarr takes."""
    return "(" + ", ".join(str(n) for n in sizes.values()) + ("," if len(sizes) == 1 else "") + ")"
