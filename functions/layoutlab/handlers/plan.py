"""Lambda: expand the dataset's plan into convert tasks and the benchmark case list; once the variants are
converted (``phase: cases_of_made_variants``), the first round without the cases of variants not made; after a
round of cases (``phase: more_repetitions``), the next round's cases where a comparison is undecided."""

from __future__ import annotations

from layoutlab.handlers._runtime import (FOR_PLAN_WORKERS, import_for_workers, logger, metrics, results_store,
                                         s3_client, settings, tracer)
from layoutlab.pipeline.payloads import (CASES_OF_MADE_VARIANTS, MORE_REPETITIONS, ExecutionInput, MadeVariantsInput,
                                         MoreRepetitionsInput)
from layoutlab.pipeline.planning import PlanSettings
from layoutlab.products.flow import plan_granule

import_for_workers(*FOR_PLAN_WORKERS)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event, context):
    if isinstance(event, dict) and event.get("phase") == MORE_REPETITIONS:
        from layoutlab.pipeline.repetitions import plan_more_repetitions

        step = MoreRepetitionsInput.from_event(event)
        logger.set_correlation_id(step.dataset_id)
        cases = plan_more_repetitions(step, s3=s3_client(), store=results_store(),
                                      outputs_bucket=settings().outputs_bucket).to_event()
        logger.info("next round", extra=cases)
        return cases
    if isinstance(event, dict) and event.get("phase") == CASES_OF_MADE_VARIANTS:
        from layoutlab.pipeline.made_variants import keep_cases_of_made_variants

        step = MadeVariantsInput.from_event(event)
        logger.set_correlation_id(step.dataset_id)
        cases = keep_cases_of_made_variants(step, s3=s3_client(), store=results_store(),
                                            outputs_bucket=settings().outputs_bucket).to_event()
        cases.setdefault("undecided", None)  # (the state keeps every field: a path the answer lacks fails the state)
        logger.info("cases of made variants", extra=cases)
        return cases
    execution = ExecutionInput.from_event(event)
    logger.set_correlation_id(execution.dataset_id)
    # a granule of a product is studied, or converted with the product's chosen variant (products/flow.py)
    result = plan_granule(execution, s3=s3_client(), store=results_store(),
                          settings=PlanSettings.from_env(settings().outputs_bucket))
    logger.info("planned", extra={"cases": result.cases.count, "convert_tasks": len(result.convert_tasks),
                                  "work_units": result.work_units.count})
    return result.to_event()
