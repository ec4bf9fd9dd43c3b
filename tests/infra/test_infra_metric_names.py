"""The metric vocabulary (layoutlab.observability) is what Powertools actually emits, so the
dashboard's SEARCH expressions and alarms find the metrics the handlers write."""

from __future__ import annotations

import json

import pytest
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from layoutlab import observability as obs

SAMPLE_VALUES = {
    obs.Dimension.VARIANT: "paged-8MiB",
    obs.Dimension.PATTERN: "timeseries-point",
    obs.Dimension.READER: "h5py-s3fs-aligned",
    obs.Dimension.PLATFORM: "lambda-1769",
    obs.Dimension.STAGE: "bench",
    obs.Dimension.PRODUCT: "MERRA2",
    obs.Dimension.ROLE: "production",
}


@pytest.mark.parametrize("spec", obs.ALL_METRICS, ids=lambda s: s.name)
def test_each_metric_emits_as_emf_with_exactly_its_dimension_set(spec, capsys, monkeypatch):
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    metrics = Metrics(namespace=obs.NAMESPACE, service=obs.SERVICE)
    for dimension in spec.dimensions:
        if dimension != obs.Dimension.SERVICE:  # Powertools adds service itself
            metrics.add_dimension(name=dimension, value=SAMPLE_VALUES[dimension])
    metrics.add_metric(name=spec.name, unit=spec.unit, value=1.5)
    metrics.flush_metrics()
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    blob = json.loads(line)
    (directive,) = blob["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == obs.NAMESPACE
    assert set(directive["Dimensions"][0]) == set(spec.dimensions)
    assert directive["Metrics"] == [{"Name": spec.name, "Unit": MetricUnit(spec.unit).value}]
    assert blob[spec.name] in (1.5, [1.5])  # Powertools writes a list of values
    assert blob[obs.SERVICE_DIMENSION] == obs.SERVICE


def test_search_expression_names_namespace_dimensions_and_metric():
    expression = obs.BENCH_WALL_TIME.search_expression("Average", 300)
    assert expression == (
        "SEARCH('{layoutlab,service,variant,pattern,reader,platform} MetricName=\"BenchWallTime\"', 'Average', 300)"
    )


def test_names_are_unique_and_stages_match_the_state_machine():
    assert len({spec.name for spec in obs.ALL_METRICS}) == len(obs.ALL_METRICS)
    from pathlib import Path

    asl = json.loads((Path(__file__).resolve().parents[2] / "stepfunctions" / "pipeline.asl.json").read_text())
    recorded = {s["Result"] for s in asl["States"].values() if s["Type"] == "Pass" and s.get("Next") == "RecordFailure"}
    recorded.add("bench")  # RecordCaseFailure, inside the Distributed Map
    assert recorded | {"ingest"} == set(obs.STAGES)  # ingest records its own rejections


# -- the report and the dashboard speak the same vocabulary ------------------------------------
BENCH_SPECS = tuple(obs.CASE_METRIC_FIELDS)


def test_report_groups_cases_by_the_bench_metrics_dimensions():
    """The HTML report groups results by obs.CASE_GROUPING; the bench metrics (and so the
    dashboard's SEARCH over them) are emitted with exactly service + those dimensions."""
    from layoutlab.report import plots

    for spec in BENCH_SPECS:
        assert spec.dimensions == (obs.Dimension.SERVICE, *obs.CASE_GROUPING)
    records = [{"kind": "RESULT", "checksum_ok": True, "wall_s": 1.0, "requests": 3, "bytes_transferred": 10,
                **SAMPLE_VALUES}]
    (key,) = plots.case_medians(records, "wall_s")
    assert key == tuple(SAMPLE_VALUES[d] for d in obs.CASE_GROUPING)
    (row,) = plots.traffic_rows(records, platform=SAMPLE_VALUES[obs.Dimension.PLATFORM])
    assert {k: row[k] for k in obs.CASE_GROUPING} == {d: SAMPLE_VALUES[d] for d in obs.CASE_GROUPING}


def test_case_metrics_emit_the_record_fields_the_report_plots(capsys, monkeypatch):
    """pipeline/benchcase.py emits each CASE_METRIC_FIELDS field under its metric name with the
    CASE_GROUPING values of the record: what the report reads from the same record."""
    from layoutlab.pipeline.benchcase import emit_case_metrics

    record = {**{d: SAMPLE_VALUES[d] for d in obs.CASE_GROUPING},
              "wall_s": 1.25, "requests": 7, "bytes_transferred": 4096, "peak_rss_mb": 99.5}
    emitted = []
    emit_case_metrics(lambda spec, value, **dims: emitted.append((spec.name, value, dims)), record)
    assert {name: value for name, value, _ in emitted} == {
        spec.name: record[field] for spec, field in obs.CASE_METRIC_FIELDS.items()}
    assert all(dims == {d: SAMPLE_VALUES[d] for d in obs.CASE_GROUPING} for _, _, dims in emitted)


def test_dashboard_graphs_every_case_metric_over_the_reports_grouping(dev):
    """In the synthesized dashboard, each bench metric the report shows is graphed by a SEARCH
    whose schema is namespace + service + the report's grouping, under the same metric name."""
    import re

    from layoutlab_cdk.template_text import render

    (dashboard,) = dev.resources("observability", "AWS::CloudWatch::Dashboard").values()
    body = render(dashboard["Properties"]["DashboardBody"])
    schemas = {}
    for schema, name in re.findall(r"SEARCH\('\{([^}]*)\} MetricName=\\*\"(\w+)\\*\"", body):
        schemas.setdefault(name, set()).add(tuple(schema.split(",")))
    for spec in BENCH_SPECS:
        assert schemas.get(spec.name) == {(obs.NAMESPACE, obs.SERVICE_DIMENSION, *obs.CASE_GROUPING)}, spec.name
    for spec in obs.VARIANT_METRIC_FIELDS:  # the report's size and conversion labels
        assert spec.name in schemas, spec.name


def test_dashboard_has_a_line_per_product_for_its_granules_and_bytes(dev):
    """The products' graphs SEARCH over the product dimension, so each product is its own line."""
    import re

    from layoutlab_cdk.template_text import render

    (dashboard,) = dev.resources("observability", "AWS::CloudWatch::Dashboard").values()
    body = render(dashboard["Properties"]["DashboardBody"])
    schemas = {name: tuple(schema.split(","))
               for schema, name in re.findall(r"SEARCH\('\{([^}]*)\} MetricName=\\*\"(\w+)\\*\"", body)}
    for spec in (obs.PRODUCT_GRANULES, obs.PRODUCT_BYTES_IN, obs.PRODUCT_BYTES_OUT):
        assert schemas.get(spec.name) == (obs.NAMESPACE, *spec.dimensions), spec.name
        assert obs.Dimension.PRODUCT in spec.dimensions
