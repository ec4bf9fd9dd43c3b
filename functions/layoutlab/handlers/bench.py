"""Lambda / Fargate: run one benchmark case and store its RESULT item."""

from __future__ import annotations

from layoutlab.handlers._runtime import emit, logger, metrics, results_store, tracer
from layoutlab.pipeline.benchcase import run_bench_case


def run(event: dict) -> dict:
    return run_bench_case(event, store=results_store(), emit=emit)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event, context):
    logger.set_correlation_id(event.get("dataset_id"))
    result = run(event)
    logger.info("measured", extra=result)
    return result
