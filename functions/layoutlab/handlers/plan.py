"""Lambda: expand the dataset's plan into convert tasks and the benchmark case list."""

from __future__ import annotations

from layoutlab.handlers._runtime import logger, metrics, results_store, s3_client, settings, tracer
from layoutlab.pipeline.planning import PlanSettings, plan_dataset


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event, context):
    logger.set_correlation_id(event.get("dataset_id"))
    result = plan_dataset(event, s3=s3_client(), store=results_store(),
                          settings=PlanSettings.from_env(settings().outputs_bucket))
    logger.info("planned", extra={"cases": result["cases"]["count"], "convert_tasks": len(result["convert_tasks"]),
                                  "work_units": result["work_units"]["count"]})
    return result
