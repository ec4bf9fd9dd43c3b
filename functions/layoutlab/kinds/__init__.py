"""Variant kinds: one module per kind, and the registry that finds them.

A variant kind (``repack-paged``, ``rechunk-zarr``, ``virtual-kerchunk``...) is everything layoutlab
knows of one way of laying a dataset out: the fields its plan entry takes (a JSON Schema fragment,
validated with the rest of the plan), the variants an entry expands to for a dataset, how one is
made, what must stay stored to read it, the recipe that makes it again, and its format (which picks
the readers that open it). Each lives in one module of this package defining ``KIND``, a
``VariantKind``; ``registry()`` imports every module whose name does not start with ``_`` (those
hold what kinds share), so a new kind is one new module and its tests.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from layoutlab.kinds._base import ConvertContext, VariantKind

# what a plan entry's ``applies_to`` may name: the samples' kinds, or a role of the structure model
APPLIES_TO = ("grid", "granule", "table", "swath")

__all__ = ["APPLIES_TO", "ConvertContext", "VariantKind", "entry_schema", "get", "kind_of", "kind_of_item", "names", "registry"]


@functools.cache
def registry() -> dict[str, VariantKind]:
    """Every kind by name, in the order ``listed`` (each module of this package that defines ``KIND``)."""
    found: list[VariantKind] = []
    for module in pkgutil.iter_modules(__path__):
        if module.name.startswith("_"):
            continue
        kind = getattr(importlib.import_module(f"{__name__}.{module.name}"), "KIND", None)
        if not isinstance(kind, VariantKind):
            raise TypeError(f"layoutlab/kinds/{module.name}.py defines no KIND (a VariantKind)")
        found.append(kind)
    found.sort(key=lambda k: k.listed)
    names_seen = [k.name for k in found]
    if len(set(names_seen)) != len(names_seen):
        raise TypeError(f"two modules of layoutlab/kinds define the same kind: {names_seen}")
    return {k.name: k for k in found}


def names() -> tuple[str, ...]:
    return tuple(registry())


def get(name: str) -> VariantKind:
    try:
        return registry()[name]
    except KeyError:
        raise KeyError(f"unknown variant kind {name!r}; known: {', '.join(registry())}") from None


def kind_of_item(item: dict | None) -> VariantKind | None:
    """The kind a VARIANT item records (``variant_kind``, else its spec's ``kind``); None when it records none
    or one this code does not know."""
    item = item or {}
    return registry().get(item.get("variant_kind") or (item.get("spec") or {}).get("kind"))


def kind_of(name: str, item: dict | None) -> VariantKind | None:
    """The kind of variant ``name``: the one its VARIANT item records; for a variant with no item recording one
    (measured with ``layoutlab bench --variant NAME``, outside the pipeline) the kind that gives such names."""
    kind = kind_of_item(item)
    if kind is not None or (item or {}).get("variant_kind") or ((item or {}).get("spec") or {}).get("kind"):
        return kind
    return next((k for k in registry().values() if k.gives_name(name)), None)


def entry_schema() -> dict:
    """The JSON Schema of a plan's variant entry: ``kind`` one of the kinds, each field any kind takes
    (in the order the kinds are listed), the fields a kind requires required when that kind is named."""
    properties: dict = {"kind": {"enum": list(names())}, "applies_to": {"enum": list(APPLIES_TO)}}
    required_when = []
    for kind in registry().values():
        for field, schema in kind.options.items():
            if properties.setdefault(field, schema) != schema:
                raise TypeError(f"variant kind {kind.name!r} defines field {field!r} unlike another kind")
        if kind.required:
            required_when.append({"if": {"properties": {"kind": {"const": kind.name}}},
                                  "then": {"required": list(kind.required)}})
    schema = {"type": "object", "required": ["kind"], "additionalProperties": False, "properties": properties}
    if required_when:
        schema["allOf"] = required_when
    return schema
