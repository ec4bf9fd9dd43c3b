"""Lambda: per-dataset summary (SUMMARY item + summaries/<dataset>.json)."""

from __future__ import annotations

from layoutlab import observability as obs
from layoutlab.handlers._runtime import add_count, emit, logger, metrics, results_store, s3_client, settings, tracer
from layoutlab.pipeline.payloads import SummarizeInput
from layoutlab.products.flow import summarize_granule


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event, context):
    state = SummarizeInput.from_event(event)
    logger.set_correlation_id(state.dataset_id)
    # a product's production granule ends here too; a study or check granule then counts on its product
    result = summarize_granule(state, s3=s3_client(), store=results_store(), outputs_bucket=settings().outputs_bucket)
    if result.get("product"):  # the dashboard's row per product
        product = {obs.Dimension.PRODUCT: result["product"]}
        add_count(obs.PRODUCT_GRANULES, **product, **{obs.Dimension.ROLE: result["role"]})
        emit(obs.PRODUCT_BYTES_IN, result.get("bytes_in") or 0, **product)
        if result.get("bytes_out"):
            emit(obs.PRODUCT_BYTES_OUT, result["bytes_out"], **product)
    if result.get("role") != "production":
        add_count(obs.DATASETS_SUMMARIZED)
    return result
