"""layoutlab-<env>-observability: one dashboard and the alarms that page someone.

Every custom metric comes from ``layoutlab.observability`` — the module the
handlers emit with — so a graph cannot drift from what the code writes.
"""

from __future__ import annotations

from aws_cdk import Aws, CfnOutput, Duration, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from layoutlab import observability as obs

from .compute_stack import ComputeStack
from .config import EnvConfig
from .pipeline_stack import PipelineStack

PERIOD = Duration.minutes(5)


def custom_metric(spec: obs.MetricSpec, statistic: str, **dimensions: str) -> cw.Metric:
    """A metric with fixed dimension values (e.g. service only)."""
    if set(dimensions) != set(spec.dimensions):
        raise ValueError(f"{spec.name} is emitted with dimensions {spec.dimensions}, not {sorted(dimensions)}")
    return cw.Metric(
        namespace=obs.NAMESPACE,
        metric_name=spec.name,
        dimensions_map=dimensions,
        statistic=statistic,
        period=PERIOD,
    )


def search(spec: obs.MetricSpec, statistic: str, label: str) -> cw.MathExpression:
    """Every time series of a metric, whatever its dimension values (variants come from plans)."""
    return cw.MathExpression(
        expression=spec.search_expression(statistic, int(PERIOD.to_seconds())),
        using_metrics={},
        label=label,
        period=PERIOD,
    )


class ObservabilityStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvConfig,
        compute: ComputeStack,
        pipeline: PipelineStack,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        state_machine = pipeline.state_machine
        service = {obs.Dimension.SERVICE: obs.SERVICE}

        self.dashboard = cw.Dashboard(self, "Dashboard", dashboard_name=f"layoutlab-{config.name}")
        self.dashboard.add_widgets(
            cw.TextWidget(
                markdown=f"# layoutlab ({config.name})\nDrop HDF5/NetCDF-4 files under `incoming/` of the ingest "
                "bucket; each upload runs the pipeline. Bench graphs: one line per variant × pattern × reader × "
                "platform (metric SEARCH, so new variants appear by themselves).",
                width=24,
                height=2,
            )
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Pipeline executions",
                left=[
                    state_machine.metric_started(period=PERIOD, statistic="Sum"),
                    state_machine.metric_succeeded(period=PERIOD, statistic="Sum"),
                    state_machine.metric_failed(period=PERIOD, statistic="Sum"),
                    state_machine.metric_timed_out(period=PERIOD, statistic="Sum"),
                    state_machine.metric_aborted(period=PERIOD, statistic="Sum"),
                ],
                width=8,
            ),
            cw.GraphWidget(
                title="Datasets",
                left=[
                    custom_metric(obs.DATASETS_STARTED, "Sum", **service),
                    custom_metric(obs.DATASETS_DUPLICATE, "Sum", **service),
                    custom_metric(obs.DATASETS_REJECTED, "Sum", **service),
                    custom_metric(obs.DATASETS_SUMMARIZED, "Sum", **service),
                ],
                width=8,
            ),
            cw.GraphWidget(
                title="Failures by stage",
                left=[search(obs.PIPELINE_FAILURES, "Sum", "failures")],
                width=8,
            ),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(title="Bench wall time (s, average)", left=[search(obs.BENCH_WALL_TIME, "Average", "")], width=12),
            cw.GraphWidget(title="Bench requests (average)", left=[search(obs.BENCH_REQUESTS, "Average", "")], width=12),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(title="Bench bytes read (average)", left=[search(obs.BENCH_BYTES, "Average", "")], width=8),
            cw.GraphWidget(title="Bench peak memory (MB, max)", left=[search(obs.BENCH_PEAK_MEMORY, "Maximum", "")], width=8),
            cw.GraphWidget(title="Bench cases failed", left=[search(obs.BENCH_CASE_FAILED, "Sum", "")], width=8),
        )
        self.dashboard.add_widgets(
            cw.GraphWidget(title="Conversion time (s)", left=[search(obs.CONVERT_WALL_TIME, "Average", "")], width=12),
            cw.GraphWidget(title="Variant size (bytes)", left=[search(obs.CONVERT_OUTPUT_BYTES, "Maximum", "")], width=12),
        )
        # a row per product (layoutlab/products/): one line per product in each graph
        self.dashboard.add_widgets(
            cw.GraphWidget(title="Granules per product and role", left=[search(obs.PRODUCT_GRANULES, "Sum", "")],
                           width=12),
            cw.GraphWidget(title="Bytes in / out per product", left=[search(obs.PRODUCT_BYTES_IN, "Sum", "")],
                           right=[search(obs.PRODUCT_BYTES_OUT, "Sum", "")], width=12),
        )
        functions = compute.functions
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Lambda duration (p90, ms)",
                left=[f.metric_duration(period=PERIOD, statistic="p90", label=n) for n, f in functions.items()],
                width=8,
            ),
            cw.GraphWidget(
                title="Lambda errors",
                left=[f.metric_errors(period=PERIOD, statistic="Sum", label=n) for n, f in functions.items()],
                width=8,
            ),
            cw.GraphWidget(
                title="Lambda throttles",
                left=[f.metric_throttles(period=PERIOD, statistic="Sum", label=n) for n, f in functions.items()],
                width=8,
            ),
        )
        cluster_name = compute.cluster.cluster_name
        self.dashboard.add_widgets(
            cw.GraphWidget(
                title="Fargate tasks (Container Insights)",
                left=[
                    cw.Metric(
                        namespace="ECS/ContainerInsights",
                        metric_name="TaskCount",
                        dimensions_map={"ClusterName": cluster_name},
                        statistic="Maximum",
                        period=PERIOD,
                    )
                ],
                width=12,
            ),
            cw.GraphWidget(
                title="Fargate CPU / memory utilized",
                left=[
                    cw.Metric(
                        namespace="ECS/ContainerInsights",
                        metric_name="CpuUtilized",
                        dimensions_map={"ClusterName": cluster_name},
                        statistic="Average",
                        period=PERIOD,
                    )
                ],
                right=[
                    cw.Metric(
                        namespace="ECS/ContainerInsights",
                        metric_name="MemoryUtilized",
                        dimensions_map={"ClusterName": cluster_name},
                        statistic="Average",
                        period=PERIOD,
                    )
                ],
                width=12,
            ),
        )

        # ---- alarms -------------------------------------------------------------------
        # Every alarm notifies this topic. It is encrypted with a key of its own: CloudWatch
        # cannot publish to a topic under the AWS managed key (alias/aws/sns, whose policy
        # cannot grant the cloudwatch service principal), so notifications would be dropped
        # silently. Both the key and the topic let CloudWatch in only for this environment's
        # alarms (names layoutlab-<env>-*) in this account.
        alarm_prefix = f"layoutlab-{config.name}-"
        from_our_alarms = {
            "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
            "ArnLike": {"aws:SourceArn": f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:{alarm_prefix}*"},
        }
        cloudwatch = iam.ServicePrincipal("cloudwatch.amazonaws.com")
        self.alarm_key = kms.Key(
            self,
            "AlarmsKey",
            description=f"layoutlab {config.name}: encrypts the alarm topic",
            enable_key_rotation=True,
            pending_window=Duration.days(7),
            removal_policy=config.cdk_removal_policy,
        )
        self.alarm_key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublishToTheEncryptedTopic",
                principals=[cloudwatch],
                # the pair AWS documents for services publishing to an SSE-KMS topic
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions=from_our_alarms,
            )
        )
        self.alarm_topic = sns.Topic(
            self,
            "Alarms",
            display_name=f"layoutlab {config.name} alarms",
            master_key=self.alarm_key,
            enforce_ssl=True,
        )
        self.alarm_topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[cloudwatch],
                actions=["sns:Publish"],
                resources=[self.alarm_topic.topic_arn],
                conditions=from_our_alarms,
            )
        )
        if config.alarm_email:
            self.alarm_topic.add_subscription(subscriptions.EmailSubscription(config.alarm_email))
        action = cw_actions.SnsAction(self.alarm_topic)

        def alarm(construct_id: str, description: str, metric: cw.IMetric, threshold: float = 1) -> cw.Alarm:
            created = cw.Alarm(
                self,
                construct_id,
                alarm_name=f"{alarm_prefix}{construct_id}",
                alarm_description=description,
                metric=metric,
                threshold=threshold,
                evaluation_periods=1,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            )
            created.add_alarm_action(action)
            return created

        self.alarms = [
            alarm(
                "ExecutionsFailed",
                "A pipeline execution failed (its dataset has a FAILURE item).",
                state_machine.metric_failed(period=PERIOD, statistic="Sum"),
            ),
            alarm(
                "ExecutionsTimedOut",
                "A pipeline execution timed out.",
                state_machine.metric_timed_out(period=PERIOD, statistic="Sum"),
            ),
            alarm(
                "PipelineFailuresRecorded",
                "record-failure wrote FAILURE items (any stage).",
                # Alarms cannot use SEARCH: sum the (known) stages explicitly.
                cw.MathExpression(
                    expression=" + ".join(f"FILL(s{i}, 0)" for i in range(len(obs.STAGES))),
                    using_metrics={
                        f"s{i}": custom_metric(obs.PIPELINE_FAILURES, "Sum", **service, **{obs.Dimension.STAGE: stage})
                        for i, stage in enumerate(obs.STAGES)
                    },
                    period=PERIOD,
                ),
            ),
            alarm(
                "IngestFailed",
                "Ingest could not handle an S3 event after retries (see the ingest failure queue).",
                compute.ingest_failures.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum"),
            ),
            alarm(
                "TriggerUndelivered",
                "EventBridge could not deliver an Object Created event to ingest (see the trigger DLQ).",
                pipeline.trigger_failures.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum"),
            ),
            alarm(
                "LambdaThrottled",
                "A layoutlab function was throttled (benchmark concurrency above the account's limit?).",
                cw.MathExpression(
                    expression=" + ".join(f"t{i}" for i in range(len(functions))),
                    using_metrics={
                        f"t{i}": f.metric_throttles(period=PERIOD, statistic="Sum") for i, f in enumerate(functions.values())
                    },
                    period=PERIOD,
                ),
            ),
        ]
        CfnOutput(
            self,
            "AlarmTopicArn",
            value=self.alarm_topic.topic_arn,
            description="Every alarm notifies this topic; subscribe here (or set alarm_email in cdk.json)",
        )
        CfnOutput(
            self,
            "DashboardUrl",
            value=f"https://console.aws.amazon.com/cloudwatch/home#dashboards:name=layoutlab-{config.name}",
        )
