"""layoutlab-<env>-pipeline: the state machine and the trigger that feeds it.

The state machine's definition is ``stepfunctions/pipeline.asl.json`` verbatim —
the same file the local run executes — passed with ``DefinitionBody.from_string``
(so the template shows it, unlike ``from_file``'s S3 asset) and CloudFormation
``DefinitionSubstitutions`` for every ``${Name}`` in it.
"""

from __future__ import annotations

import re

from aws_cdk import ArnFormat, Aws, CfnOutput, Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from layoutlab.pipeline.events import object_created_pattern

from . import iam as policy
from .compute_stack import ComputeStack, retention
from .nag import acknowledge
from .config import (ASL_PATH, BACKFILL_ASL_PATH, INGEST_BATCH_SIZE, INGEST_BATCH_WINDOW_SECONDS,
                     INGEST_MAX_CONCURRENCY, INGEST_PREFIX, INGEST_QUEUE_MAX_RECEIVES, INGEST_QUEUE_VISIBILITY_FACTOR,
                     OUTPUT_PREFIXES, EnvConfig, ingest_queue_name)

PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")


def asl_placeholders(text: str) -> set[str]:
    """Every ``${Name}`` the definition expects to be substituted."""
    return set(PLACEHOLDER.findall(text))


class PipelineStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvConfig,
        compute: ComputeStack,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        removal = config.cdk_removal_policy  # prod: RETAIN_ON_UPDATE_OR_DELETE (config.py)
        functions = compute.functions
        outputs_bucket = config.bucket_name("outputs")

        self.definition_text = ASL_PATH.read_text()
        # Task definitions go in by *family* (plain strings fixed by config): RunTask then runs
        # the latest ACTIVE revision. A revision ARN would be a cross-stack export that changes
        # with every image or code change, and CloudFormation refuses to update an export
        # another stack imports ("export ... in use"): the second deploy would fail.
        task_families = {command: config.task_family(command) for command in ("convert", "bench")}
        self.substitutions = {
            "PlanFunctionArn": functions["plan"].function_arn,
            "ConvertFunctionArn": functions["convert"].function_arn,
            "BenchFunctionArn": functions["bench"].function_arn,
            "SummarizeFunctionArn": functions["summarize"].function_arn,
            "RecordFailureFunctionArn": functions["record_failure"].function_arn,
            "ClusterArn": compute.cluster.cluster_arn,
            "ConvertTaskDefinitionArn": task_families["convert"],
            "BenchTaskDefinitionArn": task_families["bench"],
            "TaskSubnet1": compute.task_subnets[0].subnet_id,
            "TaskSubnet2": compute.task_subnets[1].subnet_id,
            "TaskSecurityGroup": compute.task_security_group.security_group_id,
            "TaskContainerName": compute.task_container_name,
            "OutputsBucketName": outputs_bucket,
        }
        missing = asl_placeholders(self.definition_text) - set(self.substitutions)
        unused = set(self.substitutions) - asl_placeholders(self.definition_text)
        if missing or unused:
            raise ValueError(f"{ASL_PATH}: substitutions missing {sorted(missing)}, unused {sorted(unused)}")

        role = iam.Role(
            self,
            "StateMachineRole",
            assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
            description="layoutlab pipeline state machine",
        )
        self.state_machine_arn = self.format_arn(
            service="states",
            resource="stateMachine",
            resource_name=config.state_machine_name,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        executions_arn = self.format_arn(
            service="states",
            resource="execution",
            resource_name=f"{config.state_machine_name}/*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        invoked = [functions[n] for n in ("plan", "convert", "bench", "summarize", "record_failure")]
        policy.allow(role, ["lambda:InvokeFunction"], [f.function_arn for f in invoked])
        # ecs:runTask.sync: run the task, watch it, stop it on abort, pass its roles.
        policy.allow(
            role,
            ["ecs:RunTask"],
            [
                f"arn:{Aws.PARTITION}:ecs:{Aws.REGION}:{Aws.ACCOUNT_ID}:task-definition/{family}:*"
                for family in task_families.values()
            ],
            conditions={"ArnEquals": {"ecs:cluster": compute.cluster.cluster_arn}},
            wildcard_reason="Any revision of this pipeline's two task families: the state machine names the "
            "family (latest ACTIVE revision), so a new image needs no change here.",
        )
        policy.allow(
            role,
            ["ecs:StopTask", "ecs:DescribeTasks"],
            [f"arn:{Aws.PARTITION}:ecs:{Aws.REGION}:{Aws.ACCOUNT_ID}:task/{config.cluster_name}/*"],
            wildcard_reason="ECS assigns task ids at run time; scoped to the tasks of this pipeline's cluster.",
        )
        policy.allow(
            role,
            ["iam:PassRole"],
            [
                compute.convert_task.task_role.role_arn,
                compute.convert_task.obtain_execution_role().role_arn,
                compute.bench_task.task_role.role_arn,
                compute.bench_task.obtain_execution_role().role_arn,
            ],
            conditions={"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}},
        )
        policy.allow(
            role,
            ["events:PutTargets", "events:PutRule", "events:DescribeRule"],
            [f"arn:{Aws.PARTITION}:events:{Aws.REGION}:{Aws.ACCOUNT_ID}:rule/StepFunctionsGetEventsForECSTaskRule"],
        )
        # Distributed Map: read the lists plan wrote, write the ResultWriter output.
        policy.allow_objects(role, outputs_bucket, [OUTPUT_PREFIXES["runs"]], policy.S3_READ)
        policy.allow_objects(role, outputs_bucket, [OUTPUT_PREFIXES["map_runs"]], policy.S3_READ + policy.S3_WRITE)
        # Distributed Map runs its iterations as child executions of this state machine.
        policy.allow(role, ["states:StartExecution"], [self.state_machine_arn])
        policy.allow(
            role,
            ["states:DescribeExecution", "states:StopExecution"],
            [executions_arn],
            wildcard_reason="Distributed Map child executions are named at run time; scoped to executions "
            "of this state machine.",
        )

        log_group = logs.LogGroup(
            self,
            "StateMachineLogs",
            log_group_name=f"/aws/vendedlogs/states/{config.state_machine_name}",
            retention=retention(config.log_retention_days),
            removal_policy=removal,
        )
        self.state_machine = sfn.StateMachine(
            self,
            "Pipeline",
            state_machine_name=config.state_machine_name,
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_string(self.definition_text),
            definition_substitutions=self.substitutions,
            role=role,
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
            tracing_enabled=True,
            removal_policy=removal,
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "CloudWatch Logs delivery (logs:CreateLogDelivery & co.) and X-Ray tracing actions have "
            "no resource-level permissions; AWS requires Resource '*'.",
        )

        # ---- trigger: S3 Object Created under incoming/ → EventBridge → SQS → ingest (batches) ----------
        # The queue smooths a burst of uploads: ingest takes batches at the pace its event source allows, and a
        # record it cannot start yet (its product runs as many executions as its plan allows, or an AWS error)
        # comes back as a batch item failure and is delivered again after the visibility timeout.
        self.trigger_failures = sqs.Queue(
            self,
            "TriggerFailures",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
            removal_policy=removal,
        )
        acknowledge(
            self.trigger_failures,
            "AwsSolutions-SQS3",
            "This queue is the dead-letter queue of the EventBridge rule target and of the ingest queue.",
        )
        ingest_timeout = config.functions["ingest"].timeout_seconds
        self.ingest_queue = sqs.Queue(
            self,
            "IngestQueue",
            queue_name=ingest_queue_name(config),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
            # AWS's advice for an SQS event source: at least six times the function's timeout
            visibility_timeout=Duration.seconds(INGEST_QUEUE_VISIBILITY_FACTOR * ingest_timeout),
            dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=INGEST_QUEUE_MAX_RECEIVES,
                                                  queue=self.trigger_failures),
            removal_policy=removal,
        )
        # the local cloud's rule has the same pattern (layoutlab.local.pipeline)
        trigger_pattern = object_created_pattern(config.bucket_name("ingest"), INGEST_PREFIX)
        self.trigger = events.Rule(
            self,
            "IngestTrigger",
            description=f"Object Created under s3://<ingest>/{INGEST_PREFIX} queues layoutlab ingest",
            event_pattern=events.EventPattern(
                source=trigger_pattern["source"],
                detail_type=trigger_pattern["detail-type"],
                detail=trigger_pattern["detail"],
            ),
            targets=[
                targets.SqsQueue(
                    self.ingest_queue,
                    dead_letter_queue=self.trigger_failures,
                    retry_attempts=8,
                    max_event_age=Duration.hours(2),
                )
            ],
        )
        ingest = functions["ingest"]  # (its role may consume the queue: compute_stack, by the queue's name)
        self.ingest_source = lambda_.EventSourceMapping(
            self,
            "IngestQueueSource",
            target=ingest,
            event_source_arn=self.ingest_queue.queue_arn,
            batch_size=INGEST_BATCH_SIZE,
            max_batching_window=Duration.seconds(INGEST_BATCH_WINDOW_SECONDS),
            report_batch_item_failures=True,
            max_concurrency=INGEST_MAX_CONCURRENCY,
        )
        CfnOutput(self, "StateMachineArn", value=self.state_machine.state_machine_arn)
        self._backfill(config, functions, outputs_bucket, removal)

    def _backfill(self, config: EnvConfig, functions, outputs_bucket: str, removal) -> None:
        """The backfill state machine (``stepfunctions/backfill.asl.json`` verbatim, as the pipeline's): one
        Distributed Map that lists an archive prefix itself (ItemReader s3:listObjectsV2) and converts
        batches of granules with the backfill function."""
        self.backfill_definition_text = BACKFILL_ASL_PATH.read_text()
        self.backfill_substitutions = {"BackfillFunctionArn": functions["backfill"].function_arn,
                                       "OutputsBucketName": outputs_bucket}
        missing = asl_placeholders(self.backfill_definition_text) ^ set(self.backfill_substitutions)
        if missing:
            raise ValueError(f"{BACKFILL_ASL_PATH}: substitutions and placeholders differ: {sorted(missing)}")
        name = config.backfill_state_machine_name
        role = iam.Role(self, "BackfillRole", assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
                        description="layoutlab backfill state machine")
        arn = self.format_arn(service="states", resource="stateMachine", resource_name=name,
                              arn_format=ArnFormat.COLON_RESOURCE_NAME)
        executions = self.format_arn(service="states", resource="execution", resource_name=f"{name}/*",
                                     arn_format=ArnFormat.COLON_RESOURCE_NAME)
        policy.allow(role, ["lambda:InvokeFunction"], [functions["backfill"].function_arn])
        # ItemReader s3:listObjectsV2 over the archive: the uploads under incoming/ (other archives: grant here)
        policy.allow_list(role, config.bucket_name("ingest"), [INGEST_PREFIX])
        # the local form's item pages (runs/), the ResultWriter's per-item results (map-runs/)
        policy.allow_objects(role, outputs_bucket, [OUTPUT_PREFIXES["runs"]], policy.S3_READ)
        policy.allow_objects(role, outputs_bucket, [OUTPUT_PREFIXES["map_runs"]], policy.S3_READ + policy.S3_WRITE)
        policy.allow(role, ["states:StartExecution"], [arn])
        policy.allow(role, ["states:DescribeExecution", "states:StopExecution"], [executions],
                     wildcard_reason="Distributed Map child executions are named at run time; scoped to executions "
                     "of the backfill state machine.")
        log_group = logs.LogGroup(self, "BackfillLogs", log_group_name=f"/aws/vendedlogs/states/{name}",
                                  retention=retention(config.log_retention_days), removal_policy=removal)
        self.backfill_state_machine = sfn.StateMachine(
            self, "Backfill", state_machine_name=name, state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_string(self.backfill_definition_text),
            definition_substitutions=self.backfill_substitutions, role=role,
            logs=sfn.LogOptions(destination=log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
            tracing_enabled=True, removal_policy=removal)
        acknowledge(role, "AwsSolutions-IAM5[Resource::*]",
                    "CloudWatch Logs delivery (logs:CreateLogDelivery & co.) and X-Ray tracing actions have no "
                    "resource-level permissions; AWS requires Resource '*'.")
        CfnOutput(self, "BackfillStateMachineArn", value=self.backfill_state_machine.state_machine_arn)
