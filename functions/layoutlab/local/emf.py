"""Deliver the metrics local tasks print (CloudWatch Embedded Metric Format) to the local CloudWatch.

In AWS, Lambda's log pipeline turns EMF lines into CloudWatch metrics; locally
nothing does, so the dispatcher hands each task's output to ``forward`` and the
metrics land in moto's CloudWatch under the same namespace, names and
dimensions the dashboard uses. Parsing follows the published EMF
specification (``_aws.CloudWatchMetrics``: Namespace, Dimensions, Metrics);
no library offers the reverse of Powertools' serializer, hence this.
"""

from __future__ import annotations

import datetime
import json


def metric_data(line: str) -> list[tuple[str, dict]]:
    """(namespace, PutMetricData datum) for each metric of one EMF line; [] for other lines."""
    line = line.strip()
    if not line.startswith("{") or '"_aws"' not in line:
        return []
    try:
        document = json.loads(line)
        directives = document["_aws"]["CloudWatchMetrics"]
        timestamp = datetime.datetime.fromtimestamp(document["_aws"]["Timestamp"] / 1000, datetime.timezone.utc)
    except (ValueError, KeyError, TypeError):
        return []
    out = []
    for directive in directives:
        for dimension_set in directive.get("Dimensions", [[]]):
            dimensions = [{"Name": name, "Value": str(document[name])} for name in dimension_set if name in document]
            for metric in directive.get("Metrics", []):
                values = document.get(metric["Name"])
                for value in values if isinstance(values, list) else [values]:
                    if isinstance(value, (int, float)):
                        out.append((directive["Namespace"], {
                            "MetricName": metric["Name"], "Dimensions": dimensions, "Value": float(value),
                            "Unit": metric.get("Unit", "None"), "Timestamp": timestamp,
                        }))
    return out


def forward(printed: bytes, cloudwatch) -> int:
    """Put every EMF metric in ``printed`` to ``cloudwatch``; returns how many."""
    by_namespace: dict[str, list] = {}
    for line in printed.decode("utf-8", "replace").splitlines():
        for namespace, datum in metric_data(line):
            by_namespace.setdefault(namespace, []).append(datum)
    for namespace, data in by_namespace.items():
        for start in range(0, len(data), 500):  # PutMetricData takes up to 1000 data points
            cloudwatch.put_metric_data(Namespace=namespace, MetricData=data[start:start + 500])
    return sum(len(d) for d in by_namespace.values())
