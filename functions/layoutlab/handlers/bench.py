"""Lambda / Fargate: run one benchmark case and store its RESULT item."""

from __future__ import annotations

from layoutlab.bench.runner import preload
from layoutlab.handlers._runtime import emit, logger, metrics, results_store, tracer
from layoutlab.pipeline.benchcase import run_bench_case
from layoutlab.pipeline.payloads import BenchCase

# Init phase: each case runs in a fork of this process (bench.isolation.run_forked); importing the
# readers' libraries here, once per container, keeps ~0.6 s of imports out of every case.
preload()


def run(event: dict) -> dict:
    """The event of the Lambda function and of the Fargate task (handlers/task.py) alike."""
    return run_bench_case(BenchCase.from_event(event), store=results_store(), emit=emit)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event, context):
    case = BenchCase.from_event(event)
    logger.set_correlation_id(case.dataset_id)
    result = run_bench_case(case, store=results_store(), emit=emit)
    logger.info("measured", extra=result)
    return result
