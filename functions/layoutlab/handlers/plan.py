"""Lambda: expand the dataset's plan into convert tasks and the benchmark case list; after a round
of cases (``phase: more_repetitions``), the next round's cases where a comparison is undecided."""

from __future__ import annotations

from layoutlab.handlers._runtime import logger, metrics, results_store, s3_client, settings, tracer
from layoutlab.pipeline.payloads import MORE_REPETITIONS, ExecutionInput, MoreRepetitionsInput
from layoutlab.pipeline.planning import PlanSettings
from layoutlab.products.flow import plan_granule


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
    execution = ExecutionInput.from_event(event)
    logger.set_correlation_id(execution.dataset_id)
    # a granule of a product is studied, or converted with the product's chosen variant (products/flow.py)
    result = plan_granule(execution, s3=s3_client(), store=results_store(),
                          settings=PlanSettings.from_env(settings().outputs_bucket))
    logger.info("planned", extra={"cases": result.cases.count, "convert_tasks": len(result.convert_tasks),
                                  "work_units": result.work_units.count})
    return result.to_event()
