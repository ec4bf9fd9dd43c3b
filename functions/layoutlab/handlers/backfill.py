"""Lambda: convert one batch of an archive's granules with their product's decided layout (the backfill
state machine's Distributed Map child: ``{"Items": [...], "BatchInput": {"product", "bucket", "prefix"}}``)."""

from __future__ import annotations

from layoutlab.handlers._runtime import (FOR_CONVERT_WORKERS, FOR_PLAN_WORKERS, import_for_workers, logger, metrics,
                                         results_store, s3_client, settings, tracer)
from layoutlab.pipeline.planning import PlanSettings
from layoutlab.products.backfill import convert_batch

import_for_workers(*FOR_PLAN_WORKERS, *FOR_CONVERT_WORKERS)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event, context):
    result = convert_batch(event, s3=s3_client(), store=results_store(),
                           settings=PlanSettings.from_env(settings().outputs_bucket))
    logger.info("backfilled", extra={"product": result["product"], "converted": result["converted"]})
    return result
