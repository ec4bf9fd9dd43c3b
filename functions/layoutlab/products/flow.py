"""A product's granules through the pipeline: admitted at the plan step, counted at its end.

* ``plan_granule`` (the plan handler): which product the granule is (``signature``), its role
  (``state.admit``): a *study* granule gets today's whole plan (``planning.plan_dataset``); a
  *production* granule of a decided product gets one convert task, the chosen variant only, written
  under ``products/<product>/<dataset_id>/`` and no case; a *check* granule gets that task and the cases
  of the original and the chosen variant (the drift benchmark). A granule of a product still being
  studied once its study slots are taken raises ``ProductStudying``: the state machine retries the plan
  step (with backoff) until the decision is made.
* ``finish_production`` / ``after_summary`` (the summarize step): a production granule's bytes and
  seconds onto the PRODUCT item; a study granule counted, and once the round's N are summarized the
  product's decision (``decision.product_decision``); a check granule's ratio against the decision's
  interval, a drift sending the product back to study.
* ``after_failure`` (record_failure): a failed study granule frees its slot.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from layoutlab.products import decision as product_decisions
from layoutlab.products import signature as signatures
from layoutlab.products import state

LOG = logging.getLogger(__name__)
PRODUCTS_PREFIX = "products/"


def _metadata(s3, source: dict) -> dict:
    kwargs = {"Bucket": source["bucket"], "Key": source["key"]}
    if source.get("version_id"):
        kwargs["VersionId"] = source["version_id"]
    return s3.head_object(**kwargs).get("Metadata", {}) or {}


def identify(source: dict, source_url: str, plan: dict, *, s3) -> tuple[str, str, str | None] | None:
    """(product, named_by, signature) of the granule, or None when it belongs to no product (named by no
    one, and the plan's ``products.by_structure`` is off)."""
    from layoutlab.guard import run_guarded

    named = signatures.named_product(source["key"], _metadata(s3, source))
    settings = state.ProductSettings.from_plan(plan)
    if named is None and not settings.by_structure:
        return None
    # Guarded like the plan step's own reading of the upload (a damaged file is stopped, not waited for).
    signature = run_guarded(signatures.file_signature, source_url, path=source_url)
    return (named, "uploader", signature) if named else (signature, "structure", signature)


def product_uri(outputs_bucket: str, product: str, dataset_id: str, spec: dict) -> str:
    from layoutlab import kinds

    return f"s3://{outputs_bucket}/{PRODUCTS_PREFIX}{product}/{dataset_id}/{spec['name']}{kinds.get(spec['kind']).suffix}"


def plan_granule(execution, *, s3, store, settings):
    """The plan step for one upload: a product's study, production or check granule, or (no product) the
    study of one dataset as before. Returns the plan step's ``PlanOutput``."""
    from layoutlab.pipeline import plan as plans
    from layoutlab.pipeline.planning import plan_dataset
    from layoutlab.storage import versioned_url

    source = execution.source
    source_url = versioned_url(source["bucket"], source["key"], source.get("version_id"))
    size = int(source.get("size") or source.get("size_bytes") or 0)
    plan = plans.merge_plan(execution.plan, ceilings=settings.ceilings, input_bytes=size or None)
    found = identify(source, source_url, plan, s3=s3)
    if found is None:
        return plan_dataset(execution, s3=s3, store=store, settings=settings)
    name, named_by, signature = found
    admission = state.admit(store, name, execution.dataset_id, size=size, signature=signature, named_by=named_by,
                            settings=state.ProductSettings.from_plan(plan), plan=plan)
    if admission.role == "study":
        output = plan_dataset(execution, s3=s3, store=store, settings=settings)
    else:
        output = plan_production(execution, admission, plan, s3=s3, store=store, settings=settings)
    store.update_run(execution.dataset_id, product=name, product_role=admission.role,
                     product_number=admission.number, study_round=int(admission.item["study_round"]),
                     product_signature=signature)
    return output


def plan_production(execution, admission: state.Admission, plan: dict, *, s3, store, settings):
    """One convert task (the decided variant, resolved for this granule), and for a check granule the cases
    of the original and that variant; the lists written where the state machine reads them."""
    import json

    from layoutlab import kinds
    from layoutlab.guard import run_guarded
    from layoutlab.pipeline import plan as plans
    from layoutlab.pipeline.facts import dataset_facts
    from layoutlab.pipeline.payloads import CaseList, Concurrency, ConvertTask, PlanOutput, WorkUnits
    from layoutlab.pipeline.planning import resolve_platforms
    from layoutlab.storage import versioned_url

    dataset_id, source = execution.dataset_id, execution.source
    source_url = versioned_url(source["bucket"], source["key"], source.get("version_id"))
    size = int(source.get("size") or 0)
    chosen = (admission.item.get("decision") or {}).get("variant")
    if not chosen:
        raise state.ProductError(f"product {admission.product!r} is decided but names no variant: "
                                 f"'layoutlab product decide {admission.product} --variant V'")
    facts = run_guarded(dataset_facts, source_url, plan, path=source_url)
    platforms, _ = resolve_platforms(plan["platforms"], settings.platforms)
    plan = {**plan, "platforms": platforms}
    specs = {s["name"]: s for s in plans.variant_specs(plan, facts)}
    if chosen not in specs:
        reason = (f"{source_url}: the product's variant {chosen!r} does not resolve for this granule (its plan "
                  f"gives {', '.join(sorted(specs))})")
        state.mark_for_study(store, admission.product, reason, by="layoutlab")
        raise state.ProductError(reason + f"; product {admission.product!r} goes back to study")
    spec = {**specs[chosen], "uri": product_uri(settings.outputs_bucket, admission.product, dataset_id, specs[chosen])}
    plans.check_dataset_ceilings(plan, [spec], facts, settings.ceilings)
    convert_on = "fargate" if size > settings.fargate_convert_above_bytes else "lambda"
    convert_tasks = []
    if not kinds.get(spec["kind"]).converted:  # the product keeps its granules as shipped: nothing to write
        spec = {**spec, "uri": source_url}
        store.put_variant(dataset_id, spec["name"], uri=source_url, format=spec["format"],
                          variant_kind=spec["kind"], size_bytes=size, status="READY", convert_s=0.0)
    else:
        convert_tasks.append(replace(ConvertTask(dataset_id=dataset_id, source=source, variant=spec), phase="whole",
                                     convert_on=convert_on))
    cases_ref = CaseList(key=None, count=0, round=1, planned=0)
    if admission.role == "check":
        original = next((s for s in specs.values() if s["kind"] == "original"), None)
        if original is None:
            raise state.ProductError(f"product {admission.product!r}: its plan has no 'original' variant to check "
                                     f"{chosen} against")
        original = {**original, "uri": source_url}
        store.put_variant(dataset_id, original["name"], uri=source_url, format=original["format"],
                          variant_kind="original", size_bytes=size, status="READY")
        produced = [original] + ([spec] if spec["name"] != original["name"] else [])
        cases = plans.expand_cases(plan, facts, dataset_id, produced)
        key = f"runs/{dataset_id}/cases.json"
        s3.put_object(Bucket=settings.outputs_bucket, Key=key, Body=json.dumps(cases).encode(),
                      ContentType="application/json")
        cases_ref = CaseList(key=key, count=len(cases), round=1, planned=len(cases))
    concurrency = dict(settings.max_concurrency)
    store.update_run(dataset_id, kind_of_data=facts.role or facts.kind, variants=[spec["name"]],
                     cases=cases_ref.count, rounds=1, platforms=platforms)
    schedule = plans.repetition_schedule(plan)
    return PlanOutput(
        convert_tasks=convert_tasks, publish_tasks=[], work_units=WorkUnits(key=None, count=0), cases=cases_ref,
        # a drift check runs one round: its ratio is compared with the decision's interval, not decided again
        repetitions=replace(schedule, max_rounds=1),
        results_prefix=f"map-runs/{dataset_id}/",
        max_concurrency=Concurrency(convert=concurrency["convert"], work_units=concurrency["work_units"],
                                    bench=concurrency["bench"]),
        tolerated_failure_percentage=settings.tolerated_failure_percentage)


def _run(items: list[dict]) -> dict:
    return next((i for i in items if i.get("kind") == "RUN"), {})


def finish_production(dataset_id: str, items: list[dict], *, store) -> dict | None:
    """A production granule's end (no SUMMARY: nothing was benchmarked); None for any other granule."""
    run = _run(items)
    if run.get("product_role") != "production":
        return None
    product = run["product"]
    wanted = (run.get("variants") or [None])[0]  # the product's variant, as the plan step resolved it
    made = next((i for i in items if i.get("kind") == "VARIANT" and i.get("variant") == wanted), None)
    now = state.now()
    if made is None or made.get("status") != "READY":
        reason = (made or {}).get("reason") or "the convert step recorded no variant"
        state.update_granule(store, product, dataset_id, status="FAILED", reason=reason, finished=now)
        state._update(store, product, "SET failed_granules = failed_granules + :one", {":one": 1})
        store.update_run(dataset_id, status="FAILED", finished=now, failed_stage="convert", reason=reason)
        return {"dataset_id": dataset_id, "product": product, "role": "production", "status": "FAILED",
                "reason": reason}
    size, seconds = int(made.get("size_bytes") or 0), float(made.get("convert_s") or 0.0)
    state.update_granule(store, product, dataset_id, status="CONVERTED", bytes_out=size, convert_s=seconds,
                         uri=made.get("uri"), variant=made.get("variant"), platform=made.get("platform"), finished=now)
    state.add_output(store, product, bytes_out=size, convert_s=seconds, production=True)
    store.update_run(dataset_id, status="SUCCEEDED", finished=now, results=0, cases_failed=0)
    return {"dataset_id": dataset_id, "product": product, "role": "production", "status": "CONVERTED",
            "uri": made.get("uri"), "size_bytes": size, "bytes_in": int((run.get("source") or {}).get("size") or 0),
            "bytes_out": size}


def after_summary(dataset_id: str, items: list[dict], summary: dict, *, store) -> dict | None:
    """After a study or check granule's SUMMARY: count it, decide the product, or judge the drift."""
    run = _run(items)
    product, role = run.get("product"), run.get("product_role")
    if not product or role not in ("study", "check"):
        return None
    round_ = int(run.get("study_round") or 1)
    if role == "check":
        return _judge_check(store, product, dataset_id, items, summary)
    item = state.record_studied(store, product, dataset_id, round_)
    state.update_granule(store, product, dataset_id, status="STUDIED", finished=state.now())
    if item is None or item.get("state") != state.STUDYING or int(item["study_round"]) != round_:
        return None
    if len(item.get("studied") or []) < int(item["study_granules"]):
        return None
    summaries = [s for s in (store.items(dataset=d, kind="SUMMARY") for d in item["studied"]) for s in s]
    decided = product_decisions.product_decision(summaries)
    if not decided["variant"]:
        state.mark_for_study(store, product, decided["why"], by="layoutlab")
        return decided
    state.set_decision(store, product, decided, event="decided", by="layoutlab",
                       reason=f"study round {round_}: {decided['why']}", round_=round_)
    return decided


def _judge_check(store, product: str, dataset_id: str, items: list[dict], summary: dict) -> dict:
    item = state.require_product(store, product)
    decided = item.get("decision") or {}
    ratio = product_decisions.granule_ratio(summary, decided.get("platform"), decided.get("variant")) \
        if decided.get("platform") else None
    made = next((i for i in items if i.get("kind") == "VARIANT" and i.get("variant") == decided.get("variant")), {})
    why = product_decisions.drift(decided, ratio, float(item.get("drift_tolerance") or state.DEFAULT_DRIFT_TOLERANCE))
    state.update_granule(store, product, dataset_id, status="CHECKED", ratio=ratio, drift=why, finished=state.now(),
                         bytes_out=int(made.get("size_bytes") or 0), convert_s=float(made.get("convert_s") or 0.0),
                         platform=made.get("platform"))
    state._update(store, product, "SET checks = checks + :one", {":one": 1})
    state.add_output(store, product, bytes_out=int(made.get("size_bytes") or 0),
                     convert_s=float(made.get("convert_s") or 0.0), production=True)
    if why:
        state.mark_for_study(store, product, f"drift check on {dataset_id}: {why}", by="layoutlab")
    return {"dataset_id": dataset_id, "product": product, "ratio": ratio, "drift": why}


def after_failure(dataset_id: str, reason: str, *, store) -> None:
    """A failed study granule frees its slot; any failed granule is counted on its product."""
    run = next(iter(store.items(dataset=dataset_id, kind="RUN")), {})
    product = run.get("product")
    if not product:
        return
    state.update_granule(store, product, dataset_id, status="FAILED", reason=reason, finished=state.now())
    if run.get("product_role") == "study":
        state.release_study_slot(store, product, dataset_id, int(run.get("study_round") or 1), reason)
    else:
        state._update(store, product, "SET failed_granules = failed_granules + :one", {":one": 1})


def decide_by_person(store, product: str, variant: str, *, by: str, reason: str) -> dict:
    """A person's choice (or override) of the product's variant, with who and why; the evidence of the
    product's studied granules is kept when they measured that variant."""
    item = state.require_product(store, product)
    studied = list(item.get("studied") or []) or list(((item.get("decision") or {}).get("granules")) or [])
    summaries = [s for d in studied for s in store.items(dataset=d, kind="SUMMARY")]
    measured = product_decisions.measured_variants(summaries)
    if summaries and variant not in measured:
        raise state.ProductError(f"product {product!r}: variant {variant!r} was not measured in its study "
                                 f"(measured: {', '.join(sorted(measured))})")
    platform = (item.get("decision") or {}).get("platform") or product_decisions.primary_platform(summaries)
    found = product_decisions.evidence(summaries, variant, platform) if summaries else {
        "per_granule": [], "interval": None, "median_ratio": None}
    decided = {"variant": variant, "platform": platform, "granules": studied, "why": f"chosen by {by}: {reason}",
               "votes": (item.get("decision") or {}).get("votes") or {}, **found, "recipe": None}
    event = "override" if (item.get("decision") or {}).get("variant") else "decided"
    state.set_decision(store, product, decided, event=event, by=by, reason=reason)
    return state.require_product(store, product)


def summarize_granule(summarize_input, *, s3, store, outputs_bucket: str) -> dict:
    """The summarize step: a production granule's end, else the dataset's summary (``outcomes``) and then a
    product's study count, decision or drift check."""
    from layoutlab.pipeline.outcomes import summarize_dataset

    from layoutlab.products import concurrency

    dataset_id = summarize_input.dataset_id
    items = store.items(dataset=dataset_id)
    produced = finish_production(dataset_id, items, store=store)
    if produced is not None:
        concurrency.release_for_dataset(store, dataset_id)  # the execution ends here: its product slot is free
        return produced
    result = summarize_dataset(summarize_input, s3=s3, store=store, outputs_bucket=outputs_bucket)
    run = _run(items)
    if run.get("product"):
        summary = next(iter(store.items(dataset=dataset_id, kind="SUMMARY")), {})
        after_summary(dataset_id, items, summary, store=store)
        granule = state.get_granule(store, run["product"], dataset_id) or {}
        result = {**result, "product": run["product"], "role": run.get("product_role"),
                  "bytes_in": int(granule.get("bytes_in") or 0), "bytes_out": int(granule.get("bytes_out") or 0)}
    concurrency.release_for_dataset(store, dataset_id)
    return result


def record_granule_failure(failure, *, store) -> dict:
    """The record_failure step: the FAILURE item (``outcomes``), then the product's count or study slot."""
    from layoutlab.pipeline.outcomes import record_failure

    from layoutlab.products import concurrency

    result = record_failure(failure, store=store)
    if failure.stage != "bench":
        after_failure(failure.dataset_id, result["reason"], store=store)
    if failure.case is None:  # the execution fails here (a failed case alone does not end it): its slot is free
        concurrency.release_for_dataset(store, failure.dataset_id)
    return result
