"""The report page: figures drawn from hand-built records, one self-contained HTML file, a section
per dataset with its recommendation first, and the `layoutlab report` command's errors."""

from __future__ import annotations

import base64
import html as std_html
import io
import json
import re

import pytest
from PIL import Image

from layoutlab import cli
from layoutlab import observability as obs
from layoutlab.report import decision, html, model, plots
import report_records as rr  # tests/report_records.py (pytest pythonpath)





def _grid():
    items = rr.grid_items()
    results = [i for i in items if i["kind"] == "RESULT"]
    variants = {i["variant"]: i for i in items if i["kind"] == "VARIANT"}
    run = next(i for i in items if i["kind"] == "RUN")
    return results, variants, run


# -- plots -------------------------------------------------------------------------------------
def test_heatmap_cells_put_measured_shapes_on_the_grid_and_let_predictions_fill_the_rest():
    results, variants, run = _grid()
    predicted = model.predict_grid(results, variants, run=run, reader="zarr-obstore", platform="local-lambda")
    cells = plots.heatmap_cells(results, variants, platform="local-lambda", reader="zarr-obstore",
                                predictions=predicted["grid_predictions"])
    by_key = {(c["pattern"], c["time_chunk"], c["space_chunk"]): c for c in cells}
    measured = [c for c in cells if not c["predicted"]]
    # 3 Zarr shapes x 2 patterns measured; a measured value is never replaced by its prediction
    assert len(measured) == 6
    ts_point = [r["wall_s"] for r in results if r["variant"] == "zarr-1x20x30" and r["pattern"] == "timeseries-point"
                and r["platform"] == "local-lambda"]
    assert by_key[("timeseries-point", 1, "20x30")]["value"] == pytest.approx(sorted(ts_point)[1])
    assert by_key[("timeseries-point", 1, "20x30")]["predicted"] is False
    # the seed grid's other shapes are there, flagged as predicted
    assert by_key[("map-timestep", 6, "10x10")]["predicted"] is True
    assert len(cells) > len(measured) + 20


def test_heatmap_figure_marks_predicted_cells_and_adds_the_product_panel():
    cells = [{"pattern": p, "time_chunk": t, "space_chunk": s, "value": v, "predicted": pred}
             for p, t, s, v, pred in [("timeseries-point", 1, "10x10", 2.0, False), ("timeseries-point", 48, "10x10", 0.1, True),
                                      ("map-timestep", 1, "10x10", 0.2, True), ("map-timestep", 48, "10x10", 3.0, False)]]
    fig = plots.heatmap_figure(cells, metric="BenchWallTime", unit="s", title="t")
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["timeseries-point", "map-timestep", "time-series × map product"]
    italic = [t.get_text() for ax in panels for t in ax.texts if t.get_style() == "italic"]
    bold = [t.get_text() for ax in panels for t in ax.texts if t.get_weight() == "bold"]
    assert sorted(italic) == sorted(["0.10", "0.20", "0.40", "0.30"])  # predicted, and products with a predicted factor
    assert sorted(bold) == ["2", "3"]
    png = plots.png_bytes(fig)
    assert Image.open(io.BytesIO(png)).size[0] > 300


def test_heatmap_figure_refuses_data_without_any_heatmap_pattern():
    with pytest.raises(ValueError, match="no heatmap cells"):
        plots.heatmap_figure([{"pattern": "beam-read", "time_chunk": 1, "space_chunk": "1x1", "value": 1.0,
                               "predicted": False}], metric="m", unit="s", title="t")


def test_traffic_rows_and_figure_group_by_the_dashboards_case_dimensions():
    results, variants, _ = _grid()
    rows = plots.traffic_rows(results, platform="local-fargate")
    assert {tuple(k for k in r if k in obs.CASE_GROUPING) for r in rows} == {obs.CASE_GROUPING}
    default = next(r for r in rows if r["variant"] == "original" and r["reader"] == "h5py-s3fs-default"
                   and r["pattern"] == "map-timestep")
    aligned = next(r for r in rows if r["variant"] == "original" and r["reader"] == "h5py-s3fs-aligned"
                   and r["pattern"] == "map-timestep")
    assert default["requests"] == 6 * aligned["requests"]
    fig = plots.traffic_figure(rows, title="t")
    titles = {ax.get_title() for ax in fig.axes}
    assert f"map-timestep: {obs.BENCH_REQUESTS.name} (count)" in titles
    assert f"timeseries-point: {obs.BENCH_BYTES.name} (MB)" in titles


def test_throughput_points_only_for_zarr_variants_with_their_chunk_size():
    results, variants, _ = _grid()
    points = plots.throughput_points(results, variants, platform="local-lambda")
    assert {p["variant"] for p in points} == set(rr.ZARR)
    sizes = {p["variant"]: p["chunk_bytes"] for p in points}
    assert sizes["zarr-12x10x10"] == 12 * 10 * 10 * 4
    assert plots.throughput_figure(points, title="t").axes[0].get_xscale() == "log"


def test_size_figure_labels_each_variant_with_its_overhead_against_its_budget():
    _, variants, _ = _grid()
    fig = plots.size_figure(plots.size_rows(variants), title="t")
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert any("+3.0% / 5%" in label and "OVER" not in label for label in labels)  # paged-1MiB: within 5%
    assert len(labels) == len(variants)
    over = dict(variants, **{"paged-1MiB": dict(variants["paged-1MiB"], size_overhead=0.418,
                                                size_bytes=int(variants["original"]["size_bytes"] * 1.418))})
    fig = plots.size_figure(plots.size_rows(over), title="t")
    bars = {label.get_text(): patch.get_facecolor() for label, patch in zip(fig.axes[0].get_yticklabels(),
                                                                            fig.axes[0].patches)}
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert any("+41.8% / 5% OVER" in label for label in labels)
    assert bars["paged-1MiB"] != bars["original"]  # the one over its budget is drawn in another colour


# -- the page ------------------------------------------------------------------------------
def _sections(page: str) -> list[tuple[str, str]]:
    return re.findall(r'<section id="[^"]*" class="dataset" data-dataset="([^"]+)">(.*?)</section>', page, re.S)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The page of both hand-built datasets (rendering nine figures takes seconds: once per module)."""
    return html.write_report(rr.all_items(), tmp_path_factory.mktemp("report") / "run.html", source="hand-built")


def test_report_is_one_self_contained_page_with_a_section_per_dataset(written):
    page = written.html.read_text()
    # nothing to fetch: no http(s) in any src/href/url(), no scripts, no external CSS or fonts
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert not re.search(r"url\(|@import|<script|<link", page, re.I)
    sections = _sections(page)
    assert [d for d, _ in sections] == [rr.GRANULE, rr.GRID]
    for dataset, body in sections:
        records = [i for i in rr.all_items() if i["dataset"] == dataset and i["kind"] == "RESULT"]
        variants = {i["variant"]: i for i in rr.all_items() if i["dataset"] == dataset and i["kind"] == "VARIANT"}
        sentence = decision.decide(records, variants=variants)["sentence"]
        first = re.search(r"<p[^>]*>(.*?)</p>", body, re.S)
        assert first and "recommendation" in first.group(0)
        assert first.group(1) == std_html.escape(sentence)
        assert body.index('class="recommendation"') < body.index("<figure")
    grid = dict(sections)[rr.GRID]
    for key in ("heatmap-wall-time", "heatmap-peak-memory", "throughput", "requests-bytes", "size-overhead", "pareto",
                "comparison", "paged-reader-effect"):
        assert f'id="{rr.GRID}-{key}"' in grid, key
    assert "heatmap" not in dict(sections)[rr.GRANULE]  # no chunk grid for a granule
    assert "Predicted best chunk shape" in grid and "Read-time model" in grid and "Cost in AWS" in grid
    # the recipe to reproduce the kept layout sits under the recommendation
    recipe = re.search(r'<pre class="recipe">(.*?)</pre>', grid, re.S)
    assert recipe and ": keep " in recipe.group(1) and "read as measured" in recipe.group(1)
    # item strings are escaped
    assert "a &lt;reason&gt; with markup" in page and "<reason>" not in page


def test_every_figure_is_an_embedded_png_with_alt_text_caption_and_a_file_beside_the_page(written):
    page = written.html.read_text()
    figures = re.findall(r'<figure id="([^"]+)"><img src="data:image/png;base64,([^"]+)" alt="([^"]+)">'
                         r"<figcaption>(.*?)</figcaption>", page, re.S)
    assert len(figures) == len(written.pngs) == 12
    for (figure_id, data, alt, caption), path in zip(figures, written.pngs):
        png = base64.b64decode(data)
        assert png == path.read_bytes() and path.parent == written.html.parent / "run_files"
        assert path.name == f"{figure_id}.png"
        width, height = Image.open(io.BytesIO(png)).size
        assert width > 300 and height > 200
        assert len(alt) > 30 and len(caption) > 60


def test_report_errors_and_a_mix_that_does_not_apply(tmp_path):
    with pytest.raises(html.UserError, match="no dataset 'nope'; known: atl03-test-0002, geos-test-0001"):
        html.write_report(rr.all_items(), tmp_path / "x.html", dataset="nope")
    only_runs = [i for i in rr.all_items() if i["kind"] == "RUN"]
    with pytest.raises(html.UserError, match="no RESULT items"):
        html.write_report(only_runs, tmp_path / "x.html")
    # a mix the asked-for dataset never measured is an error; across datasets it is a note
    mix = decision.parse_mix("timeseries-point=0.7,map-timestep=0.3")
    with pytest.raises(html.UserError, match="atl03-test-0002: mix pattern"):
        html.write_report(rr.all_items(), tmp_path / "x.html", dataset=rr.GRANULE, mix=mix)
    # results, none of which checked out: a section that says so, and no figure
    failed = [dict(i, checksum_ok=False) if i["kind"] == "RESULT" else i for i in rr.granule_items()]
    written = html.write_report(failed, tmp_path / "failed.html")
    assert written.sentences[rr.GRANULE] == "No result checked out: nothing to recommend."
    assert written.pngs == [] and "12 results excluded" in written.html.read_text()
    written = html.write_report(rr.granule_items(), tmp_path / "mix.html", mix=mix)
    assert "The workload mix does not apply here" in written.html.read_text()
    assert written.sentences[rr.GRANULE].startswith("On local-lambda, keep paged-8MiB")


def test_report_command_writes_the_page_and_fails_clearly(tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps(rr.all_items()))
    out = tmp_path / "page.html"
    assert cli.main(["report", "--results", str(results), "--out", str(out), "--dataset", rr.GRID,
                     "--mix", "timeseries-point=0.5,map-timestep=0.5"]) == 0
    printed = capsys.readouterr().out
    assert f"report: {out}" in printed
    assert f"{rr.GRID}: On local-lambda, keep zarr-12x10x10: it is fastest for the workload" in printed
    assert [d for d, _ in _sections(out.read_text())] == [rr.GRID]
    assert (tmp_path / "page_files" / f"{rr.GRID}-heatmap-wall-time.png").is_file()

    assert cli.main(["report", "--results", str(results), "--dataset", "nope", "--out", str(out)]) == 2
    assert "no dataset 'nope'" in capsys.readouterr().err
    assert cli.main(["report", "--results", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: no such file" in capsys.readouterr().err
    (tmp_path / "empty.json").write_text("[]")
    assert cli.main(["report", "--results", str(tmp_path / "empty.json")]) == 2
    assert "no results in" in capsys.readouterr().err
    assert cli.main(["report", "--results", str(results), "--mix", "timeseries-point=2"]) == 2
    assert "sum to 2" in capsys.readouterr().err


def test_report_command_without_any_results_says_where_it_looked(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LAYOUTLAB_STATE_DIR", str(tmp_path))  # no kept demo results, no local cloud here
    monkeypatch.delenv("LAYOUTLAB_RESULTS_TABLE", raising=False)
    assert cli.main(["report", "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "no results" in err and "run 'layoutlab demo' first" in err


def test_report_help_has_an_example(capsys):
    with pytest.raises(SystemExit):
        cli.main(["report", "--help"])
    assert "layoutlab report --dataset" in capsys.readouterr().out


def _product_items():
    product = {"kind": "PRODUCT", "product": "ATL03", "state": "production", "study_round": 1, "study_granules": 1,
               "studied": [rr.GRANULE], "granules": 3, "study_count": 1, "production_granules": 2, "checks": 0,
               "failed_granules": 0, "bytes_in": 9_000_000, "bytes_out": 6_180_000, "convert_s": 3.5,
               "decision": {"variant": "paged-8MiB", "platform": "local-lambda", "interval": [0.21, 0.43],
                            "granules": [rr.GRANULE], "why": "fewer requests <fast>"},
               "history": [{"event": "decided", "by": "layoutlab", "variant": "paged-8MiB"}]}
    granules = [{"kind": "GRANULE", "product": "ATL03", "dataset": f"p{i}", "role": "production",
                 "status": "CONVERTED", "bytes_in": 3_000_000, "bytes_out": 3_090_000, "convert_s": 1.75,
                 "platform": "lambda-1024"} for i in range(2)]
    studying = {"kind": "PRODUCT", "product": "GEOS", "state": "studying", "study_round": 2, "study_granules": 3,
                "studied": [], "granules": 1, "study_count": 0, "production_granules": 0, "bytes_in": 100}
    return [product, studying, *granules]


def test_report_has_a_section_per_product_with_state_decision_counts_bytes_and_cost(tmp_path):
    written = html.write_report(rr.granule_items() + _product_items(), tmp_path / "products.html")
    page = written.html.read_text()
    products = dict(re.findall(r'<section id="product-[^"]*" class="product" data-product="([^"]+)">(.*?)</section>',
                               page, re.S))
    assert list(products) == ["ATL03", "GEOS"] and page.index("<h2>Products</h2>") < page.index('class="dataset"')
    atl03 = products["ATL03"]
    assert "converts every granule to paged-8MiB" in atl03 and "0.21-0.43" in atl03
    assert "fewer requests &lt;fast&gt;" in atl03  # escaped
    cells = re.findall(r"<td[^>]*>(.*?)</td>", atl03)
    assert "production" in cells and "9,000,000" in cells and "6,180,000" in cells
    study_usd, production_usd, total_usd, priced = [float(c) for c in cells[-4:]]
    assert study_usd > 0 and production_usd > 0 and total_usd == pytest.approx(study_usd + production_usd, rel=1e-3)
    assert priced == 3
    assert "no decision yet" in products["GEOS"]
    assert "0 of 3 study granules" in products["GEOS"]
    # no PRODUCT item, no products heading
    assert "<h2>Products</h2>" not in html.write_report(rr.granule_items(), tmp_path / "plain.html").html.read_text()


def test_a_tables_row_layout_and_a_swaths_scan_line_layout_are_shown_by_their_chunk_length(tmp_path):
    """The default plan's record layouts (chunks "rows" / "scan-lines") carry no {dim: n}: the report said
    "'str' object has no attribute 'values'" for every table or swath product before."""
    import copy

    items = copy.deepcopy([i for i in rr.all_items() if i["dataset"] == rr.GRANULE])
    variants = [i for i in items if i["kind"] == "VARIANT" and i["variant"] != "original"]
    assert len(variants) >= 1
    variants[0]["spec"] = {"kind": "rechunk-zarr", "chunks": "rows", "record_chunk": 10000, "name": variants[0]["variant"]}
    if len(variants) > 1:
        variants[1]["spec"] = {"kind": "rechunk-zarr", "chunks": "scan-lines", "record_chunk": 132,
                               "name": variants[1]["variant"]}
    page = html.write_report(items, tmp_path / "run.html", source="hand-built").html.read_text()
    assert "10000 rows along the first axis" in page
    if len(variants) > 1:
        assert "132 scan lines along the first axis" in page
