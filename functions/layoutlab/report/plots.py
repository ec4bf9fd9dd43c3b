"""The report's figures, drawn with matplotlib (Agg: no display, no network).

Each ``*_figure`` function takes plain data (lists of dicts, built from result
records by the ``*_data`` helpers below or by hand in a test) and returns a
matplotlib ``Figure``; ``png_bytes`` renders one. Metric names in captions and
axis labels are those of ``layoutlab.observability`` (the dashboard's), and
cases are grouped by its ``CASE_GROUPING`` (variant × pattern × reader ×
platform), so a figure here and a graph on the CloudWatch dashboard mean the
same thing.

The figures follow the seeds:
  * Nguyen et al. (2023) Fig. 2: heatmaps of wall time and peak memory over the
    chunk grid, time chunk (rows) × spatial chunk lat×lon (columns), one panel
    per access pattern, plus the time-series × map product; cells the model
    predicted (``report/model.py``) are hatched with italic labels, measured
    cells are plain with bold labels;
  * Earthmover (2025): read throughput against chunk size;
  * Lopez et al. / NSIDC: requests and bytes per variant and reader (paged vs
    original, aligned vs default readers), and the size overhead of each variant.
"""

from __future__ import annotations

import io
import math
import statistics
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # before pyplot: the report is drawn without a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from layoutlab import observability as obs  # noqa: E402
from layoutlab.report.budget import DEFAULT_SIZE_BUDGET  # noqa: E402
from layoutlab.report.decision import measured  # noqa: E402

HEATMAP_PATTERNS = ("timeseries-point", "map-timestep")
PRODUCT = "time-series × map"
DPI = 110
MISSING_COLOUR = "#e6e6e6"


def metric_label(spec: obs.MetricSpec, unit: str) -> str:
    """An axis label naming the dashboard's metric: ``BenchWallTime (s)``."""
    return f"{spec.name} ({unit})"


# -- data: from result records to plain rows ---------------------------------------------------
def _median_by(records: list[dict], field: str, keys: tuple[str, ...]) -> dict[tuple, float]:
    values: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        if not measured(r) or r.get(field) is None:
            continue
        values[tuple(r[k] for k in keys)].append(float(r[field]))
    return {k: statistics.median(v) for k, v in values.items()}


def case_medians(records: list[dict], field: str) -> dict[tuple, float]:
    """``CASE_GROUPING`` tuple (variant, pattern, reader, platform) -> median of ``field`` over the
    repetitions whose values checked out."""
    return _median_by(records, field, obs.CASE_GROUPING)


def _case(key: tuple) -> dict:
    return dict(zip(obs.CASE_GROUPING, key))


def zarr_chunks(variant: str, item: dict | None = None) -> tuple[int, int, int] | None:
    from layoutlab.report.model import variant_chunks

    return variant_chunks(variant, item)


def heatmap_cells(records: list[dict], variants: dict[str, dict], *, platform: str, reader: str,
                  field: str = "wall_s", predictions: list[dict] | None = None) -> list[dict]:
    """Cells ``{pattern, time_chunk, space_chunk, value, predicted}`` of the chunk-grid heatmap.

    Measured cells: the median of ``field`` for each Zarr variant read by ``reader`` on
    ``platform``. ``predictions`` (``model.predict_grid(...)["grid_predictions"]``) fill the
    cells nobody measured (``predicted=True``); a measured value always wins over a prediction.
    """
    medians = case_medians(records, field)
    cells: dict[tuple, dict] = {}
    for key, value in medians.items():
        case = _case(key)
        if case["platform"] != platform or case["reader"] != reader:
            continue
        chunks = zarr_chunks(case["variant"], variants.get(case["variant"]))
        if not chunks:
            continue
        cell = {"pattern": case["pattern"], "time_chunk": chunks[0], "space_chunk": f"{chunks[1]}x{chunks[2]}",
                "value": value, "predicted": False, "variant": case["variant"]}
        cells[(cell["pattern"], cell["time_chunk"], cell["space_chunk"])] = cell
    for p in predictions or []:
        key = (p["pattern"], int(p["time_chunk"]), p["space_chunk"])
        if key not in cells and p.get("predicted_s") is not None:
            cells[key] = {"pattern": p["pattern"], "time_chunk": int(p["time_chunk"]), "space_chunk": p["space_chunk"],
                          "value": float(p["predicted_s"]), "predicted": True}
    return sorted(cells.values(), key=lambda c: (c["pattern"], c["time_chunk"], _space_key(c["space_chunk"])))


def throughput_points(records: list[dict], variants: dict[str, dict], *, platform: str) -> list[dict]:
    """One point per Zarr variant × pattern × reader on ``platform``: chunk size (bytes of one
    uncompressed chunk), median throughput (Gbit/s of the values needed over the load time,
    the record's ``throughput_gbps``) and median points per second."""
    gbps = case_medians(records, "throughput_gbps")
    pps = case_medians(records, "points_per_s")
    itemsize = _itemsize(records)
    points = []
    for key in sorted(set(gbps) | set(pps)):
        case = _case(key)
        chunks = zarr_chunks(case["variant"], variants.get(case["variant"]))
        if case["platform"] != platform or not chunks:
            continue
        points.append({**case, "chunk_bytes": math.prod(chunks) * itemsize,
                       "throughput_gbps": gbps.get(key), "points_per_s": pps.get(key)})
    return points


def _itemsize(records: list[dict]) -> int:
    """Bytes per value, from the records (bytes_needed / points), else 4 (float32, GEOS's)."""
    for r in records:
        if r.get("points") and r.get("bytes_needed"):
            return max(1, round(r["bytes_needed"] / r["points"]))
    return 4


def traffic_rows(records: list[dict], *, platform: str) -> list[dict]:
    """One row per variant × pattern × reader on ``platform``: median requests and bytes moved."""
    requests = case_medians(records, obs.CASE_METRIC_FIELDS[obs.BENCH_REQUESTS])
    moved = case_medians(records, obs.CASE_METRIC_FIELDS[obs.BENCH_BYTES])
    rows = []
    for key in sorted(set(requests) | set(moved)):
        case = _case(key)
        if case["platform"] == platform:
            rows.append({**case, "requests": requests.get(key), "bytes": moved.get(key)})
    return rows


def size_rows(variants: dict[str, dict]) -> list[dict]:
    """One row per variant: bytes stored to read it, overhead over the original and its size budget
    (``budget.budget_rows``: references count what they point at; older items without a recorded
    budget get the default)."""
    from layoutlab.report.budget import budget_rows

    return [{"variant": row["variant"], "size_bytes": row["storage_bytes"], "size_overhead": row["overhead"],
             "size_budget": row["size_budget"], "within_budget": row["within_budget"],
             "references": row["references"]}
            for row in budget_rows(variants) if row["storage_bytes"] is not None]


# -- figures -----------------------------------------------------------------------------
def _space_key(label: str) -> tuple[int, int]:
    lat, lon = (int(x) for x in label.split("x"))
    return (lat * lon, lat)


def _fmt(value: float) -> str:
    if float(value).is_integer():
        return f"{int(value)}"  # counts (requests)
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 0.1:
        return f"{value:.2f}"
    return f"{value:.2g}"


def heatmap_figure(cells: list[dict], *, metric: str, unit: str, title: str,
                   patterns=HEATMAP_PATTERNS, product: bool = True,
                   highlight: tuple[int, str] | None = None) -> Figure:
    """Nguyen et al.'s Fig. 2: one heatmap per pattern over time chunk × spatial chunk.

    ``cells``: ``{pattern, time_chunk, space_chunk ("LATxLON"), value, predicted}``.
    With ``product`` (and both a time-series and a map pattern) a last panel shows the
    product of the two, their balanced choice; a product cell is predicted if either
    factor is. Colours are on a log scale, one per panel. ``highlight``: (time chunk,
    "LATxLON") of the model's recommended shape, framed in red on the product panel.
    """
    present = [p for p in patterns if any(c["pattern"] == p for c in cells)]
    if not present:
        raise ValueError("no heatmap cells for any of the patterns " + ", ".join(patterns))
    times = sorted({c["time_chunk"] for c in cells})
    spaces = sorted({c["space_chunk"] for c in cells}, key=_space_key)
    panels = [(p, {(c["time_chunk"], c["space_chunk"]): c for c in cells if c["pattern"] == p}) for p in present]
    if product and len(present) >= 2:
        a, b = panels[0][1], panels[1][1]
        both = {k: {"value": a[k]["value"] * b[k]["value"], "predicted": a[k]["predicted"] or b[k]["predicted"]}
                for k in a.keys() & b.keys()}
        panels.append((PRODUCT, both))
    # one panel under the other: a page is narrower than three grids of a dozen columns side by side
    width = max(7.0, 0.62 * len(spaces) + 2.2)
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, len(panels) * (0.36 * len(times) + 1.9) + 0.6),
                             dpi=DPI, squeeze=False, layout="constrained")
    measured_any = predicted_any = highlighted = False
    for ax, (name, grid) in zip(axes[:, 0], panels):
        values = np.full((len(times), len(spaces)), np.nan)
        for (t, s), c in grid.items():
            values[times.index(t), spaces.index(s)] = c["value"]
        positive = values[np.isfinite(values) & (values > 0)]
        norm = LogNorm(vmin=positive.min(), vmax=max(positive.max(), positive.min() * 1.01)) if positive.size else None
        cmap = plt.get_cmap("viridis_r").with_extremes(bad=MISSING_COLOUR)
        image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=norm, aspect="auto", origin="lower")
        for (t, s), c in grid.items():
            i, j = times.index(t), spaces.index(s)
            shade = norm(c["value"]) if norm and c["value"] > 0 else 0
            colour = "white" if shade > 0.55 else "black"
            if c["predicted"]:
                predicted_any = True
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///",
                                           edgecolor=(1, 1, 1, 0.45), linewidth=0))
                ax.text(j, i, _fmt(c["value"]), ha="center", va="center", fontsize=7, style="italic", color=colour)
            else:
                measured_any = True
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.6))
                ax.text(j, i, _fmt(c["value"]), ha="center", va="center", fontsize=8, weight="bold", color=colour)
        if highlight and name == PRODUCT and highlight[0] in times and highlight[1] in spaces:
            i, j = times.index(highlight[0]), spaces.index(highlight[1])
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.4,
                                       linestyle="--"))
            highlighted = True
        ax.set_xticks(range(len(spaces)), spaces, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(times)), [str(t) for t in times], fontsize=8)
        ax.set_xlabel("spatial chunk (lat × lon)")
        ax.set_ylabel("time chunk")
        ax.set_title(name if name != PRODUCT else f"{PRODUCT} product", fontsize=10)
        colorbar = fig.colorbar(image, ax=ax, shrink=0.9)
        # plain numbers on the log colour scale (the default writes 1.7 x 10^2 for 170)
        colorbar.ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        colorbar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt(v)))
        if norm and norm.vmax / norm.vmin < 3:  # too narrow a range for 1-2-5 ticks: label the minor ones
            colorbar.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: _fmt(v)))
        else:
            colorbar.ax.yaxis.set_minor_formatter(NullFormatter())
        colorbar.ax.tick_params(labelsize=7, which="both")
        colorbar.set_label(f"{metric} ({unit})" if name != PRODUCT else f"{metric} product ({unit}²)", fontsize=8)
    handles = []
    if measured_any:
        handles.append(Patch(facecolor="white", edgecolor="black", linewidth=1.6, label="measured (bold)"))
    if predicted_any:
        handles.append(Patch(facecolor="#bbbbbb", edgecolor="white", hatch="///", label="predicted by the model (italic)"))
    handles.append(Patch(facecolor=MISSING_COLOUR, label="not measured"))
    if highlighted:
        handles.append(Patch(facecolor="none", edgecolor="red", linestyle="--", linewidth=2,
                             label="model's best shape"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    return fig


def throughput_figure(points: list[dict], *, title: str) -> Figure:
    """Earthmover's plot (throughput against chunk size) beside Nguyen et al.'s Fig. 3A
    (points per second against chunk size), one line per pattern × reader, log axes."""
    if not points:
        raise ValueError("no throughput points")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=DPI, layout="constrained")
    series: dict[tuple, list[dict]] = defaultdict(list)
    for p in points:
        series[(p["pattern"], p["reader"])].append(p)
    readers = sorted({p["reader"] for p in points})
    markers = dict(zip(readers, "osD^v<>"))
    for (pattern, reader), group in sorted(series.items()):
        group = sorted(group, key=lambda p: p["chunk_bytes"])
        x = [p["chunk_bytes"] / 1e6 for p in group]
        label = pattern if len(readers) == 1 else f"{pattern} ({reader})"
        for ax, field in ((left, "throughput_gbps"), (right, "points_per_s")):
            y = [p[field] for p in group]
            if any(v is not None and v > 0 for v in y):
                ax.plot(x, [v if v and v > 0 else np.nan for v in y], marker=markers[reader], label=label)
    for ax, label in ((left, "throughput of the values needed (Gbit/s)"), (right, "processing speed (points/s)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("chunk size (MB, uncompressed)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    left.set_title("throughput vs chunk size (Earthmover)", fontsize=10)
    right.set_title("speed vs chunk size (Nguyen et al. Fig. 3A)", fontsize=10)
    right.legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=11)
    return fig


def traffic_figure(rows: list[dict], *, title: str) -> Figure:
    """Requests (left) and MB moved (right) per variant, one row per pattern, one bar per reader
    (horizontal bars, log scale: a point read moves kilobytes, a whole-chunk read megabytes)."""
    if not rows:
        raise ValueError("no request/byte rows")
    patterns = sorted({r["pattern"] for r in rows})
    variants = sorted({r["variant"] for r in rows})
    readers = sorted({r["reader"] for r in rows})
    colours = dict(zip(readers, plt.get_cmap("tab10").colors))
    index = {(r["pattern"], r["variant"], r["reader"]): r for r in rows}
    height = 0.8 / len(readers)
    fig, axes = plt.subplots(len(patterns), 2, dpi=DPI, squeeze=False, layout="constrained", sharex="col",
                             figsize=(10, len(patterns) * (0.32 * len(variants) * max(1, len(readers) / 1.5) + 0.7) + 0.8))
    for row, pattern in enumerate(patterns):
        for col, (field, scale, label) in enumerate((("requests", 1, metric_label(obs.BENCH_REQUESTS, "count")),
                                                     ("bytes", 1e6, metric_label(obs.BENCH_BYTES, "MB")))):
            ax = axes[row][col]
            for k, reader in enumerate(readers):
                ys, xs = [], []
                for i, variant in enumerate(variants):
                    r = index.get((pattern, variant, reader))
                    if r and r.get(field) is not None:
                        ys.append(i + (k - (len(readers) - 1) / 2) * height)
                        xs.append(max(r[field] / scale, 1e-3))
                bars = ax.barh(ys, xs, height=height, color=colours[reader], label=reader)
                ax.bar_label(bars, labels=[_fmt(x) for x in xs], fontsize=7, padding=2)
            ax.set_xscale("log")
            ax.set_yticks(range(len(variants)), variants if col == 0 else [], fontsize=8)
            ax.invert_yaxis()
            ax.grid(True, axis="x", alpha=0.3)
            ax.margins(x=0.25)
            ax.set_title(f"{pattern}: {label}", fontsize=9)
    handles = [Patch(color=colours[r], label=r) for r in readers]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(readers), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    return fig


def size_figure(rows: list[dict], *, title: str) -> Figure:
    """Bytes stored to read each variant, labelled with its overhead over the original against its size
    budget; red when over it. A dotted line marks the original's size plus the (smallest) budget."""
    if not rows:
        raise ValueError("no variant sizes")
    rows = sorted(rows, key=lambda r: r["variant"])
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.6), dpi=DPI, layout="constrained")
    sizes = [r["size_bytes"] / 1e6 for r in rows]

    def over(r):
        within = r.get("within_budget")
        if within is None and r["size_overhead"] is not None:  # rows built by hand: judge them by the default
            within = r["size_overhead"] <= (r.get("size_budget") or DEFAULT_SIZE_BUDGET)
        return None if within is None else not within

    colours = ["#888888" if over(r) is None else ("#c0504d" if over(r) else "#4f81bd") for r in rows]
    bars = ax.barh(range(len(rows)), sizes, color=colours)
    labels = []
    for size, r in zip(sizes, rows):
        label = f"{size:.1f} MB"
        if r["size_overhead"] is not None:
            budget = r.get("size_budget") or DEFAULT_SIZE_BUDGET
            label += f"  {r['size_overhead']:+.1%} / {budget:.0%}{' OVER' if over(r) else ''}"
        labels.append(label)
    ax.bar_label(bars, labels=labels, fontsize=8, padding=3)
    names = [r["variant"] + (f" (refs + {r['references']})" if r.get("references") else "") for r in rows]
    ax.set_yticks(range(len(rows)), names, fontsize=8)
    ax.invert_yaxis()
    original = next((r for r in rows if r["variant"] == "original"), None)
    if original:
        budget = min(r.get("size_budget") or DEFAULT_SIZE_BUDGET for r in rows)
        ax.axvline(original["size_bytes"] / 1e6 * (1 + budget), color="#c0504d", linestyle=":", linewidth=1)
    ax.set_xlabel(f"bytes stored to read it: {metric_label(obs.CONVERT_OUTPUT_BYTES, 'MB')} "
                  "(references: + what they point at)", fontsize=8)
    ax.margins(x=0.5)
    ax.set_title(title + "\n(overhead / size budget; red: over it; dotted: the original + the budget)", fontsize=10)
    return fig


def pareto_figure(points: list[dict], *, title: str, read_time: str) -> Figure:
    """Read time against stored size, the Pareto front (decision.pareto_front) marked."""
    usable = [p for p in points if p.get("read_s") is not None and p.get("size_bytes") is not None]
    if not usable:
        raise ValueError("no Pareto points with both read time and size")
    fig, ax = plt.subplots(figsize=(6.5, 4.2), dpi=DPI, layout="constrained")
    for p in usable:
        front = p.get("on_front")
        ax.scatter(p["size_bytes"] / 1e6, p["read_s"], s=60, marker="o" if front else "x",
                   color="#c0504d" if front else "#666666", zorder=3)
        ax.annotate(p["variant"], (p["size_bytes"] / 1e6, p["read_s"]), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel(metric_label(obs.CONVERT_OUTPUT_BYTES, "MB"))
    ax.set_ylabel(f"read time (s): {read_time}", fontsize=8)
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.2, y=0.15)  # room for the variant names beside the points
    ax.legend(handles=[plt.Line2D([], [], marker="o", color="#c0504d", linestyle="", label="on the Pareto front"),
                       plt.Line2D([], [], marker="x", color="#666666", linestyle="", label="dominated")],
              fontsize=8)
    ax.set_title(title, fontsize=10)
    return fig


def comparison_figure(comparison: dict, *, variant: str, title: str, baseline: str = "original") -> Figure:
    """The kept (or first-chosen) variant's time over the original's per pattern, with the 95% bootstrap
    interval of that ratio (decision.compare); 1 = no difference, left of it = faster than ``baseline``
    (the original; for the seeds' effect, the original read with h5py's defaults)."""
    rows = [(pattern, c) for pattern, c in sorted(comparison.items())]
    if not rows:
        raise ValueError("no comparison with the original")
    fig, ax = plt.subplots(figsize=(6.5, max(2.4, 0.8 + 0.45 * len(rows))), dpi=DPI, layout="constrained")
    for y, (pattern, c) in enumerate(rows):
        if c.get("interval"):
            low, high = c["interval"]
            ax.errorbar(c["ratio"], y, xerr=[[c["ratio"] - low], [high - c["ratio"]]], fmt="o", color="#1f4e79",
                        capsize=4)
        else:  # too few repetitions for an interval: the point alone, hollow
            ax.plot(c["ratio"], y, "o", mfc="none", color="#666666")
        ax.annotate(c["verdict"], (c["ratio"], y), xytext=(0, 7), textcoords="offset points", fontsize=7,
                    ha="center")
    ax.axvline(1.0, color="#c0504d", linestyle="--", linewidth=1)
    values = [v for _, c in rows for v in [c["ratio"], *(c.get("interval") or [])]] + [1.0]
    if max(values) / min(values) > 5:  # ratios an order of magnitude apart: a log axis, ticks still as "0.1x"
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}x"))
    ax.set_yticks(range(len(rows)), [pattern for pattern, _ in rows], fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel(f"{variant} time / {baseline} time\n(median over repetitions; bar: 95% bootstrap interval)",
                  fontsize=8)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(title, fontsize=10)
    return fig


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes; the figure is closed (pyplot keeps figures alive otherwise)."""
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=DPI)
    finally:
        plt.close(fig)
    return buffer.getvalue()
