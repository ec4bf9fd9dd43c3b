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
