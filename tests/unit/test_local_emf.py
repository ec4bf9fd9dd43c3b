"""Metrics printed by local tasks reach the local CloudWatch with the dashboard's names."""

from __future__ import annotations

import boto3
from aws_lambda_powertools.metrics import single_metric
from moto import mock_aws

from layoutlab import observability as obs
from layoutlab.local import emf


def powertools_output(capsys) -> bytes:
    spec = obs.BENCH_WALL_TIME
    with single_metric(name=spec.name, unit=spec.unit, value=1.25, namespace=obs.NAMESPACE,
                       default_dimensions={"service": obs.SERVICE}) as metric:
        for name, value in (("variant", "paged-8MiB"), ("pattern", "beam-read"), ("reader", "h5py-s3fs-aligned"),
                            ("platform", "local-lambda")):
            metric.add_dimension(name=name, value=value)
    return ("not a metric line\n" + capsys.readouterr().out + '{"_aws": broken\n').encode()


def test_emf_lines_become_metric_data_with_exact_dimensions(capsys):
    printed = powertools_output(capsys)
    data = [d for line in printed.decode().splitlines() for d in emf.metric_data(line)]
    [(namespace, datum)] = data
    assert namespace == obs.NAMESPACE and datum["MetricName"] == obs.BENCH_WALL_TIME.name
    assert datum["Value"] == 1.25 and datum["Unit"] == "Seconds"
    assert sorted(d["Name"] for d in datum["Dimensions"]) == sorted(obs.BENCH_WALL_TIME.dimensions)


def test_forwarded_metrics_can_be_read_back_from_cloudwatch(capsys):
    printed = powertools_output(capsys)
    with mock_aws():
        cloudwatch = boto3.client("cloudwatch", region_name="us-east-1")
        assert emf.forward(printed, cloudwatch) == 1
        listed = cloudwatch.list_metrics(Namespace=obs.NAMESPACE)["Metrics"]
        assert [m["MetricName"] for m in listed] == [obs.BENCH_WALL_TIME.name]
