"""Sizes in bytes as people write them ("8MiB", "4 MB", "65536"): the one parser every option, plan
field and setting uses, so a size means the same everywhere (KiB/MiB/GiB are powers of 2, KB/MB/GB of 10)."""

from __future__ import annotations

import numbers
import re

from layoutlab.errors import UserError

UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
         "g": 10**9, "gb": 10**9, "gib": 2**30}
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*")


class SizeError(UserError, ValueError):
    """Not a size (a UserError for the CLI, a ValueError for code that validates plans)."""


def parse_size(text: str | int, what: str = "size") -> int:
    """``"8MiB"`` -> 8388608, ``"4MB"`` -> 4000000; integers pass through. ``what`` names the setting in errors."""
    if isinstance(text, numbers.Integral) and not isinstance(text, bool):
        return int(text)
    match = _SIZE.fullmatch(str(text))
    if not match or match.group(2).lower() not in UNITS:
        raise SizeError(f"{what}: not a size: {text!r} (e.g. 8MiB, 4MB, 65536)")
    return int(float(match.group(1)) * UNITS[match.group(2).lower()])


def size_label(n: int) -> str:
    """8388608 -> "8MiB": the largest binary unit that divides ``n``, else bytes."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}B"
