"""Lambda / Fargate: run one benchmark case and store its RESULT item."""

from __future__ import annotations

from layoutlab.bench.runner import preload
from layoutlab.handlers._runtime import emit, logger, metrics, results_store, tracer
from layoutlab.pipeline.benchcase import run_bench_case

# Init phase: each case runs in a fork of this process (bench.isolation.run_forked); importing the
# readers' libraries here, once per container, keeps ~0.6 s of imports out of every case.
preload()


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
