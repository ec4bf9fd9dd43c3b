"""Plain-text tables of results: what the demo prints and writes to report.md."""

from __future__ import annotations

import statistics
from collections import defaultdict


def median_table(results: list[dict], platform: str) -> tuple[list[str], list[list[str]]]:
    """Variant x pattern: median wall time (s) over repetitions, best reader, on one platform."""
    times: dict[tuple, list[float]] = defaultdict(list)
    for r in results:
        if r.get("platform") == platform and r.get("wall_s") is not None:
            times[(r["variant"], r["pattern"], r["reader"])].append(float(r["wall_s"]))
    best: dict[tuple, float] = {}
    for (variant, pattern, _), walls in times.items():
        value = statistics.median(walls)
        best[(variant, pattern)] = min(value, best.get((variant, pattern), float("inf")))
    variants = sorted({v for v, _ in best})
    patterns = sorted({p for _, p in best})
    rows = [[v] + [f"{best[(v, p)]:.3f}" if (v, p) in best else "-" for p in patterns] for v in variants]
    return ["variant \\ median wall s"] + patterns, rows


def requests_table(results: list[dict], platform: str) -> tuple[list[str], list[list[str]]]:
    """Variant x pattern: median GET+HEAD requests and MB moved per case."""
    cells: dict[tuple, list[tuple]] = defaultdict(list)
    for r in results:
        if r.get("platform") == platform and r.get("requests") is not None:
            cells[(r["variant"], r["pattern"])].append((r["requests"], r.get("bytes_transferred") or 0))
    variants = sorted({v for v, _ in cells})
    patterns = sorted({p for _, p in cells})
    rows = []
    for v in variants:
        row = [v]
        for p in patterns:
            values = cells.get((v, p))
            if values:
                requests = statistics.median(x[0] for x in values)
                moved = statistics.median(x[1] for x in values) / 1e6
                row.append(f"{requests:.0f} req / {moved:.2f} MB")
            else:
                row.append("-")
        rows.append(row)
    return ["variant \\ requests, bytes"] + patterns, rows


def render(header: list[str], rows: list[list[str]], markdown: bool = False) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def summary_lines(summary: dict) -> list[str]:
    """One line per platform and pattern: the winner and the bias; then the balanced choice."""
    lines = []
    for platform, data in sorted(summary.get("platforms", {}).items()):
        for pattern, p in sorted(data["patterns"].items()):
            lines.append(f"{platform:<14} {pattern:<24} best {p['best_variant']:<22} {p['best_wall_s']:.3f} s"
                         f"  (slowest {p['worst_variant']} {p['worst_wall_s']:.3f} s, bias {p['performance_bias']:.1f}x)")
        balanced = data.get("balanced_product")
        worst = data.get("min_worst_slowdown")
        if balanced:
            lines.append(f"{platform:<14} balanced (min time-series x map time): {balanced['variant']}")
        if worst:
            lines.append(f"{platform:<14} smallest worst-case slowdown: {worst['variant']} "
                         f"({worst['worst_slowdown']:.1f}x of the best at worst)")
    return lines
