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
    return lines + decision_lines(summary)


def _usd(value) -> str:
    from layoutlab.report.decision import usd

    return usd(value)


def budget_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Variant: stored size needed, overhead over the original, the budget and the verdict, the page size."""
    from layoutlab.report.budget import budget_text
    from layoutlab.units import size_label

    body = []
    for row in rows:
        stored = "-" if row["storage_bytes"] is None else f"{row['storage_bytes'] / 1e6:.1f}"
        what = f"references + {row['references']}" if row["references"] else (row["kind"] or "")
        # (the page alone: why it was chosen is the VARIANT item's page_size_choice, in the HTML report)
        page = size_label(row["page_size"]) if row["page_size"] else "-"
        body.append([row["variant"] + (" [!]" if row["flag"] else ""), what, stored, budget_text(row), page])
    return ["variant", "what is stored", "MB stored to read it", "overhead vs size budget", "page size"], body


def cost_rows_table(costs: dict[str, dict], patterns: list[str] | None = None,
                    detail: bool = True) -> tuple[list[str], list[list[str]]]:
    """Variant: conversion $ once (with how each step was priced, or its seconds when not ``detail``),
    storage $ a month, $ per 1,000 reads of each pattern."""
    patterns = patterns or sorted({p for row in costs.values() for p in row.get("read_usd_per_1000", {})})
    body = []
    for variant, row in sorted(costs.items(), key=lambda kv: (kv[0] != "original", kv[0])):
        steps = row.get("conversion") or {}
        if detail:
            how = "; ".join(f"{name}: {step.get('billed')}" for name, step in steps.items()) or "no conversion"
        else:
            seconds = [step.get("convert_s") for step in steps.values()]
            how = "-" if any(x is None for x in seconds) else f"{sum(seconds):.1f}"
        body.append([variant, _usd(row.get("conversion_usd")), how, _usd(row.get("storage_usd_per_month"))]
                    + [_usd(row.get("read_usd_per_1000", {}).get(p)) if p in row.get("read_usd_per_1000", {}) else "-"
                       for p in patterns])
    return (["variant", "convert $ (once)", "priced as" if detail else "convert s", "S3 $ / month"]
            + [f"{p} $ / 1,000 reads" if detail else f"{p} $/1k reads" for p in patterns], body)


def decision_lines(summary: dict) -> list[str]:
    """The SUMMARY item's size budget, costs and seeds' effect as text (what `layoutlab results --kind
    SUMMARY` and the demo's report print under the winners)."""
    from layoutlab.report.decision import paged_reader_effect_text

    lines = []
    if summary.get("size_budget"):
        header, rows = budget_table(summary["size_budget"])
        lines += ["size budget ([!]: a paged variant, or references, over its budget):"]
        lines += ["  " + line for line in render(header, rows).splitlines()]
    for platform, costs in sorted((summary.get("costs") or {}).items()):
        if costs:
            yardstick = summary.get("cost_yardstick") or {}
            header, rows = cost_rows_table(costs, detail=False)
            lines += [f"cost on {platform} (reads: the best reader's measured time and requests"
                      + (f"; weighed over {yardstick['months']} months at {yardstick['reads_per_month']:,} reads "
                         "a month" if yardstick else "") + "):"]
            lines += ["  " + line for line in render(header, rows).splitlines()]
    if summary.get("costs_note"):
        lines.append(summary["costs_note"])
    for platform, effect in sorted((summary.get("paged_reader_effect") or {}).items()):
        if effect:
            lines.append(f"{platform}: {paged_reader_effect_text(effect)}")
    if (summary.get("repetition_rounds") or {}).get("text"):
        lines.append(summary["repetition_rounds"]["text"])
    return lines
