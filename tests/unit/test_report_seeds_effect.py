"""The seeds' effect with its interval: Lopez et al.'s pair (the original read with h5py's defaults against
the paged copy read with the aligned reader), per pattern, whether or not either is recommended."""

from __future__ import annotations

import re

from layoutlab.report import html
from layoutlab.report.decision import decide
from layoutlab.report.summary import summarize
from layoutlab.report.tables import decision_lines

# median wall s per (variant, reader) and pattern; icechunk-virtual is the fastest, so it is what is kept
TIMES = {("original", "h5py-s3fs-default"): {"beam-read": 1.0, "granule-open-list": 1.2},
         ("original", "h5py-s3fs-aligned"): {"beam-read": 0.7, "granule-open-list": 1.1},
         ("paged-8MiB", "h5py-s3fs-aligned"): {"beam-read": 0.4, "granule-open-list": 1.15},
         ("paged-8MiB", "h5py-s3fs-default"): {"beam-read": 1.3, "granule-open-list": 1.3},
         ("icechunk-virtual", "icechunk"): {"beam-read": 0.2, "granule-open-list": 0.5}}
SPREAD = (1.0, 1.05, 0.95, 1.02, 0.98)


def items() -> list[dict]:
    out = [{"kind": "RUN", "dataset": "g", "status": "SUCCEEDED", "source": {"key": "incoming/atl03.h5"}},
           {"kind": "VARIANT", "dataset": "g", "variant": "original", "variant_kind": "original", "size_bytes": 3e7},
           {"kind": "VARIANT", "dataset": "g", "variant": "paged-8MiB", "variant_kind": "repack-paged",
            "size_bytes": 3.1e7, "size_overhead": 0.033, "convert_s": 3.0, "platform": "local-lambda"},
           {"kind": "VARIANT", "dataset": "g", "variant": "icechunk-virtual", "variant_kind": "icechunk-virtual",
            "size_bytes": 3e5, "convert_s": 2.0, "platform": "local-lambda", "spec": {"kind": "icechunk-virtual"}}]
    for (variant, reader), patterns in TIMES.items():
        for pattern, wall in patterns.items():
            for rep, factor in enumerate(SPREAD):
                out.append({"kind": "RESULT", "dataset": "g", "variant": variant, "reader": reader,
                            "pattern": pattern, "platform": "local-lambda", "repetition": rep,
                            "wall_s": wall * factor, "checksum_ok": True, "requests": 5, "get_requests": 5,
                            "head_requests": 0, "bytes_transferred": 10**6, "peak_rss_mb": 100.0})
    return out


def _decided():
    everything = items()
    results = [i for i in everything if i["kind"] == "RESULT"]
    variants = {i["variant"]: i for i in everything if i["kind"] == "VARIANT"}
    return results, decide(results, variants=variants)


def test_the_pair_is_compared_per_pattern_with_its_interval_although_another_variant_is_kept():
    results, decided = _decided()
    assert decided["platforms"]["local-lambda"]["choice"]["variant"] == "icechunk-virtual"
    rows = {r["pattern"]: r for r in decided["paged_reader_effect"]["local-lambda"]}
    beam = rows["beam-read"]
    assert (beam["variant"], beam["reader"], beam["original_reader"]) == ("paged-8MiB", "h5py-s3fs-aligned",
                                                                          "h5py-s3fs-default")
    assert abs(beam["ratio"] - 0.4) < 1e-9 and beam["verdict"] == "faster" and beam["interval"][1] < 1
    listing = rows["granule-open-list"]
    assert listing["verdict"] == "no measurable difference" and listing["interval"][0] < 1 < listing["interval"][1]
    # the summary item carries it and prints it
    summary = summarize("g", results, decided)
    assert summary["paged_reader_effect"] == decided["paged_reader_effect"]
    text = "\n".join(decision_lines(summary))
    assert re.search(r"paged-8MiB read with h5py-s3fs-aligned against the original read with h5py-s3fs-default "
                     r"\(Lopez et al\.\): beam-read 0\.40x original \+ h5py-s3fs-default's time \(95% interval "
                     r"0\.\d\d-0\.\d\d: faster\)", text)


def test_the_granule_section_shows_the_pair_as_a_figure_a_table_and_a_line(tmp_path):
    written = html.write_report(items(), tmp_path / "r.html")
    page = written.html.read_text()
    assert 'id="g-paged-reader-effect"' in page
    assert (tmp_path / "r_files" / "g-paged-reader-effect.png").is_file()
    table = page[page.index("The seeds&#x27; effect: paged + aligned reader vs original + default reader</h4>"):]
    table = table[:table.index("</table>")]
    assert re.search(r"<td>beam-read</td><td>paged-8MiB</td><td class=\"num\">0\.400</td>"
                     r"<td class=\"num\">1\.000</td><td class=\"num\">0\.40x</td><td[^>]*>0\.\d\d-0\.\d\d</td>"
                     r"<td>faster</td>", table)
    assert "against the original read with h5py-s3fs-default (Lopez et al.): beam-read 0.40x" in page


def test_no_pair_no_figure(tmp_path):
    aligned_only = [i for i in items() if i.get("reader") != "h5py-s3fs-default"]
    results = [i for i in aligned_only if i["kind"] == "RESULT"]
    assert decide(results)["paged_reader_effect"] == {}
    written = html.write_report(aligned_only, tmp_path / "r.html")
    assert "paged-reader-effect" not in written.html.read_text()
