"""``virtual-kerchunk``: kerchunk references (JSON, Zarr format 3) over the original and/or over each paged
copy (``over``: original, paged or all); no chunk data copied. References over a paged copy are named
``kerchunk-<paged name>`` and built by that copy's convert task once it has published it."""

from __future__ import annotations

from layoutlab.kinds._recipe import pins
from layoutlab.kinds._references import ORIGINAL, ReferencesKind

REFERENCE_FORMATS = ("json",)  # Parquet needs fastparquet, which the layer does not carry


class VirtualKerchunk(ReferencesKind):
    name = "virtual-kerchunk"
    listed = 5
    format = "kerchunk"
    suffix = ".json"
    options = {"over": {"enum": [ORIGINAL, "paged", "all"]}, "references": {"type": "string", "maxLength": 32}}

    def check(self, entry, where):
        if entry.get("references", "json") not in REFERENCE_FORMATS:
            raise ValueError(f"{where}.references {entry.get('references')!r}: only json is supported "
                             "(kerchunk Parquet needs fastparquet, which is not in the Lambda layer)")

    def expand(self, entry, facts):
        if entry.get("over", "all") in (ORIGINAL, "all"):
            return [{**entry, "name": "kerchunk-original", "format": self.format, "over": ORIGINAL}]
        return []

    def expand_after(self, entry, made):
        from layoutlab.kinds import get

        if entry.get("over", "all") not in ("paged", "all"):
            return []
        return [{**entry, "name": f"kerchunk-{paged['name']}", "format": self.format, "over": paged["name"]}
                for paged in made if get(paged["kind"]).paged]

    def bound_formats(self, entry, paged):
        over = entry.get("over", "all")
        return [self.format] * ((over in (ORIGINAL, "all")) + paged * (over in ("paged", "all")))

    def built_by(self, spec):
        return spec.get("over") if spec.get("over") not in (None, ORIGINAL) else None

    def write(self, layout, spec, s3, etag):
        from layoutlab.convert import virtual

        return {"references": spec.get("references", "json"),
                "references_bytes": virtual.write_kerchunk(layout, spec["uri"], s3)}

    def recipe(self, variant, spec, item, local, source, plain):
        python = ("from layoutlab.convert import virtual\n"
                  f'layout = virtual.build_layout("{local}", "{source}")  # references name {source}\n'
                  f'virtual.write_kerchunk(layout, "s3://OUT_BUCKET/{variant}.json", boto3.client("s3"))\n'
                  "# nearest plain VirtualiZarr (one group at a time; inlines nothing it cannot reference):\n"
                  f'{plain}\nvds.vz.to_kerchunk("{variant}.json", format="{spec.get("references", "json")}", '
                  "zarr_format=3)")
        return (pins(item, ("virtualizarr", "obspec-utils", "kerchunk")), python,
                "kerchunk references in Zarr format 3, no chunk data copied")


KIND = VirtualKerchunk()
