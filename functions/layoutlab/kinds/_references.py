"""What the kinds of references share (``virtual-kerchunk``, ``icechunk-virtual``): the layout of the
original (or of a paged copy) read from a scratch copy, references naming the object in S3 (pinned to
its version in kerchunk's URLs, to its ETag in Icechunk's checksums). No chunk data is copied."""

from __future__ import annotations

import tempfile
import time

from layoutlab.kinds._base import VariantKind

ORIGINAL = "original"

# The nearest plain VirtualiZarr, in a recipe (one group at a time; it inlines nothing it cannot reference).
PLAIN_VIRTUALIZARR = ('import obstore, virtualizarr as vz\n'
                      'from obspec_utils.registry import ObjectStoreRegistry\n'
                      'from virtualizarr.parsers import HDFParser\n'
                      'registry = ObjectStoreRegistry({"s3://BUCKET": obstore.store.S3Store("BUCKET")})\n'
                      'vds = vz.open_virtual_dataset("{source}", registry=registry, parser=HDFParser(group=GROUP))')


def _record_note(item: dict) -> str | None:
    record = item.get("virtual") or {}
    if not record:
        return None
    inlined, skipped = record.get("inlined") or [], record.get("skipped") or []
    packed = [p for p in record.get("packed") or [] if p.get("kept") == "inlined"]
    note = (f"{record.get('virtual_arrays', '?')} arrays referenced ({record.get('virtual_chunks', '?')} chunks), "
            f"{len(inlined)} inlined, {len(skipped)} skipped")
    if packed:
        note += f" ({len(packed)} packed variables inlined: VirtualiZarr #1004/#1059)"
    return note + "; the reasons are listed in the VARIANT item's 'virtual' record"


class ReferencesKind(VariantKind):
    virtual = True
    reads_in_worker = True
    one_object = True

    def write(self, layout, spec: dict, s3, etag: str | None) -> dict:
        """Write the references of ``layout`` at ``spec["uri"]``; what the VARIANT item records of them."""
        raise NotImplementedError

    def recipe(self, variant: str, spec: dict, item: dict, local: str, source: str, plain: str) -> tuple[str, str, str]:
        """(pip pins, Python, note) of the recipe that writes these references."""
        raise NotImplementedError

    def convert(self, spec, source, s3, context):
        """References over ``source``: the original, or the paged variant just published."""
        from layoutlab import storage
        from layoutlab.convert import virtual
        from layoutlab.kinds._transfer import download

        head = s3.head_object(Bucket=source["bucket"], Key=source["key"],
                              **({"VersionId": source["version_id"]} if source.get("version_id") else {}))
        url = storage.versioned_url(source["bucket"], source["key"], source.get("version_id"))
        with tempfile.TemporaryDirectory(prefix="layoutlab-virtual-") as scratch:
            local = download(s3, source, scratch)
            started = time.perf_counter()
            layout = virtual.build_layout(str(local), url)
            parse_s = time.perf_counter() - started
            written = self.write(layout, spec, s3, head.get("ETag"))
        return {"virtual": {**layout.record(), **written, "parse_s": parse_s, "over": url,
                            "source_etag": head.get("ETag"), "source_version_id": source.get("version_id")}}

    def reads_through(self, item):
        return ((item or {}).get("spec") or {}).get("over") or ORIGINAL

    def make_steps(self, variant, item, variants, steps_of):
        """References over the original or over a paged copy: layoutlab's call that made them, and the
        nearest plain VirtualiZarr/Icechunk; over a paged copy, the copy's own steps first."""
        spec = item.get("spec") or {}
        over = spec.get("over") or ORIGINAL
        first: list[str] = []
        python_first = ""
        if over != ORIGINAL:
            before = steps_of(over)
            first = [f"{c}   # first: {over}" for c in before.get("commands", [])]
            python_first = before.get("python", "")
        source = "SOURCE_URL" if over == ORIGINAL else f"URL_OF_{over.upper().replace('-', '_')}"
        local = "INPUT.h5" if over == ORIGINAL else "OUTPUT.h5"  # the file itself, or the paged copy made first
        record = item.get("virtual") or {}
        measured = f"# measured over {record['over']}" if record.get("over") else ""
        pinned, python, note = self.recipe(variant, spec, item, local, source,
                                           PLAIN_VIRTUALIZARR.replace("{source}", source))
        records = _record_note(item)
        if records:
            note += f"; {records}"
        if python_first:
            python = f"{python_first}\n{python}"
        return {"kind": self.name, "commands": first + ([pinned] if pinned else []) + ([measured] if measured else []),
                "python": python, "note": note}
