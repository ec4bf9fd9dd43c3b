"""Every variant's size overhead against the size budget: what the convert step recorded, the default for
older items, references judged by what they keep stored; shown in the report, the SUMMARY item and its text."""

from __future__ import annotations

import re

from layoutlab.report import html
from layoutlab.report.budget import DEFAULT_SIZE_BUDGET, budget_rows, storage_bytes
from layoutlab.report.summary import summarize
from layoutlab.report.tables import decision_lines

ORIGINAL = 30_000_000


def items() -> dict[str, dict]:
    return {
        "original": {"variant_kind": "original", "size_bytes": ORIGINAL, "status": "READY"},
        # written by the budget-aware convert step: its own budget and verdict, the page it chose and why
        "paged-1MiB": {"variant_kind": "repack-paged", "size_bytes": 30_600_000, "size_overhead": 0.02,
                       "size_budget": 0.05, "within_budget": True, "page_size": 2**20,
                       "page_size_choice": "1 MiB: the largest page keeping overhead within 5% (metadata 0.4 MB)",
                       "status": "READY"},
        # an older item: no budget fields at all
        "paged-8MiB": {"variant_kind": "repack-paged", "size_bytes": 42_540_000, "size_overhead": 0.418,
                       "spec": {"kind": "repack-paged", "page_size": 8 * 2**20}, "status": "READY"},
        "kerchunk-original": {"variant_kind": "virtual-kerchunk", "size_bytes": 1_200_000, "size_overhead": -0.96,
                              "spec": {"over": "original"}, "status": "READY"},
        "kerchunk-paged-8MiB": {"variant_kind": "virtual-kerchunk", "size_bytes": 1_000_000,
                                "size_overhead": -0.97, "within_budget": True,  # the references alone
                                "spec": {"over": "paged-8MiB"}, "status": "READY"},
        "zarr-bad": {"variant_kind": "rechunk-zarr", "status": "FAILURE", "reason": "disk full"},
    }


def test_each_variant_against_its_budget_with_the_default_for_older_items():
    rows = {r["variant"]: r for r in budget_rows(items())}
    assert list(rows)[0] == "original" and "zarr-bad" not in rows  # a failed variant stored nothing
    assert rows["paged-1MiB"]["within_budget"] and rows["paged-1MiB"]["budget_recorded"]
    assert rows["paged-1MiB"]["page_size"] == 2**20 and "largest page" in rows["paged-1MiB"]["page_size_choice"]
    old = rows["paged-8MiB"]
    assert old["size_budget"] == DEFAULT_SIZE_BUDGET and not old["budget_recorded"]
    assert old["within_budget"] is False and old["flag"] and old["page_size"] == 8 * 2**20
    # references are read through what they point at: kerchunk over the original keeps 31.2 MB stored (+4%),
    # over the paged copy 43.5 MB (+45%) whatever the references' own item says
    assert rows["kerchunk-original"]["overhead"] == (ORIGINAL + 1_200_000) / ORIGINAL - 1
    assert rows["kerchunk-original"]["within_budget"] is True and not rows["kerchunk-original"]["flag"]
    assert storage_bytes("kerchunk-paged-8MiB", items()) == 42_540_000 + 1_000_000
    assert rows["kerchunk-paged-8MiB"]["within_budget"] is False and rows["kerchunk-paged-8MiB"]["flag"]


def test_the_budget_in_the_summary_item_and_its_text():
    records = [{"kind": "RESULT", "dataset": "d", "variant": v, "pattern": "beam-read", "reader": "h5py-s3fs-aligned",
                "platform": "local-lambda", "repetition": rep, "wall_s": 0.5 + rep / 100, "checksum_ok": True}
               for v in ("original", "paged-8MiB") for rep in range(3)]
    from layoutlab.report.decision import decide

    summary = summarize("d", records, decide(records, variants=items()))
    by_variant = {r["variant"]: r for r in summary["size_budget"]}
    assert by_variant["paged-8MiB"]["within_budget"] is False
    text = "\n".join(decision_lines(summary))
    assert re.search(r"paged-8MiB \[!\] +repack-paged +42\.5 +\+41\.8% vs a 5% budget \(default\): OVER +8MiB", text)
    assert re.search(r"paged-1MiB +repack-paged .*\+2\.0% vs a 5% budget: within +1MiB *$", text, re.M)


def test_the_report_shows_the_budget_table_and_the_sentence_flags_a_kept_variant_over_it(tmp_path):
    records = [{"kind": "RESULT", "dataset": "d", "variant": v, "pattern": "beam-read", "reader": "h5py-s3fs-aligned",
                "platform": "local-lambda", "repetition": rep, "wall_s": w + rep / 100, "checksum_ok": True}
               for v, w in (("original", 0.5), ("paged-8MiB", 0.2)) for rep in range(3)]
    variant_items = [{"kind": "VARIANT", "dataset": "d", "variant": name, **item} for name, item in items().items()]
    written = html.write_report(records + variant_items, tmp_path / "r.html")
    page = written.html.read_text()
    table = page[page.index("Size overhead against the budget"):]
    table = table[:table.index("</table>")]
    assert "paged-8MiB [!]" in table and "+41.8% vs a 5% budget (default): OVER" in table
    assert "references + paged-8MiB" in table
    assert "Size budget: paged-8MiB adds +41.8% vs a 5% budget (default): OVER." in written.sentences["d"]


def test_paging_skipped_by_auto_is_listed_with_its_reason_and_references_over_it_too():
    variants = {"original": {"variant_kind": "original", "size_bytes": ORIGINAL},
                "paged-auto": {"variant_kind": "repack-paged", "status": "SKIPPED", "size_budget": 0.05,
                               "reason": "paging skipped: metadata is 0.2% of the file; no page keeps it within 5%",
                               "page_size_choice": "metadata is 0.2% of the file; no page keeps it within 5%",
                               "spec": {"kind": "repack-paged", "page_size": "auto"}},
                "kerchunk-paged-auto": {"variant_kind": "virtual-kerchunk", "status": "SKIPPED",
                                        "reason": "references over paged-auto, which was not made",
                                        "spec": {"over": "paged-auto"}}}
    rows = {r["variant"]: r for r in budget_rows(variants)}
    assert rows["paged-auto"]["status"] == "SKIPPED" and rows["paged-auto"]["page_size"] is None
    assert rows["paged-auto"]["within_budget"] is None and not rows["paged-auto"]["flag"]
    from layoutlab.report.budget import budget_text

    assert budget_text(rows["paged-auto"]) == ("not made: paging skipped: metadata is 0.2% of the file; "
                                                "no page keeps it within 5%")
    assert budget_text(rows["kerchunk-paged-auto"]) == "not made: references over paged-auto, which was not made"
