"""``original``: the upload itself, read as it is (the baseline every other variant is compared with)."""

from __future__ import annotations

from layoutlab.kinds._base import VariantKind


class Original(VariantKind):
    name = "original"
    listed = 1
    format = "hdf5"
    converted = False  # its VARIANT item is written by the plan step; its uri is the upload's, version pinned

    def gives_name(self, name):
        return name == self.name

    def make_steps(self, variant, item, variants, steps_of):
        return {"kind": self.name, "commands": [], "note": "keep the file as it is: no conversion, no extra storage"}


KIND = Original()
