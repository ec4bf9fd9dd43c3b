"""The rechunk planner: a pure function of shapes, chunks and a memory bound.

Nothing here touches a file. ``plan_array`` decides how one array is copied
from its source chunks to its target chunks (and shards) so that no work unit
needs more than ``max_mem`` bytes, and cuts the copy into independent work
units that a fan-out (Step Functions Map, one Lambda per unit) can run in any
order: units of one stage never write to the same chunk or shard, because
every unit is aligned to the chunk (and shard) grid of the array it writes.
Parallel writers that share a shard lose data (zarr-python #3682), so the
final stage aligns units to *shards*, not only to inner chunks.

The memory model of one unit (bytes)::

    unit buffer                 prod(unit) * itemsize
  + chunks being decoded        read_concurrency  * 2 * prod(read_block)  * itemsize
  + chunks/shards being encoded write_concurrency * 2 * prod(write_block) * itemsize

(a decoded and an encoded copy of every block in flight). A reader cannot
return part of a chunk without decoding all of it, so a unit that covers
half a source chunk decodes that chunk twice (once per unit): that is *read
amplification*, and it is what makes a naive direct copy slow — the worst
case of Nguyen et al. (source 1 x lat x lon -> target full-time x 10 x 10)
decodes every source chunk dozens of times under a 512 MiB bound.

Like rechunker's ``algorithm.py`` (multistage_rechunking_plan), when a direct
copy whose units read whole source chunks and write whole target blocks would
break the memory bound, the planner considers two stages through an
intermediate array (source -> intermediate chunks -> target) in which each
stage reads every chunk about once, and keeps whichever of the two plans its
cost model (bytes decoded and encoded, weighted by codec cost) says is
cheaper. A unit of stage 1 reads what some units of stage 0 write; units
within a stage are independent. ``rechunk_zarr.run_unit`` lets units of
every stage run in any order: a stage-1 unit first runs the stage-0 units
it reads from that are not done yet.

This is written by hand because rechunker's planner assumes dask-style
blocks (read chunks that are whole multiples of source chunks, written
through locks or an intermediate for every pair) and has no notion of shards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Relative cost of producing / consuming one byte, used only to compare plans.
# The source is usually zlib (slow to decode); the target Blosc/Zstd (slow to
# encode); the intermediate uses a fast codec (Blosc/LZ4, level 1).
COST_SOURCE_DECODE = 1.0
COST_TARGET_ENCODE = 1.0
COST_INTERMEDIATE = 0.35
# Blocks in flight at once while reading/writing through zarr's async loop.
MAX_IO_CONCURRENCY = 16


class PlanError(ValueError):
    """The requested rechunk cannot be planned (e.g. the bound is below one chunk)."""


@dataclass(frozen=True)
class ArraySpec:
    """What the planner needs to know about one array."""

    name: str
    shape: tuple[int, ...]
    itemsize: int
    source_chunks: tuple[int, ...]
    target_chunks: tuple[int, ...]
    target_shards: tuple[int, ...] | None = None

    def __post_init__(self):
        n = len(self.shape)
        for label, value in (("source_chunks", self.source_chunks), ("target_chunks", self.target_chunks)):
            if len(value) != n:
                raise PlanError(f"{self.name}: {label} {value} has {len(value)} dimensions, the array has {n}")
            if any(c < 1 for c in value):
                raise PlanError(f"{self.name}: {label} {value} must be positive")
        if self.target_shards is not None:
            if len(self.target_shards) != n:
                raise PlanError(f"{self.name}: shards {self.target_shards} do not match the array's {n} dimensions")
            for shard, chunk, size in zip(self.target_shards, self.target_chunks, self.shape):
                if shard % min(chunk, max(size, 1)) and shard < size:
                    raise PlanError(
                        f"{self.name}: shards {self.target_shards} must be whole multiples of chunks {self.target_chunks}"
                    )

    @property
    def write_block(self) -> tuple[int, ...]:
        """The smallest region one writer may own: a shard when sharded, else a chunk."""
        return self.target_shards if self.target_shards is not None else self.target_chunks

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize


@dataclass(frozen=True)
class Stage:
    """One pass over an array: read ``read_block`` chunks, write ``write_block`` blocks."""

    index: int
    reads: str  # "source" | "intermediate"
    writes: str  # "intermediate" | "target"
    read_block: tuple[int, ...]
    write_block: tuple[int, ...]
    unit_shape: tuple[int, ...]
    read_concurrency: int
    write_concurrency: int
    unit_memory: int
    read_amplification: float

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "reads": self.reads,
            "writes": self.writes,
            "read_block": list(self.read_block),
            "write_block": list(self.write_block),
            "unit_shape": list(self.unit_shape),
            "read_concurrency": self.read_concurrency,
            "write_concurrency": self.write_concurrency,
            "unit_memory": self.unit_memory,
            "read_amplification": round(self.read_amplification, 3),
        }


@dataclass(frozen=True)
class ArrayPlan:
    spec: ArraySpec
    stages: tuple[Stage, ...]
    intermediate_chunks: tuple[int, ...] | None = None
    units: tuple[dict, ...] = field(default=())

    @property
    def peak_unit_memory(self) -> int:
        return max(stage.unit_memory for stage in self.stages)


def _clip(block, shape):
    return tuple(max(1, min(b, n)) for b, n in zip(block, shape))


def unit_memory(unit, read_block, write_block, itemsize, read_concurrency=1, write_concurrency=1, shape=None) -> int:
    """Bytes one work unit holds at its peak (see the module docstring)."""
    if shape is not None:
        unit, read_block, write_block = (_clip(b, shape) for b in (unit, read_block, write_block))
    return itemsize * (
        math.prod(unit)
        + 2 * read_concurrency * math.prod(read_block)
        + 2 * write_concurrency * math.prod(write_block)
    )


def _pairs_along(size: int, chunk: int, unit: int) -> int:
    """How many (unit, chunk) intervals overlap along one dimension of length ``size``.

    Each chunk overlaps one unit, plus one more for every unit boundary inside it; a boundary (a multiple
    of ``unit`` in (0, size)) lies inside a chunk unless it is also a chunk boundary (a multiple of both).
    In closed form: a loop over the chunks took 4.4 of 12.8 s of CPU planning ERA5's t2m tiled to 2 GB
    (21,068 one-record chunks, scored 351 times while the unit grows)."""
    if size <= 0:
        return 0
    inner = size - 1  # (boundaries at 0 and at size begin or end no overlap)
    return -(-size // chunk) + inner // unit - inner // math.lcm(unit, chunk)


def read_amplification(shape, read_block, unit) -> float:
    """Average number of times each read chunk is decoded when units of ``unit`` tile ``shape``."""
    amplification = 1.0
    for size, chunk, u in zip(shape, read_block, unit):
        if size == 0:
            continue
        chunk = max(1, min(chunk, size))
        n_chunks = -(-size // chunk)
        amplification *= _pairs_along(size, chunk, max(1, min(u, size))) / n_chunks
    return amplification


def _concurrency(budget_bytes: int, block_bytes: int, limit: int = MAX_IO_CONCURRENCY) -> int:
    """Blocks in flight: as many as a sixteenth of the budget allows, 1..limit."""
    if block_bytes <= 0:
        return max(1, limit)
    return int(max(1, min(limit, (budget_bytes // 16) // (2 * block_bytes))))


def grow_unit(shape, align, read_block, itemsize, budget, read_conc, write_conc) -> tuple[int, ...] | None:
    """The unit shape (a multiple of ``align`` per dimension, or the whole extent) that
    fits ``budget`` with the least read amplification, then the fewest units.

    Greedy: start at one aligned block; repeatedly double the dimension whose growth
    lowers (amplification, unit count) the most while the memory still fits.
    Returns None when even one aligned block does not fit.
    """
    align = _clip(align, shape)
    read_block = _clip(read_block, shape)
    unit = list(align)

    def memory(u):
        return unit_memory(u, read_block, align, itemsize, read_conc, write_conc, shape)

    if memory(unit) > budget:
        return None

    def score(u):
        n_units = math.prod(-(-n // x) for n, x in zip(shape, u))
        return (round(read_amplification(shape, read_block, u), 6), n_units)

    def fit(i, size):
        """``size`` along i if it fits, else the largest aligned size between unit[i] and it that does."""
        candidate = unit.copy()
        candidate[i] = size
        if memory(candidate) <= budget:
            return size
        lo, hi = unit[i] // align[i], -(-size // align[i])
        while hi - lo > 1:
            mid = (lo + hi) // 2
            candidate[i] = min(shape[i], mid * align[i])
            if memory(candidate) <= budget:
                lo = mid
            else:
                hi = mid
        return min(shape[i], lo * align[i])

    def aligned_up(i, size):
        """The smallest multiple of align[i] that is >= size, or the whole extent."""
        size = -(-size // align[i]) * align[i]
        return shape[i] if size >= shape[i] else size

    while True:
        current = score(unit)
        best = None
        for i, n in enumerate(shape):
            if unit[i] >= n:
                continue
            # Candidates along i: double; or reach the end of the next read block
            # (units that end on read-chunk boundaries do not re-decode them).
            next_read_edge = (unit[i] // read_block[i] + 1) * read_block[i]
            for size in {aligned_up(i, unit[i] * 2), aligned_up(i, next_read_edge)}:
                size = fit(i, size)
                if size <= unit[i]:
                    continue
                candidate = unit.copy()
                candidate[i] = size
                s = score(candidate)
                if best is None or s < best[0]:
                    best = (s, candidate)
        if best is None or best[0] >= current:
            return tuple(unit)
        unit = best[1]


def _stage(index, reads, writes, shape, read_block, write_block, itemsize, budget, read_limit=MAX_IO_CONCURRENCY) -> Stage | None:
    read_block = _clip(read_block, shape)
    write_block = _clip(write_block, shape)
    read_conc = _concurrency(budget, math.prod(read_block) * itemsize, read_limit)
    write_conc = _concurrency(budget, math.prod(write_block) * itemsize)
    # Concurrency only hides latency; it must not cost read amplification. Try the
    # chosen concurrency and one block in flight, keep the better unit (ties: more
    # concurrency). One block in flight each way is the last resort.
    options = []
    for rc, wc in dict.fromkeys(((read_conc, write_conc), (1, write_conc), (read_conc, 1), (1, 1))):
        unit = grow_unit(shape, write_block, read_block, itemsize, budget, rc, wc)
        if unit is not None:
            score = (round(read_amplification(shape, read_block, unit), 6), math.prod(-(-n // u) for n, u in zip(shape, unit)))
            options.append((score, -(rc * wc), rc, wc, unit))
    if options:
        _, _, rc, wc, unit = min(options)
        return Stage(
                index=index,
                reads=reads,
                writes=writes,
                read_block=read_block,
                write_block=write_block,
                unit_shape=unit,
                read_concurrency=rc,
                write_concurrency=wc,
                unit_memory=unit_memory(unit, read_block, write_block, itemsize, rc, wc, shape),
                read_amplification=read_amplification(shape, read_block, unit),
            )
    return None


def _direct_cost(stage: Stage) -> float:
    return stage.read_amplification * COST_SOURCE_DECODE + COST_TARGET_ENCODE


def _two_stage_cost(first: Stage, second: Stage) -> float:
    return (
        first.read_amplification * COST_SOURCE_DECODE
        + COST_INTERMEDIATE
        + second.read_amplification * COST_INTERMEDIATE
        + COST_TARGET_ENCODE
    )


def minimum_memory(spec: ArraySpec) -> int:
    """The smallest bound a plan can satisfy: one unit of one write block, one block in flight each way."""
    shape = spec.shape
    return unit_memory(spec.write_block, spec.source_chunks, spec.write_block, spec.itemsize, 1, 1, shape)


def plan_array(spec: ArraySpec, max_mem: int, source_concurrency: int = MAX_IO_CONCURRENCY) -> ArrayPlan:
    """Plan the copy of one array under ``max_mem`` bytes per work unit.

    ``source_concurrency`` is how many source chunks the reader decodes at once
    (1 for HDF5 through h5py, which reads synchronously; more for Zarr sources).
    """
    shape = spec.shape
    if any(n == 0 for n in shape):
        # Nothing to copy: metadata only.
        return ArrayPlan(spec=spec, stages=(), units=())
    direct = _stage(0, "source", "target", shape, spec.source_chunks, spec.write_block, spec.itemsize, max_mem, source_concurrency)
    if direct is None:
        raise PlanError(
            f"{spec.name}: --max-mem {max_mem} B is below what one work unit needs "
            f"({minimum_memory(spec)} B: one {'shard' if spec.target_shards else 'chunk'} "
            f"{list(_clip(spec.write_block, shape))} plus one source chunk {list(_clip(spec.source_chunks, shape))}); "
            "raise --max-mem or choose smaller chunks/shards"
        )
    if direct.read_amplification <= 1.0 + 1e-9:
        return _with_units(ArrayPlan(spec=spec, stages=(direct,)))

    # A direct copy would have to re-decode source chunks: see if an intermediate helps.
    # Stage 0 reads whole source chunks (units aligned to them), stage 1 writes whole
    # target blocks; the intermediate chunk is their element-wise minimum, kept so
    # that stage-0 units are whole multiples of it (they own the chunks they write).
    # Both sides are sized with a quarter of the bound held back for the
    # intermediate blocks in flight, so the real stages can reach the same units.
    reserve = max_mem * 3 // 4
    read_side = _stage(
        0, "source", "intermediate", shape, spec.source_chunks, spec.source_chunks, spec.itemsize, reserve, source_concurrency
    )
    write_side = _stage(1, "intermediate", "target", shape, spec.source_chunks, spec.write_block, spec.itemsize, reserve)
    best = ArrayPlan(spec=spec, stages=(direct,))
    if read_side is not None and write_side is not None:
        u0 = list(read_side.unit_shape)
        u1 = list(write_side.unit_shape)
        inter = []
        for i, n in enumerate(shape):
            if u1[i] <= u0[i]:
                inter.append(u1[i])
                if u0[i] < n:
                    u0[i] = max(u1[i], u0[i] // u1[i] * u1[i])
            else:
                inter.append(u0[i])
        inter = tuple(_clip(inter, shape))
        first = _stage(0, "source", "intermediate", shape, spec.source_chunks, inter, spec.itemsize, max_mem, source_concurrency)
        second = _stage(1, "intermediate", "target", shape, inter, spec.write_block, spec.itemsize, max_mem)
        if first is not None and second is not None and _two_stage_cost(first, second) < _direct_cost(direct):
            best = ArrayPlan(spec=spec, stages=(first, second), intermediate_chunks=inter)
    return _with_units(best)


def _with_units(plan: ArrayPlan) -> ArrayPlan:
    units = []
    for stage in plan.stages:
        for start, stop in tile(plan.spec.shape, stage.unit_shape):
            units.append({"variable": plan.spec.name, "stage": stage.index, "start": start, "stop": stop})
    return ArrayPlan(spec=plan.spec, stages=plan.stages, intermediate_chunks=plan.intermediate_chunks, units=tuple(units))


def tile(shape, unit) -> list[tuple[list[int], list[int]]]:
    """The regions ``[start, stop)`` of a grid of ``unit`` blocks over ``shape``, in C order."""
    unit = _clip(unit, shape)
    counts = [-(-n // u) for n, u in zip(shape, unit)]
    regions = []
    for flat in range(math.prod(counts)):
        index = []
        for count in reversed(counts):
            index.append(flat % count)
            flat //= count
        index.reverse()
        start = [i * u for i, u in zip(index, unit)]
        stop = [min(n, s + u) for s, u, n in zip(start, unit, shape)]
        regions.append((start, stop))
    return regions


# --- choosing target chunks -------------------------------------------------------

SEED_TIME = (1, 6, 12, 24, 48, 120, 720, 1440, 2160, None)  # None = the full extent
SEED_SPACE = (10, 50, 100, None)
SEED_SHAPE = (5136, 721, 1152)  # time, lat, lon of the GEOS-FP set Nguyen et al. rechunked


def auto_chunks(shape, itemsize: int, target_bytes: int) -> tuple[int, ...]:
    """A balanced chunk shape of about ``target_bytes``: the same fraction of every
    dimension (so no access direction is favoured), whole extents where that
    fraction would exceed them, the remaining budget spread over the others."""
    shape = tuple(int(n) for n in shape)
    if not shape:
        return ()
    target_elements = max(1, target_bytes // max(1, itemsize))
    free = [i for i, n in enumerate(shape) if n > 1]
    chunks = [1 if n <= 1 else n for n in shape]
    if math.prod(shape) <= target_elements:
        return tuple(max(1, n) for n in shape)
    while free:
        fixed = math.prod(chunks[i] for i in range(len(shape)) if i not in free)
        budget = target_elements / max(1, fixed)
        fraction = (budget / math.prod(shape[i] for i in free)) ** (1.0 / len(free))
        capped = [i for i in free if shape[i] * fraction >= shape[i]]
        if not capped:
            for i in free:
                chunks[i] = max(1, min(shape[i], round(shape[i] * fraction)))
            break
        for i in capped:
            chunks[i] = shape[i]
        free = [i for i in free if i not in capped]
    return tuple(chunks)


def seed_grid(shape, mode: str = "clip") -> list[tuple[int, int, int]]:
    """Nguyen et al.'s grid (time 1,6,...,2160,full x lat/lon 10,50,100,full) for ``shape``.

    ``mode="clip"`` (default) keeps the paper's element counts and collapses
    values at or above a dimension's extent into "full": chunk byte sizes stay
    those of the paper, which is what its findings (e.g. fastest near 3.3 MB)
    are about, and time chunks keep their meaning in hours.
    ``mode="proportional"`` scales each value v by n / L (L the paper's extent,
    at least 1): the same *fraction* of every dimension per chunk.
    Duplicates collapse; the order is time-major.
    """
    if mode not in ("clip", "proportional"):
        raise ValueError(f"seed grid mode must be 'clip' or 'proportional', not {mode!r}")
    nt, nlat, nlon = (int(n) for n in shape)

    def scaled(values, n, full):
        out = []
        for v in values:
            if v is None:
                c = n
            elif mode == "clip":
                c = min(n, v)
            else:
                c = max(1, min(n, round(v * n / full)))
            if c not in out:
                out.append(c)
        return out

    times = scaled(SEED_TIME, nt, SEED_SHAPE[0])
    lats = scaled(SEED_SPACE, nlat, SEED_SHAPE[1])
    lons = scaled(SEED_SPACE, nlon, SEED_SHAPE[2])
    return [(t, la, lo) for t in times for la in lats for lo in lons]


# --- bounded work: what the declared shapes would make, before anything is written ----------------

class OutputTooLarge(PlanError):
    """The arrays a file declares would make more objects or bytes than this environment allows."""


def output_objects(spec: ArraySpec) -> int:
    """Objects the target array is stored in: one per chunk (or shard, when sharded) of its grid, plus its
    metadata document. Chunks that hold only the fill value may be left out by the writer; a bound
    counts them, since reading and comparing them is the work."""
    if not spec.shape:
        return 2  # a scalar: one chunk and the metadata
    if any(n == 0 for n in spec.shape):
        return 1
    return 1 + math.prod(-(-n // max(1, min(b, n))) for n, b in zip(spec.shape, spec.write_block))


class OutputTally:
    """Running totals of objects and declared bytes over the arrays of one conversion, refused past the bounds.

    Add each array before planning or writing it: the refusal comes before the first byte is written
    and before a plan tiles an absurd shape into units.
    """

    def __init__(self, max_objects: int, max_bytes: int, why_bytes: str = ""):
        self.max_objects, self.max_bytes, self.why_bytes = max_objects, max_bytes, why_bytes
        self.objects = 0
        self.bytes = 0

    def add(self, spec: ArraySpec) -> None:
        self.objects += output_objects(spec)
        self.bytes += spec.nbytes
        shape = "x".join(str(n) for n in spec.shape) or "scalar"
        where = f"{spec.name} ({shape} of {spec.itemsize}-byte items)"
        if self.objects > self.max_objects:
            raise OutputTooLarge(
                f"{where} brings the copy to {self.objects:,} objects (chunks or shards of "
                f"{list(spec.write_block)}), over this environment's ceiling max_objects_per_variant = "
                f"{self.max_objects:,}: choose larger chunks or shards")
        if self.bytes > self.max_bytes:
            raise OutputTooLarge(
                f"{where} brings the copy to {self.bytes:,} bytes uncompressed from the shapes the file "
                f"declares, over this environment's bound of {self.max_bytes:,} bytes{self.why_bytes}")


def output_tally(ceilings, input_bytes: int | None) -> OutputTally:
    """The tally of one conversion of an input of ``input_bytes`` stored (None when unknown) under ``ceilings``
    (``layoutlab.ceilings.Ceilings``)."""
    from layoutlab.ceilings import ENV_VARIABLE, EXPANSION_FLOOR_BYTES

    bound = ceilings.max_declared_bytes(input_bytes)
    if bound == ceilings.max_variant_bytes:
        why = f" (ceiling max_variant_bytes; {ENV_VARIABLE})"
    else:
        why = (f" (ceiling max_expansion = {ceilings.max_expansion:g} x the {input_bytes:,}-byte input, at least "
               f"{EXPANSION_FLOOR_BYTES:,}; {ENV_VARIABLE})")
    return OutputTally(ceilings.max_objects_per_variant, bound, why)
