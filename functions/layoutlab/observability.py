"""One vocabulary for the pipeline's CloudWatch metrics.

The code that emits metrics (Powertools ``Metrics`` → EMF lines on stdout) and the
CDK dashboard and alarms both import these names, so a renamed metric or a new
dimension cannot silently leave a dashboard graph empty.

CloudWatch identifies a metric by namespace + name + the *exact* set of dimensions,
so each metric here names its dimension set; emit every metric with exactly those
dimensions (Powertools adds ``service`` by itself: see ``SERVICE_DIMENSION``).
This module is standard library only: the CDK app imports it without numpy & co.

Emitting, in a handler::

    from aws_lambda_powertools import Metrics
    from layoutlab import observability as obs

    metrics = Metrics(namespace=obs.NAMESPACE, service=obs.SERVICE)
    spec = obs.BENCH_WALL_TIME
    metrics.add_dimension(obs.Dimension.VARIANT, "paged-8MiB")   # ... every name in spec.dimensions
    metrics.add_metric(name=spec.name, unit=spec.unit, value=1.84)

Use ``metrics.single_metric``/``Metrics`` per case so the dimension values of one
case never leak into another case's metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

NAMESPACE = "layoutlab"
"""CloudWatch namespace of every layoutlab metric."""

SERVICE = "layoutlab"
"""Powertools service name (POWERTOOLS_SERVICE_NAME); Powertools Metrics adds it as the
``service`` dimension to every metric it emits."""

SERVICE_DIMENSION = "service"


class Dimension:
    """Dimension names. Values are the plan's own words (DESIGN.md §3)."""

    SERVICE = SERVICE_DIMENSION
    VARIANT = "variant"  # paged-8MiB, zarr-120x100x50, original, ...
    PATTERN = "pattern"  # timeseries-point, map-timestep, ...
    READER = "reader"  # h5py-s3fs-aligned, zarr-obstore, ...
    PLATFORM = "platform"  # lambda-1769, fargate-1-4096, local-lambda, ...
    STAGE = "stage"  # one of STAGES: where a failure happened
    PRODUCT = "product"  # a product's name (layoutlab/products/): the uploader's, or sig-<digest>
    ROLE = "role"  # a product granule's role: study, production, check


STAGES = ("ingest", "plan", "convert", "rechunk", "bench", "summarize")
"""Values of the ``stage`` dimension: where a failure happened. The pipeline's
record-failure payload carries one of these (stepfunctions/pipeline.asl.json names the
stage of each Catch), and the failure alarm sums exactly these."""


class Unit:
    """CloudWatch units used here; each equals Powertools' ``MetricUnit`` value and
    CloudWatch's ``StandardUnit`` name."""

    SECONDS = "Seconds"
    MILLISECONDS = "Milliseconds"
    COUNT = "Count"
    BYTES = "Bytes"
    MEGABYTES = "Megabytes"


@dataclass(frozen=True)
class MetricSpec:
    """A metric as CloudWatch sees it: name, unit, and its exact dimension set."""

    name: str
    unit: str
    dimensions: tuple[str, ...]
    description: str

    def search_expression(self, statistic: str, period_seconds: int) -> str:
        """A CloudWatch metric-math SEARCH over every value of this metric's dimensions.

        Dashboards cannot list variants/patterns in advance (they come from each upload's
        plan), so graphs search the schema instead of naming each time series.
        """
        schema = ",".join((NAMESPACE, *self.dimensions))
        return f"SEARCH('{{{schema}}} MetricName=\"{self.name}\"', '{statistic}', {period_seconds})"


_CASE = (Dimension.SERVICE, Dimension.VARIANT, Dimension.PATTERN, Dimension.READER, Dimension.PLATFORM)
_CONVERSION = (Dimension.SERVICE, Dimension.VARIANT, Dimension.PLATFORM)
_SERVICE_ONLY = (Dimension.SERVICE,)
_STAGE = (Dimension.SERVICE, Dimension.STAGE)
_PRODUCT = (Dimension.SERVICE, Dimension.PRODUCT)
_PRODUCT_ROLE = (Dimension.SERVICE, Dimension.PRODUCT, Dimension.ROLE)

# One benchmark case (variant × pattern × reader × platform); one data point per repetition.
BENCH_WALL_TIME = MetricSpec(
    "BenchWallTime", Unit.SECONDS, _CASE, "wall time of one cold benchmark case (open + access pattern)"
)
BENCH_REQUESTS = MetricSpec("BenchRequests", Unit.COUNT, _CASE, "object-store requests made by one case")
BENCH_BYTES = MetricSpec("BenchBytesRead", Unit.BYTES, _CASE, "bytes fetched from the object store by one case")
BENCH_PEAK_MEMORY = MetricSpec("BenchPeakMemory", Unit.MEGABYTES, _CASE, "peak resident memory of one case")
BENCH_CASE_FAILED = MetricSpec(
    "BenchCaseFailed", Unit.COUNT, _CASE, "1 when a case failed (recorded, does not sink the dataset)"
)

# One variant conversion (or rechunk work unit).
CONVERT_WALL_TIME = MetricSpec("ConvertWallTime", Unit.SECONDS, _CONVERSION, "time to produce one variant")
CONVERT_OUTPUT_BYTES = MetricSpec("ConvertOutputBytes", Unit.BYTES, _CONVERSION, "stored size of one variant")

# Datasets through the pipeline.
DATASETS_STARTED = MetricSpec(
    "DatasetsStarted", Unit.COUNT, _SERVICE_ONLY, "pipeline executions started by ingest"
)
DATASETS_DUPLICATE = MetricSpec(
    "DatasetsDuplicate", Unit.COUNT, _SERVICE_ONLY, "events for an object version already started"
)
DATASETS_REJECTED = MetricSpec(
    "DatasetsRejected", Unit.COUNT, _SERVICE_ONLY, "uploads rejected by validation (FAILURE item written)"
)
DATASETS_SUMMARIZED = MetricSpec(
    "DatasetsSummarized", Unit.COUNT, _SERVICE_ONLY, "datasets with a SUMMARY item"
)
PIPELINE_FAILURES = MetricSpec(
    "PipelineFailures", Unit.COUNT, _STAGE, "failures recorded by record-failure, by stage"
)

# A product's granules (the dashboard's row per product: a SEARCH gives one line per product).
PRODUCT_GRANULES = MetricSpec(
    "ProductGranules", Unit.COUNT, _PRODUCT_ROLE, "granules of a product finished, by role (study, production, check)"
)
PRODUCT_BYTES_IN = MetricSpec("ProductBytesIn", Unit.BYTES, _PRODUCT, "bytes of a product's granules finished")
PRODUCT_BYTES_OUT = MetricSpec(
    "ProductBytesOut", Unit.BYTES, _PRODUCT, "bytes a product's production and check granules were converted to"
)

ALL_METRICS: tuple[MetricSpec, ...] = (
    BENCH_WALL_TIME,
    BENCH_REQUESTS,
    BENCH_BYTES,
    BENCH_PEAK_MEMORY,
    BENCH_CASE_FAILED,
    CONVERT_WALL_TIME,
    CONVERT_OUTPUT_BYTES,
    DATASETS_STARTED,
    DATASETS_DUPLICATE,
    DATASETS_REJECTED,
    DATASETS_SUMMARIZED,
    PIPELINE_FAILURES,
    PRODUCT_GRANULES,
    PRODUCT_BYTES_IN,
    PRODUCT_BYTES_OUT,
)

CASE_GROUPING: tuple[str, ...] = tuple(d for d in _CASE if d != SERVICE_DIMENSION)
"""How one case is identified and its results grouped: variant × pattern × reader × platform.
These are the bench metrics' dimensions less ``service`` (which Powertools adds); each is
also the name of a field of a result record, so the report groups by exactly what the
dashboard graphs."""

CASE_METRIC_FIELDS: dict[MetricSpec, str] = {
    BENCH_WALL_TIME: "wall_s",
    BENCH_REQUESTS: "requests",
    BENCH_BYTES: "bytes_transferred",
    BENCH_PEAK_MEMORY: "peak_rss_mb",
}
"""The result-record field each per-case metric carries (pipeline/benchcase.py emits them;
the report plots the same fields under the same metric names)."""

VARIANT_METRIC_FIELDS: dict[MetricSpec, str] = {
    CONVERT_WALL_TIME: "convert_s",
    CONVERT_OUTPUT_BYTES: "size_bytes",
}
"""The VARIANT-item field each per-variant metric carries."""
