"""The end of a run: the per-dataset summary, and failures turned into FAILURE items."""

from __future__ import annotations

import datetime
import json

from layoutlab.pipeline.payloads import FailureInput, SummarizeInput
from layoutlab.pipeline.repetitions import rounds_summary
from layoutlab.pipeline.values_check import check_against_original
from layoutlab.report.decision import decide
from layoutlab.report.summary import summarize


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def summarize_dataset(state: SummarizeInput, *, s3, store, outputs_bucket: str) -> dict:
    dataset_id = state.dataset_id
    items = store.items(dataset=dataset_id)
    results = [i for i in items if i["kind"] == "RESULT"]
    failures = [i for i in items if i["kind"] == "FAILURE"]
    planned = state.cases.planned if state.cases else None  # every round's cases (pipeline/repetitions.py)
    bench_failures = [f for f in failures if f.get("stage") == "bench"]
    variants = {i["variant"]: i for i in items if i["kind"] == "VARIANT"}
    # any file but the samples: each case's values compared with the original's read (checksum_ok set
    # before the decision, so a case that read other values is never ranked)
    values_check = check_against_original(results)
    run = next((i for i in items if i["kind"] == "RUN"), {})
    # The recommendation the report page opens with; the page itself (matplotlib) is built
    # by `layoutlab report`, outside the Lambda layer's size limit.
    decided = decide(results, variants=variants)
    summary = summarize(dataset_id, results, decided)
    from layoutlab.report.recipe import recipe

    recipes = {platform: recipe(d, platform, variants, results) for platform, d in decided["platforms"].items()}
    primary = decided.get("primary_platform")
    about = about_variables(run)
    summary.update(
        recommendation=decided["sentence"] + (f" It is about {about['sentence']}." if about["sentence"] else ""),
        variables=about["by_pattern"],
        values_check=values_check,
        recipe={platform: r for platform, r in recipes.items() if r},
        recipe_text=(recipes.get(primary) or {}).get("text") if primary else None,
        pareto_front={platform: d["pareto"]["front"] for platform, d in decided["platforms"].items()},
        cases_planned=planned,
        repetition_rounds=rounds_summary(state.cases, state.repetitions, results),
        cases_failed=len(bench_failures),
        failed_cases=[f.get("detail") for f in bench_failures][:50],
        variants={i["variant"]: {k: i.get(k) for k in ("uri", "size_bytes", "size_overhead", "convert_s")}
                  for i in variants.values()},
        finished=_now(),
    )
    key = f"summaries/{dataset_id}.json"
    s3.put_object(Bucket=outputs_bucket, Key=key, Body=json.dumps(summary, indent=2, default=str).encode(),
                  ContentType="application/json")
    summary["summary_uri"] = f"s3://{outputs_bucket}/{key}"
    store.put_summary(dataset_id, summary)
    store.update_run(dataset_id, status="SUCCEEDED", finished=summary["finished"],
                     results=len(results), cases_failed=len(bench_failures))
    return {"dataset_id": dataset_id, "summary_uri": summary["summary_uri"], "results": len(results),
            "cases_failed": len(bench_failures)}


TIMEOUT_ERRORS = ("States.Timeout", "Sandbox.Timedout")  # Step Functions' and Lambda's words for a step stopped


def _upload_url(source) -> str | None:
    if not isinstance(source, dict):
        return None
    if isinstance(source.get("url"), str):
        return source["url"]
    bucket, key = source.get("bucket"), source.get("key")
    return f"s3://{bucket}/{key}" if isinstance(bucket, str) and isinstance(key, str) else None


def about_variables(run: dict) -> dict:
    """The variables a study of any file read, per pattern label (the plan's family cases, kept in the RUN
    item), and one phrase naming them by role for the recommendation."""
    # open-list reads every object's metadata, no variable: it names none
    cases = [c for c in run.get("family_cases") or [] if not str(c.get("label", "")).startswith("open-list")]
    by_pattern = {c["label"]: c["variable"] for c in cases if c.get("label") and c.get("variable")}
    by_role: dict[str, list[str]] = {}
    for case in cases:
        names = by_role.setdefault(case.get("role") or "?", [])
        for name in str(case.get("variable") or "").split(", "):
            if name and name not in names:
                names.append(name)
    sentence = "; ".join(f"the {role} {', '.join(names)}" for role, names in by_role.items() if names)
    return {"by_pattern": by_pattern, "sentence": sentence or None}


# A FAILURE item a Fargate bench task wrote before it exited (handlers/task.py): Step Functions hears only the
# container's exit ("essential container exited with code 1"), so the item's own reason is kept.
FARGATE_TASK_RECORDED = "fargate-task"


def record_failure(failure: FailureInput, *, store) -> dict:
    """A FAILURE item from a caught Step Functions error ``{"Error", "Cause"}``."""
    stage, dataset_id, error = failure.stage, failure.dataset_id, failure.error
    cause = error.get("Cause") or ""
    try:  # Lambda errors arrive as a JSON document in Cause
        parsed = json.loads(cause)
        cause = parsed.get("errorMessage") or cause
    except (ValueError, AttributeError):
        pass
    detail = (failure.case or {}).get("case_id") or (failure.execution_id or "").rsplit(":", 1)[-1] or "pipeline"
    name = error.get("Error", "Error")
    # a task's own message may already start with its error's name ("UserError: ..."): named once
    reason = (cause if str(cause).startswith(f"{name}: ") else f"{name}: {cause}").strip()
    if name in TIMEOUT_ERRORS:  # (the platform's words say neither what ran nor why it stopped)
        reason += f" (the {stage} step ran past its time limit and was stopped)"
    if stage == "bench" and failure.case:  # a Fargate task wrote the case's own reason before it exited
        written = store.get_failure(dataset_id, stage, detail)
        if written and written.get("recorded_by") == FARGATE_TASK_RECORDED:
            reason = f"{written['reason']} (the Fargate task exited: {reason})"
    url = _upload_url(failure.source)
    if url and url not in reason:  # every FAILURE names the upload (issue 36: a timeout named neither key nor reason)
        reason = f"{url}: {reason}"
    store.put_failure(dataset_id, stage, detail, reason, error=error.get("Error"),
                      source=failure.source, execution_id=failure.execution_id, recorded=_now())
    if stage != "bench":
        store.update_run(dataset_id, status="FAILED", finished=_now(), failed_stage=stage, reason=reason)
    return {"dataset_id": dataset_id, "stage": stage, "reason": reason}
