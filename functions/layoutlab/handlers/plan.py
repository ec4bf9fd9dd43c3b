"""Lambda: expand the dataset's plan into convert tasks and the benchmark case list; after a round
of cases (``phase: more_repetitions``), the next round's cases where a comparison is undecided."""

from __future__ import annotations

from layoutlab.handlers._runtime import logger, metrics, results_store, s3_client, settings, tracer
from layoutlab.pipeline.planning import PlanSettings, plan_dataset

MORE_REPETITIONS = "more_repetitions"


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event, context):
    logger.set_correlation_id(event.get("dataset_id"))
    if event.get("phase") == MORE_REPETITIONS:
        from layoutlab.pipeline.repetitions import plan_more_repetitions

        cases = plan_more_repetitions(event, s3=s3_client(), store=results_store(),
                                      outputs_bucket=settings().outputs_bucket)
        logger.info("next round", extra=cases)
        return cases
    result = plan_dataset(event, s3=s3_client(), store=results_store(),
                          settings=PlanSettings.from_env(settings().outputs_bucket))
    logger.info("planned", extra={"cases": result["cases"]["count"], "convert_tasks": len(result["convert_tasks"]),
                                  "work_units": result["work_units"]["count"]})
    return result
