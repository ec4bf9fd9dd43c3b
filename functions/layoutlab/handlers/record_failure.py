"""Lambda: turn an error caught by the state machine into a FAILURE item."""

from __future__ import annotations

from layoutlab import observability as obs
from layoutlab.handlers._runtime import add_count, logger, metrics, results_store, tracer
from layoutlab.pipeline.payloads import FailureInput
from layoutlab.products.flow import record_granule_failure


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event, context):
    failure = FailureInput.from_event(event)
    logger.set_correlation_id(failure.dataset_id)
    result = record_granule_failure(failure, store=results_store())  # (and a product's study slot)
    add_count(obs.PIPELINE_FAILURES, stage=result["stage"])
    logger.warning("failure recorded", extra=result)
    return result
