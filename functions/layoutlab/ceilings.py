"""Cost ceilings: how much work one upload may ask for, per environment.

An upload is not trusted: its plan (``layoutlab-plan``) and the shapes its file declares decide
how many benchmark cases run and how many objects and bytes a conversion writes. Every such
number has a ceiling here. The pipeline refuses a plan over one at ingest (``pipeline/plan.py``),
before anything starts, and a conversion refuses a file whose declared shapes would exceed one
before it writes anything (``convert/rechunk_plan.py``), with one line naming the field, the
estimate and the ceiling.

The numbers are per environment: ``cdk.json`` (``layoutlab:environments.<env>.ceilings``) gives
them to every function and task as JSON in ``LAYOUTLAB_CEILINGS`` (keys not given keep the
defaults below); the local run takes the ``dev`` environment's. The CLI (``layoutlab rechunk``)
reads the same variable, with the defaults when it is unset.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

from layoutlab.errors import UserError

ENV_VARIABLE = "LAYOUTLAB_CEILINGS"
# Whatever its compression, an input may always declare this much: small files are cheap to convert
# whatever their ratio, and the expansion ceiling is about small uploads declaring huge arrays.
EXPANSION_FLOOR_BYTES = 2**30
# Pages up to this size are allowed whatever the input's size: it is repack-paged's default page size
# (docs/pipeline-and-plans.md), so a small file keeps the plans written for big ones, at a bounded cost
# (a paged copy of a tiny file is a few such pages). Above it, a page may be at most
# max_page_size_input_ratio x the input.
PAGE_SIZE_ALWAYS_ALLOWED = 8 * 2**20


class CeilingError(UserError):
    """A request over one of this environment's ceilings; the message names the field, the estimate and the ceiling."""


@dataclass(frozen=True)
class Ceilings:
    # benchmark cases one upload may run, every repetition round included (variants x patterns x readers x
    # platforms x max_repetitions, plus the scaling study's workers)
    max_cases: int = 20_000
    # variants one plan resolves to (a virtual-kerchunk entry over "all" counts once per paged variant, plus one)
    max_variants: int = 16
    # repetitions of one case, every round included (plans' own limit is 100)
    max_repetitions: int = 100
    # the largest worker count N of a scaling study (N cases side by side)
    max_scaling_workers: int = 256
    # a rechunk-zarr / icechunk chunk must hold at least this many elements (or the whole array): a floor
    # against one object per element ([1, 1, 1]); the cost of many objects is max_objects_per_variant's
    min_chunk_elements: int = 16
    # objects (chunks, or shards when sharded) one Zarr / Icechunk variant may write
    max_objects_per_variant: int = 1_000_000
    # uncompressed bytes one conversion may write, from the shapes the file declares
    max_variant_bytes: int = 2**40
    # uncompressed bytes one benchmark case's pattern reads, from the shapes the file declares (a whole-array
    # pattern over a grid declaring terabytes was bounded only by the case timeout x max_cases)
    max_case_read_bytes: int = 16 * 2**30
    # declared uncompressed bytes per stored input byte (above EXPANSION_FLOOR_BYTES)
    max_expansion: float = 1000.0
    # an explicit page size above PAGE_SIZE_ALWAYS_ALLOWED may be at most this times the input's size (a page
    # larger than the file only pads it: 1 GiB pages turned a 28,925-byte upload into a 2 GiB variant)
    max_page_size_input_ratio: float = 1.0

    @classmethod
    def from_mapping(cls, mapping, where: str = ENV_VARIABLE) -> "Ceilings":
        """The defaults with ``mapping``'s values; unknown keys and non-positive numbers are refused by name."""
        if not isinstance(mapping, dict):
            raise UserError(f"{where}: ceilings must be a JSON object, got {type(mapping).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(mapping) - set(known))
        if unknown:
            raise UserError(f"{where}: unknown ceiling(s) {', '.join(unknown)} (known: {', '.join(known)})")
        values = {}
        for name, value in mapping.items():
            kind = float if known[name].type in (float, "float") else int
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or (
                    kind is int and value != int(value)):
                raise UserError(f"{where}: ceiling {name} must be a positive {'number' if kind is float else 'integer'}, "
                                f"got {value!r}")
            values[name] = kind(value)
        return cls(**values)

    @classmethod
    def from_json(cls, text: str, where: str = ENV_VARIABLE) -> "Ceilings":
        try:
            mapping = json.loads(text)
        except ValueError as error:
            raise UserError(f"{where}: not JSON: {error}") from None
        return cls.from_mapping(mapping, where)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    def max_page_size(self, input_bytes: int) -> int:
        """The largest explicit page size for an input of ``input_bytes``."""
        return max(PAGE_SIZE_ALWAYS_ALLOWED, int(input_bytes * self.max_page_size_input_ratio))

    def max_declared_bytes(self, input_bytes: int | None) -> int:
        """Uncompressed bytes a conversion of an input of ``input_bytes`` may write (None: size unknown)."""
        if not input_bytes:
            return self.max_variant_bytes
        return min(self.max_variant_bytes, max(EXPANSION_FLOOR_BYTES, int(input_bytes * self.max_expansion)))


def over(field: str, what: str, estimate, name: str, ceiling, *, below: bool = False, note: str = "") -> CeilingError:
    """The one-line refusal: the field at fault, the estimate, and which ceiling (or minimum) it breaks."""
    def number(value):
        return f"{value:,}" if isinstance(value, int) else f"{value:g}"

    relation = "is under this environment's minimum" if below else "is over this environment's ceiling"
    where = f"cdk.json ceilings, {ENV_VARIABLE}" + (f"; {note}" if note else "")
    return CeilingError(f"{field}: {what} {number(estimate)} {relation} {name} = {number(ceiling)} ({where})")
