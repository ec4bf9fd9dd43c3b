"""``VariantKind``: what every kind of variant answers (after VirtualiZarr's ``Parser`` and xarray's
``BackendEntrypoint``: one object per way of laying a dataset out, asked the same questions)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from layoutlab.ceilings import Ceilings

# The JSON Schema of a size in a plan entry (page_size, target_chunk_bytes, max_mem...).
SIZE = {
    "description": "a size: bytes as a positive integer, or a string like 8MiB, 4MB, 65536",
    "anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "minLength": 1, "maxLength": 32}],
}


@dataclasses.dataclass(frozen=True)
class ConvertContext:
    """What a conversion may use besides its task: the platform's memory and this environment's ceilings."""

    memory_mb: int | None
    ceilings: Ceilings


class VariantKind:
    """One kind of variant (the ``kind`` of a plan's variant entry and of a VARIANT item's ``variant_kind``).

    A module of ``layoutlab.kinds`` defines ``KIND``, an instance of a subclass; the registry
    (``layoutlab.kinds.registry``) finds it. Defaults fit a copy of the data made in one conversion.
    """

    name: ClassVar[str]  # the plan's "kind"
    listed: ClassVar[int]  # where it stands in lists (plan errors, docs): the order kinds were added
    format: ClassVar[str]  # what readers open it: "hdf5" | "zarr" | "kerchunk" | "icechunk" (plan.READERS_BY_FORMAT)
    suffix: ClassVar[str] = ""  # of the variant's key under variants/<dataset>/
    options: ClassVar[dict] = {}  # the JSON Schema of each field its plan entry takes, besides kind and applies_to
    required: ClassVar[tuple[str, ...]] = ()  # fields its plan entry must give
    converted: ClassVar[bool] = True  # False: the variant is the upload itself, nothing is made
    one_object: ClassVar[bool] = True  # False: many objects under the variant's prefix (a store, a repository)
    virtual: ClassVar[bool] = False  # references read through another object, which must stay stored too
    paged: ClassVar[bool] = False  # paged HDF5: references may be built over it, its size budget is flagged
    needs_grid: ClassVar[bool] = False  # made only for a gridded (time, lat, lon) dataset
    fans_out: ClassVar[bool] = False  # a big one is written by work units in parallel, then published
    # True: its conversion (and its work units) read the upload's values in a worker process confined to its
    # scratch folder (pipeline/variants.py, layoutlab/sandbox.py); False: the kind confines its own readers
    # (repack-paged's guarded children) or reads no value (original)
    reads_in_worker: ClassVar[bool] = False

    # --- the plan ---------------------------------------------------------------------------------

    def needs(self, entry: dict) -> str | None:
        """The dataset kind or role an entry of this kind is made for (``grid``, ``table``, ``swath``), None for
        any file: what the plan's case bound counts it for."""
        return "grid" if self.needs_grid else None

    def check(self, entry: dict, where: str) -> None:
        """Raise ``ValueError`` (its text starts with the field, ``variants[0].page_size ...``) for what
        the schema cannot say of ``entry``."""

    def check_ceilings(self, entry: dict, where: str, ceilings: Ceilings, input_bytes: int | None) -> None:
        """Raise ``CeilingError`` when ``entry`` asks for more than ``ceilings`` allow, before the file is read."""

    def check_dataset_ceilings(self, spec: dict, facts, ceilings: Ceilings) -> None:
        """Raise ``CeilingError`` when ``spec`` (resolved for a dataset of ``facts``) exceeds ``ceilings``."""

    def expand(self, entry: dict, facts) -> list[dict]:
        """The variant specs ``entry`` gives a dataset of ``facts`` (``DatasetFacts``): each a copy of the entry
        with its resolved ``name`` and ``format``; [] when it does not apply."""
        return [{**entry, "name": self.name, "format": self.format}]

    def expand_after(self, entry: dict, made: list[dict]) -> list[dict]:
        """Specs ``entry`` gives over the variants ``made`` from the whole plan (references over each paged copy)."""
        return []

    def bound_formats(self, entry: dict, paged: int) -> list[str]:
        """The formats of the variants ``entry`` can resolve to, ``paged`` paged variants planned (case bound)."""
        return [self.format]

    def built_by(self, spec: dict) -> str | None:
        """The variant whose convert task builds ``spec`` right after publishing itself, or None (its own task)."""
        return None

    def reader_options(self, spec: dict) -> dict:
        """What a benchmark case's reader must know of the variant (the page size of a paged copy)."""
        return {}

    # --- the convert step -------------------------------------------------------------------------

    def convert(self, spec: dict, source: dict, s3, context: ConvertContext) -> dict:
        """Make the variant ``spec`` at its ``uri`` from the object ``source`` (``bucket``, ``key``, ``version_id``?:
        the upload, or the variant references are built over); returns what the VARIANT item records."""
        raise NotImplementedError(f"variant kind {self.name!r} is not converted")

    # --- the report ------------------------------------------------------------------------------

    def reads_through(self, item: dict) -> str | None:
        """The variant whose bytes this one's references point at (None for a copy or the original)."""
        return None

    def gives_name(self, name: str) -> bool:
        """``name`` is one this kind gives its variants: how a variant is known when no VARIANT item records its
        kind (results measured with ``layoutlab bench --variant NAME``, outside the pipeline); the pipeline's
        records always carry the kind."""
        return False

    def make_steps(self, variant: str, item: dict, variants: dict, steps_of) -> dict:
        """How to make ``variant`` (VARIANT item ``item``) from the upload: commands, Python, a note.
        ``steps_of(name)`` gives another variant's steps (references over a paged copy start with the copy's)."""
        spec = item.get("spec") or {}
        return {"kind": self.name, "commands": [], "spec": {k: v for k, v in spec.items() if k != "uri"}}

    def __repr__(self) -> str:
        return f"<variant kind {self.name}>"
