"""``repack-paged``: an HDF5 copy with paged aggregation (file space strategy PAGE), read as HDF5.

The page size is the plan's, or ``auto``: chosen from the downloaded file within ``size_budget``
(convert/page_budget.py), or paging is skipped (the variant is recorded SKIPPED, nothing published).
The spec carries the page size to every benchmark case that reads the copy (``reader_options``), so
an aligned reader's blocks are the file's pages.
"""

from __future__ import annotations

import functools
import tempfile
import time
from pathlib import Path

from layoutlab.ceilings import PAGE_SIZE_ALWAYS_ALLOWED
from layoutlab.ceilings import over as ceiling_over
from layoutlab.kinds._base import SIZE, VariantKind
from layoutlab.units import parse_size, size_label

DEFAULT_PAGE_SIZE = "8MiB"
REPACK_NOTE = ("h5repack -S PAGE leaves free-space tracking off and keeps COMPACT datasets and unlimited "
               "dimensions; layoutlab repack also persists free space, makes COMPACT datasets CONTIGUOUS "
               "and fixes unlimited dimensions at their size")


def _size_text(value) -> str:
    label = size_label(int(value))
    return label[:-1] if label.endswith("B") and not label.endswith("iB") else label  # plain bytes: "65536"


class PagedKind(VariantKind):
    name = "repack-paged"
    listed = 2
    format = "hdf5"
    suffix = ".h5"
    paged = True
    prefix = "paged"  # of its name: paged-8MiB, paged-auto
    options = {"page_size": SIZE,
               "size_budget": {"anyOf": [{"type": "number"}, {"type": "string", "maxLength": 32}]},
               "target_chunk_bytes": SIZE}

    def check(self, entry, where):
        from layoutlab.convert.page_budget import DEFAULT_BUDGET, is_auto, parse_budget

        # "auto": chosen from the file at conversion (convert/page_budget.py) within size_budget
        page = None if is_auto(entry.get("page_size")) else parse_size(
            entry.get("page_size", DEFAULT_PAGE_SIZE), what=f"{where}.page_size")
        try:
            parse_budget(entry.get("size_budget", DEFAULT_BUDGET))
        except ValueError as error:
            raise ValueError(f"{where}.{error}") from None
        if page is not None and (page < 4096 or page & (page - 1)):
            raise ValueError(f"{where}.page_size must be \"auto\" or a power of two >= 4KiB, "
                             f"got {entry.get('page_size')}")

    def check_ceilings(self, entry, where, ceilings, input_bytes):
        page = entry.get("page_size")
        if input_bytes and page is not None and str(page).lower() != "auto":
            largest = ceilings.max_page_size(input_bytes)
            if parse_size(page) > largest:
                raise ceiling_over(f"{where}.page_size", f"{page} =", parse_size(page),
                                   "max_page_size_input_ratio x the input", largest,
                                   note=f"a {input_bytes:,}-byte input, ratio {ceilings.max_page_size_input_ratio:g}, "
                                        f"and {size_label(PAGE_SIZE_ALWAYS_ALLOWED)} always")

    def expand(self, entry, facts):
        from layoutlab.convert.page_budget import AUTO, DEFAULT_BUDGET, is_auto, parse_budget

        page = AUTO if is_auto(entry.get("page_size")) else parse_size(entry.get("page_size", DEFAULT_PAGE_SIZE))
        return [{**entry, "page_size": page, "size_budget": parse_budget(entry.get("size_budget", DEFAULT_BUDGET)),
                 "name": f"{self.prefix}-{page if page == AUTO else size_label(page)}", "format": self.format}]

    def gives_name(self, name):
        return name.startswith(f"{self.prefix}-")

    def reader_options(self, spec):
        page = spec.get("page_size")
        return {"page_size": page} if isinstance(page, int) and not isinstance(page, bool) else {}

    def convert(self, spec, source, s3, context):
        """The paged copy, and how its page size was chosen: ``page_size`` "auto" is chosen here from the
        downloaded file within ``size_budget`` (convert/page_budget.py), or paging is skipped (status
        SKIPPED, nothing published); an explicit page size is the plan's."""
        from layoutlab.convert.page_budget import DEFAULT_BUDGET, choose_page_size, is_auto, parse_budget
        from layoutlab.convert.repack import repack
        from layoutlab.convert.repack_common import CopyDiffers
        from layoutlab.errors import BadInputFile, UserError
        from layoutlab.guard import run_guarded, start_guarded
        from layoutlab.kinds._transfer import PublishOnVerdict, download, link_written_copy
        from layoutlab.storage import S3Location

        target = S3Location.parse(spec["uri"])
        budget = parse_budget(spec.get("size_budget", DEFAULT_BUDGET))
        page_size = spec.get("page_size", 8 * 2**20)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="layoutlab-convert-") as scratch:
            original = f"s3://{source['bucket']}/{source['key']}"
            source = download(s3, source, scratch)
            downloaded = time.monotonic()
            out = Path(scratch) / "variant.h5"
            # guarded: a damaged file that makes libhdf5 spin is stopped in a minute, not at the task's timeout
            if is_auto(page_size):
                try:
                    choice = run_guarded(choose_page_size, source, budget, path=original,
                                         target_chunk_bytes=spec.get("target_chunk_bytes"))
                except BadInputFile as error:  # (it names the scratch copy: name the upload)
                    raise BadInputFile(original, error.reason) from None
                if choice.skip:
                    return {"status": "SKIPPED", **choice.record()}
                page_size, paging = choice.page_size, choice.record()
            else:
                paging = {"page_size": int(page_size), "page_size_choice": "set by the plan", "size_budget": budget}
            # the copy's parts go up while the worker verifies it; the object appears only on a clean verdict
            ready = Path(scratch) / "variant.written.h5"
            upload = None
            try:
                # confined to the download and the copy's folder (layoutlab/sandbox.py): whatever the file
                # points at, the worker can open nothing else
                call = start_guarded(repack, source, out, path=original, page_size=page_size,
                                     without_credentials=True, target_chunk_bytes=spec.get("target_chunk_bytes"),
                                     verify=True, copy_written=functools.partial(link_written_copy, ready),
                                     confine=([str(source)], [scratch]))
                upload = PublishOnVerdict(s3, ready, target)  # (its thread starts after the fork)
                summary = call.result()
                verdict = time.monotonic()
            except BaseException as error:
                if upload is not None:
                    upload.abort()  # nothing of an unverified copy is published
                # CopyDiffers is our copier's fault, never the input's (the state machine records it); any other
                # refusal (data outside the file, damage...) is the input's, named by the upload
                if isinstance(error, UserError) and not isinstance(error, CopyDiffers):
                    raise BadInputFile(original, str(error).replace(f"{source}: ", "").replace(str(source), original)) \
                        from None
                raise
            upload.complete(out)
            published = time.monotonic()
        result = summary.to_dict()
        # Lists of dataset names can run to thousands (ATL03): keep counts, DynamoDB items are capped at 400 KB.
        # The notes stay text: a line or two.
        return {"repack": {k: (len(v) if isinstance(v, (list, dict)) and k not in ("notes", "decode_check") else v)
                           for k, v in result.items() if k not in ("input", "output")}, **paging,
                "parts_sent_before_verdict": upload.parts_before_verdict,
                # where the task's time went, seconds from its start: what is on its critical path
                "phase_seconds": {phase: round(at - started, 3) for phase, at in (
                    ("downloaded", downloaded), ("copy_written", upload.written_at), ("verdict", verdict),
                    ("parts_sent", upload.parts_sent_at), ("published", published)) if at is not None},
                **({"isolation": call.isolation.to_dict()} if call.isolation is not None else {})}

    def make_steps(self, variant, item, variants, steps_of):
        spec = item.get("spec") or {}
        pages = (item.get("page_size"), (item.get("repack") or {}).get("page_size"), spec.get("page_size"))
        page = next((p for p in pages if isinstance(p, int) and not isinstance(p, bool)), None)  # not "auto"
        if page is None:
            return {"kind": self.name, "commands": [], "note": "the page size was not recorded with this variant"}
        layoutlab = f"layoutlab repack INPUT.h5 OUTPUT.h5 --page-size {_size_text(page)}"
        h5repack = f"h5repack -S PAGE -G {int(page)}"
        if spec.get("target_chunk_bytes"):
            layoutlab += f" --target-chunk-bytes {int(spec['target_chunk_bytes'])}"
            h5repack += " -l CHUNK=... (per dataset; h5repack has no byte target)"
        note = REPACK_NOTE
        if item.get("page_size_choice"):
            budget = item.get("size_budget")
            chosen = (f" (--page-size auto{f' --size-budget {budget:.0%}' if isinstance(budget, float) else ''}"
                      " chooses it from the file)" if spec.get("page_size_requested") == "auto" else "")
            note = f"page size: {item['page_size_choice']}{chosen}. {note}"
        return {"kind": self.name, "commands": [layoutlab], "h5repack": f"{h5repack} INPUT.h5 OUTPUT.h5", "note": note}


KIND = PagedKind()
