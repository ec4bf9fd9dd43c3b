"""One self-contained HTML page per run: the decision, the figures and the tables, per dataset.

Self-contained means it loads nothing: figures are PNGs embedded as base64
``data:`` URIs, the CSS is inline, there is no JavaScript and no web font, so
the page opens the same offline, from an S3 object or attached to an email.
The same PNGs are written beside the page (``<name>_files/<dataset>-<plot>.png``)
for slides and papers.

Input is the items of the results table (RUN, VARIANT, RESULT, SUMMARY,
FAILURE: what ``layoutlab results --format json`` prints or the demo keeps). PRODUCT and GRANULE items, when
there are any, add a section per product first (state, decision, counts, bytes, cost so far).
The decision, cost and model come from ``decision``, ``cost`` and ``model``;
this module only lays them out. Strings from the items are escaped.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from layoutlab import observability as obs
from layoutlab.errors import UserError

ITEM_KINDS = ("RUN", "VARIANT", "RESULT", "SUMMARY", "FAILURE")
_KIND_NAMES = {"lambda": "Lambda function", "fargate": "Fargate task"}


@dataclass
class Figure:
    key: str  # file-name part: <dataset>-<key>.png
    title: str
    alt: str
    caption: str
    png: bytes


@dataclass
class DatasetSection:
    dataset: str
    source: str
    status: str
    sentence: str
    notes: list[str] = field(default_factory=list)  # further sentences under the recommendation
    recipe: str | None = None  # the commands and reader settings that reproduce the kept layout (report.recipe)
    figures: list[Figure] = field(default_factory=list)
    tables: list[tuple[str, list[str], list[list[str]], str]] = field(default_factory=list)  # title, header, rows, note


def group_items(items: list[dict]) -> dict[str, dict[str, list[dict]]]:
    """dataset -> kind -> items."""
    grouped: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for item in items:
        if item.get("dataset") and item.get("kind", "RESULT") in ITEM_KINDS:
            grouped[item["dataset"]][item.get("kind", "RESULT")].append(item)
    return grouped


# -- building one dataset's section -------------------------------------------------------
def build_section(dataset: str, kinds: dict[str, list[dict]], *, mix: dict[str, float] | None = None,
                  mix_required: bool = False) -> DatasetSection:
    """The section of one dataset: decision, figures, tables. ``mix_required``: a mix that does
    not apply to this dataset is an error (the user asked about this dataset), else a note."""
    from layoutlab.report import decision, tables

    results = [r for r in kinds.get("RESULT", []) if r.get("kind", "RESULT") == "RESULT"]
    variants = {v["variant"]: v for v in kinds.get("VARIANT", [])}
    run = (kinds.get("RUN") or [None])[0] or {}
    failures = kinds.get("FAILURE", [])
    source = ((run.get("source") or {}).get("key")) or dataset
    status = run.get("status") or "unknown"
    if not results:
        section = DatasetSection(dataset, source, status,
                                 f"No benchmark results for {dataset} (status {status}): nothing to recommend.")
        _failure_table(section, failures)
        return section

    notes = []
    try:
        decided = decision.decide(results, mix=mix, variants=variants)
    except decision.MixError as error:
        if mix_required:
            raise UserError(f"dataset {dataset}: {error}") from None
        notes.append(f"The workload mix does not apply here ({error}); the recommendation balances the patterns instead.")
        decided = decision.decide(results, variants=variants)
    section = DatasetSection(dataset, source, status, decided["sentence"], notes)
    primary = decided["primary_platform"]
    if primary is not None:
        from layoutlab.report.recipe import recipe

        made = recipe(decided["platforms"][primary], primary, variants, results)
        section.recipe = made["text"] if made else None
    if primary is None:  # results, but none whose values checked out: nothing to draw or rank
        section.notes.append(f"{decided['results_excluded']} results excluded (values that did not check out).")
        _failure_table(section, failures)
        return section
    for platform, result in decided["platforms"].items():
        if platform != primary:
            section.notes.append(result["sentence"])
    effect = decided.get("paged_reader_effect", {}).get(primary)
    if effect:
        section.notes.append(decision.paged_reader_effect_text(effect) + ".")
    if decided.get("costs_note"):
        section.notes.append(decided["costs_note"] + ".")
    rounds = ((kinds.get("SUMMARY") or [{}])[0].get("repetition_rounds") or {}).get("text")
    if rounds:  # how many rounds of repetitions the pipeline ran, and what stayed undecided
        section.notes.append(rounds)
    counted, excluded = decided["results_counted"], decided["results_excluded"]
    section.notes.append(f"{counted} results counted, {excluded} excluded (values that did not check out); "
                         f"times are medians over repetitions, each case a cold single-core process.")

    model = _model(results, variants, run, decided.get("mix"), section)
    _figures(section, results, variants, decided, model)
    _decision_tables(section, decided)
    _variant_table(section, variants)
    _budget_table(section, decided)
    _effect_table(section, decided)
    for platform in decided["platforms"]:
        header, rows = tables.median_table(decision.good_results(results), platform)
        section.tables.append((f"Median {obs.BENCH_WALL_TIME.name} (s), best reader, {platform}", header, rows,
                               "variant × pattern; the best reader's median over repetitions"))
    header, rows = tables.requests_table(decision.good_results(results), primary)
    section.tables.append((f"{obs.BENCH_REQUESTS.name} and {obs.BENCH_BYTES.name} per case, {primary}", header, rows,
                           "medians over repetitions and readers"))
    _cost_table(section, results, variants, decided)
    _model_tables(section, model)
    _failure_table(section, failures)
    return section


def _model(results, variants, run, mix, section) -> dict | None:
    """The read-time model's grid predictions, for a gridded dataset with Zarr variants; else None."""
    from layoutlab.report import model

    if not any(r.get("pattern") in model.GRID_PATTERNS for r in results):
        return None
    if not any(model.variant_chunks(name, item) for name, item in variants.items()):
        return None
    try:
        predicted = model.predict_grid(results, variants, run=run, mix=mix)
    except UserError as error:
        section.notes.append(f"No chunk-shape predictions: {error}.")
        return None
    if predicted.get("recommendation"):
        section.notes.append(predicted["recommendation"]["sentence"])
    return predicted


def _figure(section: DatasetSection, key: str, title: str, alt: str, caption: str, draw) -> None:
    from layoutlab.report import plots

    try:
        fig = draw()
    except ValueError:  # nothing to draw for this dataset (e.g. no Zarr variant): leave the figure out
        return
    section.figures.append(Figure(key, title, alt, caption, plots.png_bytes(fig)))


def _figures(section: DatasetSection, results, variants, decided, model) -> None:
    from layoutlab.report import decision, plots

    primary = decided["primary_platform"]
    zarr_readers = defaultdict(int)
    for r in results:
        if r.get("platform") == primary and plots.zarr_chunks(r["variant"], variants.get(r["variant"])):
            zarr_readers[r["reader"]] += 1
    if model:
        platform, reader, predictions = model["platform"], model["reader"], model["grid_predictions"]
    elif zarr_readers:
        platform, reader, predictions = primary, max(sorted(zarr_readers), key=zarr_readers.get), None
    else:
        platform = reader = predictions = None
    recommended = (model or {}).get("recommendation")
    best = None
    if recommended and not decided.get("mix"):  # the product panel shows the balanced measure, not a mix
        chunks = recommended["chunks"]
        best = (chunks[0], f"{chunks[1]}x{chunks[2]}")
    if reader:
        hold = (model or {}).get("holdout", {}).get("median_relative_error")
        predicted_note = (f" Hatched cells with italic values are predicted by the read-time model "
                          f"(fitted on the measured cells; median held-out error "
                          f"{'n/a' if hold is None else f'{hold:.0%}'}); bold framed cells were measured."
                          if predictions else " Only measured cells are shown (no model predictions).")
        grid = "rows: time chunk (steps), columns: spatial chunk (lat × lon)"
        _figure(section, "heatmap-wall-time", "Wall time over the chunk grid",
                f"Heatmaps of median wall time in seconds by time chunk and spatial chunk for "
                f"{', '.join(plots.HEATMAP_PATTERNS)} and their product, {reader} on {platform}",
                f"{obs.BENCH_WALL_TIME.name}, median over repetitions, {reader} on {platform}; {grid}. "
                f"As Nguyen et al. Fig. 2 A, C, E: the product panel's lowest cell is the balanced shape"
                + (f"; the model's best shape, {best[0]}x{best[1]}, is framed in red." if best else ".")
                + predicted_note,
                lambda: plots.heatmap_figure(
                    plots.heatmap_cells(results, variants, platform=platform, reader=reader, predictions=predictions),
                    metric=obs.BENCH_WALL_TIME.name, unit="s", highlight=best,
                    title=f"{section.source}: wall time, {reader} on {platform}"))
        _figure(section, "heatmap-peak-memory", "Peak memory over the chunk grid",
                f"Heatmaps of median peak resident memory in MB by time chunk and spatial chunk, "
                f"{reader} on {platform}",
                f"{obs.BENCH_PEAK_MEMORY.name}, median over repetitions, {reader} on {platform}; {grid}. "
                f"Measured cells only: the model predicts time, not memory (Nguyen et al. Fig. 2 B, D, F).",
                lambda: plots.heatmap_figure(
                    plots.heatmap_cells(results, variants, platform=platform, reader=reader, field="peak_rss_mb"),
                    metric=obs.BENCH_PEAK_MEMORY.name, unit="MB",
                    title=f"{section.source}: peak memory, {reader} on {platform}"))
        _figure(section, "throughput", "Throughput against chunk size",
                f"Log-log plots of throughput in Gbit/s and points per second against chunk size in MB, "
                f"one line per pattern, on {primary}",
                f"Per Zarr variant on {primary}: throughput of the values a pattern needs over its load time "
                f"(the record's throughput_gbps; as in the Earthmover post) and processing speed in points per "
                f"second (Nguyen et al. Fig. 3A), against the uncompressed size of one chunk. Medians over repetitions.",
                lambda: plots.throughput_figure(plots.throughput_points(results, variants, platform=primary),
                                                title=f"{section.source}: throughput vs chunk size, {primary}"))
    _figure(section, "requests-bytes", "Requests and bytes per variant and reader",
            f"Horizontal bar charts of requests and megabytes moved per variant, one row per pattern, "
            f"one colour per reader, on {primary}",
            f"{obs.BENCH_REQUESTS.name} and {obs.BENCH_BYTES.name} (counted by the S3 proxy), median per "
            f"{' × '.join(obs.CASE_GROUPING)} on {primary}, log scale: paged vs original, aligned vs default readers.",
            lambda: plots.traffic_figure(plots.traffic_rows(results, platform=primary),
                                         title=f"{section.source}: requests and bytes moved, {primary}"))
    _figure(section, "size-overhead", "Size overhead per variant",
            "Horizontal bar chart of each variant's stored size in MB with its overhead over the original",
            f"{obs.CONVERT_OUTPUT_BYTES.name} of what must stay stored to read each variant (references: "
            f"their own bytes plus the object they point at), labelled with its overhead over the original and "
            f"its size budget (the VARIANT item's, else the default 5%: Lopez et al. cap paging's there); red "
            f"when over it.",
            lambda: plots.size_figure(plots.size_rows(variants), title=f"{section.source}: stored size per variant"))
    choice = decided["platforms"][primary].get("choice") or {}
    if choice.get("comparison"):
        candidate = choice["candidate"]
        _figure(section, "comparison", "Against the original, with intervals",
                f"Dot plot of {candidate}'s median time over the original's per pattern on {primary}, with 95% "
                f"bootstrap intervals and a dashed line at 1",
                f"{candidate} (the variant the decision rule chose) against the original on {primary}: ratio of "
                f"median wall times, bars the 95% bootstrap interval over repetitions. Where no pattern is "
                f"measurably faster the original is kept (it needs no conversion and no storage).",
                lambda: plots.comparison_figure(choice["comparison"], variant=candidate,
                                                title=f"{section.source}: {candidate} vs original, {primary}"))
    effect = (decided.get("paged_reader_effect") or {}).get(primary) or []
    for paged in sorted({r["variant"] for r in effect}):
        rows = {r["pattern"]: r for r in effect if r["variant"] == paged}
        mine = f"{paged} + {decision.ALIGNED_READER}"
        theirs = f"original + {decision.DEFAULT_READER}"
        _figure(section, "paged-reader-effect" + ("" if len({r["variant"] for r in effect}) == 1 else f"-{paged}"),
                "The seeds' effect: paged + aligned reader against original + default reader",
                f"Dot plot of {mine}'s median time over {theirs}'s per pattern on {primary}, with 95% bootstrap "
                f"intervals and a dashed line at 1",
                f"Lopez et al.'s comparison on {primary}, shown whether or not either is recommended: {paged} read "
                f"with the reader aligned to its pages against the original read with h5py's defaults; ratio of "
                f"median wall times, bars the 95% bootstrap interval over repetitions; left of 1 is faster.",
                lambda rows=rows, mine=mine, theirs=theirs: plots.comparison_figure(
                    rows, variant=mine, baseline=theirs, title=f"{section.source}, {primary}:\n{mine} vs {theirs}"))
    pareto = decided["platforms"][primary].get("pareto") or {}
    _figure(section, "pareto", "Read time against size: the Pareto front",
            f"Scatter plot of read time against stored size per variant on {primary}, Pareto-front variants circled",
            f"Pareto front on {primary} over {', '.join(pareto.get('axes') or [])}: a variant is on it when no other "
            f"is at least as good on every axis and better on one. Read time: {pareto.get('read_time', '')}.",
            lambda: plots.pareto_figure(pareto.get("points") or [], read_time=pareto.get("read_time", ""),
                                        title=f"{section.source}: read time vs size, {primary}"))


def _s(value, fmt="{:.3f}") -> str:
    return "-" if value is None else fmt.format(value)


def _decision_tables(section: DatasetSection, decided: dict) -> None:
    header = ["platform", "pattern", "best variant", "best reader", "best s", "slowest variant", "slowest s", "bias"]
    rows = []
    for platform, result in decided["platforms"].items():
        for pattern, e in result["patterns"].items():
            rows.append([platform, pattern, e["best_variant"], e["best_reader"], _s(e["best_wall_s"]),
                         e["worst_variant"], _s(e["worst_wall_s"]), _s(e["performance_bias"], "{:.1f}x")])
    section.tables.append(("Best variant per pattern", header, rows,
                           "bias = slowest / fastest variant's median time (Nguyen et al.)"))
    header = ["platform", "balanced (min time-series × map)", "smallest worst-case slowdown", "mix choice", "Pareto front"]
    rows = []
    for platform, result in decided["platforms"].items():
        balanced = result.get("balanced_product")
        worst = result.get("min_worst_slowdown")
        choice = result.get("mix_choice")
        rows.append([platform,
                     f"{balanced['variant']} ({balanced['timeseries_wall_s']:.3f} s × {balanced['map_wall_s']:.3f} s)"
                     if balanced else "-",
                     f"{worst['variant']} ({worst['worst_slowdown']:.1f}x)" if worst else "-",
                     f"{choice['variant']} ({choice['mix_wall_s']:.3f} s)" if choice else "-",
                     ", ".join((result.get("pareto") or {}).get("front") or []) or "-"])
    mix = decided.get("mix")
    note = ("mix: " + ", ".join(f"{p} {s:.0%}" for p, s in mix.items())) if mix else "no workload mix given (--mix)"
    section.tables.append(("Choices", header, rows, note))


def _chunks_text(spec: dict) -> str:
    """A variant's chunk shape as the table shows it: ``240x10x10`` for a grid's {dim: n}; a table's or a
    swath's record layout (chunks "rows" / "scan-lines") by the elements along the first axis a chunk holds."""
    chunks = spec.get("chunks")
    if isinstance(chunks, dict):
        return "x".join(str(c) for c in chunks.values()) or "-"
    if chunks and spec.get("record_chunk"):
        return f"{spec['record_chunk']} {'rows' if chunks == 'rows' else 'scan lines'} along the first axis"
    return str(chunks) if chunks else "-"


def _variant_table(section: DatasetSection, variants: dict[str, dict]) -> None:
    if not variants:
        return
    rows = [[name, v.get("variant_kind") or "", _s(v.get("size_bytes"), "{:,.0f}") if v.get("size_bytes") is not None else "-",
             _s(v.get("size_overhead"), "{:+.1%}"), _s(v.get("convert_s"), "{:.1f}"),
             _chunks_text(v.get("spec") or {})]
            for name, v in sorted(variants.items())]
    section.tables.append(("Variants", ["variant", "kind", f"{obs.CONVERT_OUTPUT_BYTES.name} (B)", "overhead",
                                        f"{obs.CONVERT_WALL_TIME.name} (s)", "chunks"], rows, ""))


def _cost_table(section: DatasetSection, results, variants, decided: dict) -> None:
    """$ per 1,000 accesses, variant × pattern, one table per platform; then each layout's costs
    (conversion once, storage a month, reads) as the decision weighed them."""
    from layoutlab.report import cost, tables

    prices = cost.load_prices()
    rows = cost.cost_table(results, variants, prices)
    for platform in sorted({r["platform"] for r in rows}):
        mine = [r for r in rows if r["platform"] == platform]
        patterns = sorted({r["pattern"] for r in mine})
        cells = {(r["variant"], r["pattern"]): r for r in mine}
        body = [[variant] + [_s(cells[(variant, p)]["usd_per_1000"], "{:.5f}") if (variant, p) in cells else "-"
                             for p in patterns] for variant in sorted({r["variant"] for r in mine})]
        billed = mine[0]["billed"].split(":")[0]
        section.tables.append((f"Cost in AWS: $ per 1,000 accesses, {platform}", ["variant"] + patterns, body,
                               f"compute (billed {billed}) + invocations + S3 GETs, from the best reader's median wall "
                               f"time and GET count; priced as a {_KIND_NAMES.get(mine[0]['kind'], mine[0]['kind'])} of {mine[0]['memory_mb']} MB "
                               f"(prices: {rows[0]['prices']}, report/prices/)"))
    yardstick = decided.get("cost_yardstick") or {}
    for platform, result in decided["platforms"].items():
        if not result.get("costs"):
            continue
        header, body = tables.cost_rows_table(result["costs"])
        section.tables.append((f"Cost of each layout, {platform}", header, body,
                               "conversion $ once: the VARIANT item's conversion time on the platform it was "
                               "converted on (references over a copy add the copy's); S3 $ a month: the bytes that "
                               "must stay stored to read it (S3 Standard); reads: the best reader's measured time "
                               "and requests, as above. Where reads are not measurably different the cheaper "
                               f"layout is kept, weighed over {yardstick.get('months')} months at "
                               f"{yardstick.get('reads_per_month', 0):,} reads a month (conversion + storage + "
                               "S3 requests)"))


def _budget_table(section: DatasetSection, decided: dict) -> None:
    from layoutlab.report import tables

    if decided.get("size_budget"):
        header, rows = tables.budget_table(decided["size_budget"])
        section.tables.append(("Size overhead against the budget", header, rows,
                               "overhead = bytes stored to read the variant over the original's size (references "
                               "count what they point at); budget: the VARIANT item's size_budget, else the default "
                               "5% (Lopez et al.; NSIDC's production ATL03 grows ~1%); [!] a paged variant or "
                               "references over budget"))


def _effect_table(section: DatasetSection, decided: dict) -> None:
    from layoutlab.report import decision

    rows = []
    for platform, effect in sorted((decided.get("paged_reader_effect") or {}).items()):
        for r in effect:
            interval = "-" if r["interval"] is None else f"{r['interval'][0]:.2f}-{r['interval'][1]:.2f}"
            rows.append([platform, r["pattern"], r["variant"], _s(r["median_s"]), _s(r["original_median_s"]),
                         f"{r['ratio']:.2f}x", interval, r["verdict"]])
    if rows:
        section.tables.append(("The seeds' effect: paged + aligned reader vs original + default reader",
                               ["platform", "pattern", "paged variant",
                                f"paged + {decision.ALIGNED_READER} s", f"original + {decision.DEFAULT_READER} s",
                                "ratio", "95% interval", "verdict"], rows,
                               "Lopez et al.'s comparison, whatever the recommendation: medians over repetitions, "
                               "bootstrap interval of the ratio of medians"))


def _model_tables(section: DatasetSection, model: dict | None) -> None:
    if not model:
        return
    coef = model["model"]["coef"]
    hold = model["holdout"]
    rows = [[model["reader"], model["platform"], "x".join(map(str, model["shape"])),
             ", ".join(f"{k} {v:.3g}" for k, v in coef.items()), str(model["model"]["n"]),
             _s(model["model"]["rmse_s"], "{:.3f}"), _s(hold.get("median_relative_error"), "{:.0%}"),
             ", ".join(hold.get("variants") or [])]]
    section.tables.append(("Read-time model", ["reader", "platform", "grid", "coefficients (s per unit)", "n",
                                              "fit RMSE s", "held-out error", "left out in turn"], rows,
                           "wall_s ~ intercept + requests + MiB + Mpoints, coefficients ≥ 0 (report/model.py); "
                           "held-out error: fit without one Zarr variant, predict it from chunk geometry"))
    ranked = sorted((s for s in model.get("shapes", []) if s.get("score") is not None), key=lambda s: s["score"])[:8]
    if ranked:
        patterns = list(ranked[0]["times"])
        rows = [["x".join(map(str, s["chunks"])), f"{s['chunk_bytes'] / 1e6:.2f}", "yes" if s["measured"] else "no",
                 _s(s["score"], "{:.3g}")] + [_s(s["times"][p]) for p in patterns] for s in ranked]
        section.tables.append(("Predicted best chunk shapes", ["chunks", "chunk MB", "measured", model["recommendation"]["by"]
                                                               if model.get("recommendation") else "score"]
                               + [f"{p} s" for p in patterns], rows, "the eight best by the model; predicted times"))


def _failure_table(section: DatasetSection, failures: list[dict]) -> None:
    if failures:
        rows = [[f.get("stage") or "", str(f.get("detail") or ""), str(f.get("reason") or "")] for f in failures[:50]]
        section.tables.append(("Failures", ["stage", "detail", "reason"], rows,
                               f"{len(failures)} failure items" + (" (first 50)" if len(failures) > 50 else "")))


# -- rendering -----------------------------------------------------------------------------
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0 auto;
max-width:1180px;padding:1rem 1.5rem;color:#1d1d1f;line-height:1.45}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{border-top:2px solid #ccc;padding-top:1rem;margin-top:2rem}
.meta{color:#555;font-size:.9rem}
.recommendation{font-size:1.15rem;background:#eef6ee;border-left:5px solid #3a7d44;padding:.7rem 1rem;margin:.6rem 0}
.notes li{margin:.2rem 0}
figure{margin:1.2rem 0;padding:0}figure img{max-width:100%;height:auto;border:1px solid #ddd}
figcaption{font-size:.88rem;color:#333;margin-top:.3rem}
table{border-collapse:collapse;margin:.4rem 0 1.2rem;font-size:.85rem}
th,td{border:1px solid #ccc;padding:.2rem .5rem;text-align:left;vertical-align:top}th{background:#f2f2f2}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.tablenote{font-size:.8rem;color:#555;margin-top:-.9rem;margin-bottom:1.2rem}
nav ul{columns:2}
"""

_NUMBER = re.compile(r"^[-+$]?[\d.,]+(e[-+]?\d+)?\s*(%|x|s|MB|req.*)?$")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "dataset"


def _table_html(title: str, header: list[str], rows: list[list[str]], note: str) -> str:
    e = html.escape
    head = "".join(f"<th>{e(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(
        f'<td class="num">{e(str(c))}</td>' if _NUMBER.match(str(c)) else f"<td>{e(str(c))}</td>" for c in row)
        + "</tr>" for row in rows)
    out = f"<h4>{e(title)}</h4>\n<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>\n"
    if note:
        out += f'<p class="tablenote">{e(note)}</p>\n'
    return out


@dataclass
class ProductSection:
    product: str
    sentence: str
    tables: list[tuple[str, list[str], list[list[str]], str]] = field(default_factory=list)


def _bytes(value) -> str:
    return f"{int(value or 0):,}"


def build_product_section(product: dict, items: list[dict], prices: dict | None = None) -> ProductSection:
    """One PRODUCT item (products/state.py) laid out: its state and decision (variant, interval, who), its
    counts, bytes in and out, and what it has cost so far (``cost.product_spent``)."""
    from layoutlab.report.cost import load_prices, product_spent

    name = product["product"]
    decision = product.get("decision") or {}
    interval = decision.get("interval")
    last = (product.get("history") or [{}])[-1]
    granules = [i for i in items if i.get("kind") == "GRANULE" and i.get("product") == name]
    studied = set(product.get("studied") or []) | set(decision.get("granules") or [])
    study_items = {d: [i for i in items if i.get("dataset") == d and i.get("kind") in ("VARIANT", "RESULT")]
                   for d in sorted(studied)}
    cost = product_spent(granules, study_items, prices or load_prices())
    if decision.get("variant"):
        sentence = (f"Product {name} ({product.get('state')}): converts every granule to {decision['variant']}"
                    + (f"; read time against the original {interval[0]:.3g}-{interval[1]:.3g}" if interval else "")
                    + f" (decided by {last.get('by') or '?'}).")
    else:
        sentence = (f"Product {name} ({product.get('state')}, study round {product.get('study_round')}): "
                    f"{len(product.get('studied') or [])} of {product.get('study_granules')} study granules "
                    f"summarized, no decision yet.")
    section = ProductSection(name, sentence)
    section.tables.append((
        "State and decision", ["state", "study round", "variant", "platform", "interval (read time / original)",
                               "decided by", "why"],
        [[product.get("state") or "", str(product.get("study_round") or ""), decision.get("variant") or "—",
          decision.get("platform") or "—", f"{interval[0]:.3g}-{interval[1]:.3g}" if interval else "—",
          last.get("by") or "—", decision.get("why") or product.get("restudy_reason") or ""]],
        "interval: the lowest and highest ratio of the chosen variant's read time to the original's over the "
        "studied granules."))
    bytes_in, bytes_out = int(product.get("bytes_in") or 0), int(product.get("bytes_out") or 0)
    section.tables.append((
        "Granules and bytes", ["granules", "studied", "production", "drift checks", "failed", "bytes in",
                               "bytes out", "convert s"],
        [[str(product.get("granules") or 0), str(product.get("study_count") or 0),
          str(product.get("production_granules") or 0), str(product.get("checks") or 0),
          str(product.get("failed_granules") or 0), _bytes(bytes_in), _bytes(bytes_out),
          f"{float(product.get('convert_s') or 0):.1f}"]],
        "bytes in: every admitted granule's upload; bytes out: the converted copies written so far."))
    section.tables.append((
        "Cost so far (USD)", ["study", "production conversions", "total", "granules priced"],
        [[f"{cost['study_usd']:.4g}", f"{cost['production_usd']:.4g}", f"{cost['total_usd']:.4g}",
          str(cost["priced_granules"])]],
        "the study granules' conversions and cases, and each production granule's conversion, priced on the "
        "platform it ran on (a local platform as the AWS platform of the same memory)."))
    return section


def render_html(sections: list[DatasetSection], *, title: str, meta: str, figure_paths: dict[tuple, str],
                products: list[ProductSection] | None = None) -> str:
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width,initial-scale=1">',
             f"<title>{e(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{e(title)}</h1>", f'<p class="meta">{e(meta)}</p>']
    if len(sections) > 1:
        parts.append("<nav><ul>" + "".join(
            f'<li><a href="#{e(_slug(s.dataset))}">{e(s.source)}</a>: {e(s.sentence)}</li>' for s in sections)
            + "</ul></nav>")
    if products:
        parts.append("<h2>Products</h2>")
    for p in products or []:
        parts.append(f'<section id="product-{e(_slug(p.product))}" class="product" data-product="{e(p.product)}">')
        parts.append(f"<h3>Product {e(p.product)}</h3>")
        parts.append(f'<p class="recommendation">{e(p.sentence)}</p>')
        for t in p.tables:
            parts.append(_table_html(*t))
        parts.append("</section>")
    for s in sections:
        parts.append(f'<section id="{e(_slug(s.dataset))}" class="dataset" data-dataset="{e(s.dataset)}">')
        parts.append(f"<h2>{e(s.source)}</h2>")
        parts.append(f'<p class="recommendation">{e(s.sentence)}</p>')
        parts.append(f'<p class="meta">dataset <code>{e(s.dataset)}</code>, pipeline status {e(s.status)}</p>')
        if s.recipe:
            parts.append(f'<h3>Recipe</h3><pre class="recipe">{e(s.recipe)}</pre>')
        if s.notes:
            parts.append('<ul class="notes">' + "".join(f"<li>{e(n)}</li>" for n in s.notes) + "</ul>")
        if s.figures:
            parts.append("<h3>Figures</h3>")
        for f in s.figures:
            data = base64.b64encode(f.png).decode("ascii")
            saved = figure_paths.get((s.dataset, f.key))
            also = f" (also saved as {saved})" if saved else ""
            parts.append(f'<figure id="{e(_slug(s.dataset))}-{e(f.key)}"><img src="data:image/png;base64,{data}" '
                         f'alt="{e(f.alt)}"><figcaption><strong>{e(f.title)}.</strong> {e(f.caption)}'
                         f"{e(also)}</figcaption></figure>")
        if s.tables:
            parts.append("<h3>Tables</h3>")
        for t in s.tables:
            parts.append(_table_html(*t))
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


@dataclass
class WrittenReport:
    html: Path
    pngs: list[Path]
    datasets: list[str]
    sentences: dict[str, str]


def write_report(items: list[dict], out: Path, *, dataset: str | None = None, mix: dict[str, float] | None = None,
                 source: str = "", command: str = "layoutlab report") -> WrittenReport:
    """Write ``out`` (HTML) and its PNGs under ``<out stem>_files/``; every dataset in ``items``,
    or only ``dataset``. Raises UserError when there is nothing to report."""
    grouped = group_items(items)
    if not grouped:
        raise UserError(f"{source or 'the results'}: no layoutlab items (RUN, VARIANT, RESULT, ...) to report")
    if dataset is not None:
        if dataset not in grouped:
            raise UserError(f"{source or 'the results'}: no dataset {dataset!r}; known: {', '.join(sorted(grouped))}")
        grouped = {dataset: grouped[dataset]}
    with_results = [d for d, k in grouped.items() if k.get("RESULT")]
    if not with_results and dataset is None:
        raise UserError(f"{source or 'the results'}: no RESULT items in any dataset ({', '.join(sorted(grouped))}); "
                        "has the pipeline run?")
    sections = [build_section(d, grouped[d], mix=mix, mix_required=dataset is not None) for d in sorted(grouped)]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    files_dir = out.parent / f"{out.stem}_files"
    pngs, paths = [], {}
    for s in sections:
        for f in s.figures:
            if not pngs:
                files_dir.mkdir(exist_ok=True)
            path = files_dir / f"{_slug(s.dataset)}-{f.key}.png"
            path.write_bytes(f.png)
            pngs.append(path)
            paths[(s.dataset, f.key)] = f"{files_dir.name}/{path.name}"
    results = [i for i in items if i.get("kind", "RESULT") == "RESULT"]
    hosts = sorted({(r.get("host") or {}).get("machine", "?") for r in results})
    latencies = sorted({f"{r.get('latency_ms')} ms / {r.get('bandwidth_mbps')} Mbit/s" for r in results
                        if r.get("latency_ms") is not None})
    created = sorted(r["created_at"] for r in results if r.get("created_at"))
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    meta = (f"Written {now} by `{command}` from {source or 'the results'}: {len(results)} result items"
            + (f" measured {created[0][:16]} to {created[-1][:16]}" if created else "")
            + (f" on host(s) {', '.join(hosts)}" if results else "")
            + (f"; emulated S3 first byte / bandwidth: {', '.join(latencies)}" if latencies else "")
            + f". Cases grouped by {' × '.join(obs.CASE_GROUPING)}; metric names as on the CloudWatch dashboard "
            f"(namespace {obs.NAMESPACE}).")
    products = [build_product_section(i, items) for i in sorted(
        (i for i in items if i.get("kind") == "PRODUCT"), key=lambda i: i["product"])] if dataset is None else []
    page = render_html(sections, title="layoutlab report", meta=meta, figure_paths=paths, products=products)
    out.write_text(page, encoding="utf-8")
    return WrittenReport(out, pngs, [s.dataset for s in sections], {s.dataset: s.sentence for s in sections})
