"""The bench step: run one case cold on one core, store its RESULT item, emit its metrics.

A case must run in a fresh process: a warm Lambda container (or a Fargate task
that ran something before) would carry imports and caches from the previous
case, so the case runs in a child interpreter (``runner.run_case_isolated``),
on Lambda, on Fargate and in the local run alike (which runs this handler from
the deployment artifacts, as Lambda does).
"""

from __future__ import annotations

from layoutlab.errors import UserError
from layoutlab.pipeline.payloads import BenchCase


class BenchCaseFailed(UserError):
    """The case could not be measured (bad target, pattern not fitting, wrong values)."""


def case_for_runner(case: BenchCase) -> dict:
    from layoutlab.bench.runner import CASE_KEYS

    return {k: v for k, v in case.to_event().items() if k in CASE_KEYS}


def measure(case: BenchCase) -> dict:
    from layoutlab.bench import runner

    return runner.run_case_isolated(case_for_runner(case), memory_error_ends_task=True)


def run_bench_case(case: BenchCase, *, store, emit=None) -> dict:
    skipped = variant_not_made(case.dataset_id, case.variant, store)
    if skipped:  # its variant was not made (paging "auto" that could not help): nothing to measure, no failure
        return {"case_id": case.case_id, "skipped": skipped}
    record = measure(case)
    record["case_id"] = case.case_id
    if record.get("status") == "error" or record.get("error"):
        raise BenchCaseFailed(record.get("error") or "case failed")
    if record.get("checksum_ok") is False:
        raise BenchCaseFailed(f"{case.target}: values read by {case.reader} for {case.pattern} "
                              "differ from the source")
    store.put_result(record)
    if emit is not None:
        emit_case_metrics(emit, record)
    return {"case_id": case.case_id, "wall_s": record.get("wall_s"), "requests": record.get("requests")}


def variant_not_made(dataset_id: str, variant: str, store) -> str | None:
    """Why ``variant`` of the dataset was not made (SKIPPED or FAILURE VARIANT item), or None (made, or the
    original, which is never converted)."""
    if variant == "original":
        return None
    item = store.get_variant(dataset_id, variant)
    if item and item.get("status") == "FAILURE":  # (its FAILURE item says why; the case has nothing to read)
        return f"variant not made: {item.get('reason') or 'its conversion failed'}"
    return (item.get("reason") or "variant skipped") if item and item.get("status") == "SKIPPED" else None


def emit_case_metrics(emit, record: dict) -> None:
    """``emit(spec, value, **dimensions)`` once per metric of a case (see handlers._runtime.emit)."""
    from layoutlab import observability as obs

    values = {spec: record.get(field) for spec, field in obs.CASE_METRIC_FIELDS.items()}
    dims = {dimension: record[dimension] for dimension in obs.CASE_GROUPING}  # dimension names are record fields
    for spec, value in values.items():
        if value is not None:
            emit(spec, value, **dims)
