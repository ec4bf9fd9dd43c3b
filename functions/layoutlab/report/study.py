"""One dataset's study in a line, as the docs' product tables give it: status, role, variables, families,
variants, cases, the values check, the choice per pattern and the study's time (the RUN item's started ->
finished). Read from the dataset's items of the results table (RUN, SUMMARY, RESULT, FAILURE)."""

from __future__ import annotations

import datetime


def study_seconds(run: dict) -> float | None:
    """The RUN item's started -> finished, in seconds; None while it runs."""
    if not (run.get("started") and run.get("finished")):
        return None
    return (datetime.datetime.fromisoformat(run["finished"])
            - datetime.datetime.fromisoformat(run["started"])).total_seconds()


def study_row(items: list[dict], name: str) -> dict:
    run = next((i for i in items if i["kind"] == "RUN"), {})
    summary = next((i for i in items if i["kind"] == "SUMMARY"), {})
    results = [i for i in items if i["kind"] == "RESULT"]
    # The summary's check compares every case's values with the original's; a sample's own checksum
    # (checksum_ok) exists only for layoutlab's generated samples, so it counts only without a summary.
    check = summary.get("values_check") or {}
    checked = [r for r in results if r.get("checksum_ok") is not None]
    return {
        "file": name, "status": run.get("status"), "role": (run.get("structure") or {}).get("role"),
        "seconds": study_seconds(run),
        "variables": summary.get("variables"),
        "families": sorted({r["pattern"].split(":")[0] for r in results}),
        "variants": sorted({r["variant"] for r in results}),
        "readers": sorted({r["reader"] for r in results}),
        "platforms": sorted({r["platform"] for r in results}),
        "cases": len(results), "cases_ok": sum(1 for r in results if r.get("status") == "ok"),
        "values_checked": check.get("checked", len(checked)),
        "values_equal": check.get("equal", sum(1 for r in checked if r["checksum_ok"])),
        "values_check": check.get("sentence"),
        "choice": {p: c.get("variant") for p, c in (summary.get("choice") or {}).items()},
        "recommendation": summary.get("recommendation"),
        # (a FAILURE's error is its class, e.g. States.TaskFailed; its reason says what happened)
        "failures": [": ".join(str(x)[:400] for x in (i.get("detail"), i.get("reason") or i.get("error")) if x)
                     for i in items if i["kind"] == "FAILURE"],
    }
