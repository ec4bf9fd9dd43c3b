"""The plan step: from the execution input to convert tasks and the benchmark case list.

It learns what the dataset is (``facts.dataset_facts``), resolves the plan's
variants and platforms against what this environment offers, writes the case
list (and, for rechunks too big for one task, the work-unit list) to the
outputs bucket for the Distributed Maps, records the ``original`` variant, and
returns exactly the fields ``stepfunctions/README.md`` promises.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from layoutlab import kinds
from layoutlab import settings as variables
from layoutlab.ceilings import Ceilings
from layoutlab.errors import BadInputFile, UserError
from layoutlab.guard import run_guarded
from layoutlab.pipeline import plan as plans
from layoutlab.pipeline.case_reads import check_case_reads
from layoutlab.pipeline.facts import dataset_facts
from layoutlab.pipeline.payloads import CaseList, Concurrency, ConvertTask, ExecutionInput, PlanOutput, WorkUnits
from layoutlab.storage import versioned_url

DEFAULT_MAX_CONCURRENCY = variables.DEFAULT_MAX_CONCURRENCY
LOCAL_PLATFORMS = variables.LOCAL_PLATFORMS


@dataclass
class PlanSettings:
    outputs_bucket: str
    platforms: dict = field(default_factory=lambda: dict(LOCAL_PLATFORMS))
    fargate_convert_above_bytes: int = variables.default("LAYOUTLAB_FARGATE_CONVERT_ABOVE_BYTES")
    work_units_above_bytes: int = variables.default("LAYOUTLAB_WORK_UNITS_ABOVE_BYTES")
    max_concurrency: dict = field(default_factory=lambda: dict(DEFAULT_MAX_CONCURRENCY))
    tolerated_failure_percentage: float = variables.default("LAYOUTLAB_TOLERATED_FAILURE_PERCENTAGE")
    ceilings: Ceilings = field(default_factory=Ceilings)

    @classmethod
    def from_env(cls, outputs_bucket: str, environ=None) -> "PlanSettings":
        def read(name: str):
            return variables.value(name, environ)

        return cls(outputs_bucket=outputs_bucket, platforms=read("LAYOUTLAB_PLATFORMS"),
                   fargate_convert_above_bytes=read("LAYOUTLAB_FARGATE_CONVERT_ABOVE_BYTES"),
                   work_units_above_bytes=read("LAYOUTLAB_WORK_UNITS_ABOVE_BYTES"),
                   max_concurrency=read("LAYOUTLAB_MAX_CONCURRENCY"),
                   tolerated_failure_percentage=read("LAYOUTLAB_TOLERATED_FAILURE_PERCENTAGE"),
                   ceilings=read(variables.CEILINGS))


def resolve_platforms(requested: list[str], available: dict) -> tuple[list[str], dict]:
    """Map the plan's platforms onto those deployed here, by kind; returns (platforms, substitutions).

    A plan written for AWS (``lambda-1769``) runs locally as ``local-lambda`` and
    vice versa: this is the one place where the local run and AWS differ in
    what a case's platform is called.
    """
    resolved, substitutions = [], {}
    for name in requested:
        if name in available:
            chosen = name
        else:
            kind = "fargate" if "fargate" in name else "lambda"
            same_kind = [p for p, spec in available.items() if spec.get("kind") == kind]
            if not same_kind:
                raise UserError(f"platform {name!r}: no {kind} platform in this environment "
                                f"(available: {', '.join(available)})")
            chosen = same_kind[0]
            substitutions[name] = chosen
        if chosen not in resolved:
            resolved.append(chosen)
    return resolved, substitutions


def variant_uri(outputs_bucket: str, dataset_id: str, spec: dict, source_url: str) -> str:
    kind = kinds.get(spec["kind"])
    if not kind.converted:
        return source_url
    return f"s3://{outputs_bucket}/variants/{dataset_id}/{spec['name']}{kind.suffix}"


def _put_json(s3, bucket: str, key: str, value) -> None:
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(value).encode(), ContentType="application/json")


def _facts_and_reads(source_url: str, plan: dict):
    """(facts, plan_io): the file's facts and the S3 requests and response bytes reading them took (metadata and
    coordinates only), counted at the plan step's own s3fs client (botocore events, as the bench counts)."""
    from layoutlab.bench.accounting import RequestCounter

    counter = RequestCounter()
    facts = dataset_facts(source_url, plan, counter)
    counts = counter.snapshot()
    return facts, {"requests": counts["requests"], "bytes": counts["bytes_transferred"],
                   "get_requests": counts["get_requests"], "head_requests": counts["head_requests"]}


def plan_dataset(execution: ExecutionInput, *, s3, store, settings: PlanSettings) -> PlanOutput:
    dataset_id = execution.dataset_id
    source = execution.source
    # Pinned to the event's version: the key may have been overwritten since.
    source_url = versioned_url(source["bucket"], source["key"], source.get("version_id"))
    size = int(source.get("size") or source.get("size_bytes") or 0)
    # Ingest checked the plan against the ceilings; an execution started another way is checked here.
    plan = plans.merge_plan(execution.plan, ceilings=settings.ceilings, input_bytes=size or None)
    # Guarded, as the convert step's repack is: a damaged file that makes libhdf5 spin while
    # its metadata is read is stopped by the stall check (a minute), not at the task's timeout.
    facts, plan_io = run_guarded(_facts_and_reads, source_url, plan, path=source_url)
    facts = plans.fit_family_cases(facts, settings.ceilings)
    if facts.kind == "other":  # one line: what the file holds, and why no pattern reads it
        raise BadInputFile(source_url, (facts.structure or {}).get("why_not") or "layoutlab has no access patterns for it")
    platforms, substitutions = resolve_platforms(plan["platforms"], settings.platforms)
    plan = {**plan, "platforms": platforms}

    specs = plans.variant_specs(plan, facts)
    # What only the file tells (the grid's shape): chunk sizes and objects per variant, before any conversion.
    plans.check_dataset_ceilings(plan, specs, facts, settings.ceilings)
    convert_on = "fargate" if size > settings.fargate_convert_above_bytes else "lambda"
    fan_out_above = int(plan.get("fan_out_above_bytes", settings.work_units_above_bytes))
    convert_tasks, publish_tasks, work_units, produced = [], [], [], []
    specs = [{**spec, "uri": variant_uri(settings.outputs_bucket, dataset_id, spec, source_url)} for spec in specs]
    # What each case would read, from the declared shapes: refused before anything is recorded or converted.
    check_case_reads(plan, plans.expand_cases(plan, facts, dataset_id, specs), facts, settings.ceilings)
    # References over a paged variant are built by that variant's own convert task, after it published it
    derived = {}
    for spec in specs:
        if builder := kinds.get(spec["kind"]).built_by(spec):
            derived.setdefault(builder, []).append(spec)
    for spec in specs:
        produced.append(spec)
        if spec["name"] in derived:
            spec = {**spec, "derived": derived[spec["name"]]}
        base = ConvertTask(dataset_id=dataset_id, source=source, variant=spec)
        kind = kinds.get(spec["kind"])
        if kind.built_by(spec):
            continue
        if not kind.converted:
            store.put_variant(dataset_id, spec["name"], uri=source_url, format=spec["format"], variant_kind=kind.name,
                              size_bytes=size, status="READY")
        elif kind.fans_out and size > fan_out_above and (units := kind.prepare_work_units(spec, source_url, settings.ceilings)):
            # Units of every stage go into the one Map, stage 0 first (the plan's order), so
            # a stage-1 unit rarely finds a stage-0 unit it reads not done yet (it then runs it).
            work_units += [replace(base, phase="unit", work_unit=k) for k in range(units)]
            publish_tasks.append(replace(base, phase="publish"))
        else:
            convert_tasks.append(replace(base, phase="whole", convert_on=convert_on))

    cases = plans.expand_cases(plan, facts, dataset_id, produced)
    run_prefix = f"runs/{dataset_id}/"
    _put_json(s3, settings.outputs_bucket, run_prefix + "cases.json", cases)
    work_units_ref = WorkUnits(key=None, count=0)
    if work_units:
        _put_json(s3, settings.outputs_bucket, run_prefix + "work-units.json", [t.to_event() for t in work_units])
        work_units_ref = WorkUnits(key=run_prefix + "work-units.json", count=len(work_units))
    concurrency = dict(settings.max_concurrency)
    if isinstance(plan.get("max_concurrency"), int):
        concurrency["bench"] = min(concurrency["bench"], plan["max_concurrency"])
    grid = ({"grid_shape": list(facts.grid_shape), "grid_itemsize": facts.itemsize, "grid_variable": facts.variable}
            if facts.grid_shape else {})  # the model in report/model.py predicts chunk shapes from these
    if facts.structure:  # what the file holds and which family cases read it (structure.py, pipeline/families.py)
        grid = {**grid, "structure": facts.structure,
                "family_cases": [{k: c[k] for k in ("label", "role", "variable", "why")} for c in plans.family_labels(facts.family_cases)],
                "family_skipped": list(facts.family_skipped)}
    store.update_run(dataset_id, kind_of_data=facts.role or facts.kind, variants=[s["name"] for s in produced],
                     cases=len(cases), rounds=1, platforms=platforms, platform_substitutions=substitutions,
                     readers_not_planned=plans.not_planned_list(plan, facts, produced),
                     plan_io=dict(plan_io, file_bytes=size or None), **grid)
    return PlanOutput(
        convert_tasks=convert_tasks,
        publish_tasks=publish_tasks,
        work_units=work_units_ref,
        # the case list of the round to run; pipeline/repetitions.py writes the next round's
        cases=CaseList(key=run_prefix + "cases.json", count=len(cases), round=1, planned=len(cases)),
        repetitions=plans.repetition_schedule(plan),
        results_prefix=f"map-runs/{dataset_id}/",
        max_concurrency=Concurrency(convert=concurrency["convert"], work_units=concurrency["work_units"],
                                    bench=concurrency["bench"]),
        tolerated_failure_percentage=settings.tolerated_failure_percentage,
    )
