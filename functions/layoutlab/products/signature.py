"""Which product a granule belongs to.

Named by its uploader (``incoming/<product>/<file>`` or the object metadata ``layoutlab-product``), or
recognised by its structure: the signature is a digest of what the structure model
(``layoutlab.structure``) says the file holds — each numeric array's path, dtype and dimension *names*,
the units' roles — and never a length, so two granules of one product (another day, another orbit,
more or fewer rows) share it, and two products (another variable, another group, another type) do not.
"""

from __future__ import annotations

import hashlib
import json
import re

PRODUCT_METADATA_KEY = "layoutlab-product"
INCOMING = "incoming/"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SIGNATURE_PREFIX = "sig-"
_DIGEST_CHARS = 16
# a dimension without a scale is named by its length (structure._dimension_names): not part of a signature
_PHONY = re.compile(r"phony_dim_\d+$")


class ProductNameError(ValueError):
    """A product name that cannot be a key part (one line, naming the name and the rule)."""


def check_name(name: str, where: str = "product name") -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ProductNameError(f"{where} {name!r}: 1-64 letters, digits, '.', '_' or '-', starting with a letter "
                               f"or digit")
    return name


def named_product(key: str, metadata: dict | None = None) -> str | None:
    """The product its uploader named: object metadata ``layoutlab-product`` first (refused when not a valid
    name), else the first folder under ``incoming/`` when the key has one whose name can be a product's
    (``incoming/<product>/<file>``); None when neither."""
    given = (metadata or {}).get(PRODUCT_METADATA_KEY)
    if given:
        return check_name(given, f"metadata '{PRODUCT_METADATA_KEY}'")
    if key.startswith(INCOMING):
        parts = key[len(INCOMING):].split("/")
        # (a folder whose name cannot be a product's, e.g. non-ASCII, is just a folder: no product)
        if len(parts) >= 2 and parts[0] and _NAME.match(parts[0]):
            return parts[0]
    return None


def signature_fields(structure) -> dict:
    """What the signature is made of: groups, arrays (path, dtype, dimension names), unit roles — no lengths."""
    arrays = sorted((a.path, a.dtype, [_PHONY.sub("phony_dim", d) for d in a.dims]) for a in structure.arrays.values())
    groups = sorted({a.group for a in structure.arrays.values()})
    roles = sorted({(u.role, u.where) for u in structure.units})
    return {"arrays": [list(a) for a in arrays], "groups": groups, "roles": [list(r) for r in roles],
            "non_numeric": int(structure.non_numeric)}


def structure_signature(structure) -> str:
    """``sig-<16 hex>``: a digest of ``signature_fields`` (stable across granules of one product)."""
    text = json.dumps(signature_fields(structure), sort_keys=True, separators=(",", ":"))
    return SIGNATURE_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:_DIGEST_CHARS]


def file_signature(location: str) -> str:
    """The signature of the file at ``location`` (a path or s3:// URL): its metadata only."""
    from layoutlab.structure import file_structure

    return structure_signature(file_structure(location))
