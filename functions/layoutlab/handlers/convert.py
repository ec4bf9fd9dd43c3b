"""Lambda / Fargate: produce one variant, or one rechunk work unit."""

from __future__ import annotations

from layoutlab import observability as obs
from layoutlab.handlers._runtime import (
    FOR_CONVERT_WORKERS,
    emit,
    import_for_workers,
    logger,
    metrics,
    platform_memory_mb,
    results_store,
    s3_client,
    settings,
    tracer,
)
from layoutlab.pipeline.payloads import ConvertTask
from layoutlab.pipeline.variants import convert_variant

import_for_workers(*FOR_CONVERT_WORKERS)


def run(event: dict) -> dict:
    """The event of the Lambda function and of the Fargate task (handlers/task.py) alike."""
    return convert(ConvertTask.from_event(event))


def convert(task: ConvertTask) -> dict:
    result = convert_variant(task, s3=s3_client(), store=results_store(), memory_mb=platform_memory_mb(),
                             ceilings=settings().ceilings)
    if "convert_s" in result:
        from layoutlab import settings as settings_module

        platform = settings_module.value("LAYOUTLAB_PLATFORM") or "local"
        for spec, value in ((obs.CONVERT_WALL_TIME, result["convert_s"]), (obs.CONVERT_OUTPUT_BYTES, result["size_bytes"])):
            emit(spec, value, **{obs.Dimension.VARIANT: result["variant"], obs.Dimension.PLATFORM: platform})
    return result


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event, context):
    task = ConvertTask.from_event(event)
    logger.set_correlation_id(task.dataset_id)
    result = convert(task)
    logger.info("converted", extra={"variant": task.name, "phase": task.phase})
    return result
