"""layoutlab-<env>-compute: the code that runs — Lambda functions and Fargate tasks.

Both platforms run the same ``layoutlab`` package: Lambda from the ``functions/``
directory plus the dependency layer built by ``layers/build_layer.py``; Fargate
from the image built by ``cdk/container/Dockerfile`` (``python -m
layoutlab.handlers.task convert|bench``). Neither needs Docker to synthesize.
"""

from __future__ import annotations

import json
from pathlib import Path

from aws_cdk import ArnFormat, Aws, Duration, IgnoreMode, Size, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from layoutlab import observability

from . import iam as policy
from .nag import acknowledge
from .config import (
    DOCKERFILE,
    INGEST_PREFIX,
    OUTPUT_PREFIXES,
    PLANS_PREFIX,
    PYTHON_RUNTIME,
    REPO_ROOT,
    TASK_CONTAINER_NAME,
    ingest_queue_name,
    EnvConfig,
)

# Every function and the layer run on this one runtime (config.PYTHON_RUNTIME, Amazon Linux
# 2023); the named constant, so a version CDK does not know fails here rather than at deploy.
LAMBDA_RUNTIME: lambda_.Runtime = getattr(lambda_.Runtime, f"PYTHON_{PYTHON_RUNTIME.replace('.', '_')}")

CODE_EXCLUDES = ["**/__pycache__", "**/*.pyc", "*.egg-info", "**/tests", "**/.pytest_cache"]
# The image's build context is the repository root; only what the Dockerfile copies
# goes into the asset (and into cdk.out), never .venv, node_modules or cdk.out itself.
# The image's build context is the repository root; only what the Dockerfile copies (the two
# deployment artifacts) goes into the asset (and into cdk.out), never .venv, node_modules or cdk.out.
IMAGE_CONTEXT_EXCLUDES = [
    "*",
    "!layers/build/dependencies/python",
    "!layers/build/function",
    "!cdk/container",
    "**/__pycache__",
    "**/*.pyc",
]


# CloudWatch Logs accepts only these retention periods (days); jsii enums carry names, not numbers.
_RETENTION_BY_DAYS = {
    1: "ONE_DAY", 3: "THREE_DAYS", 5: "FIVE_DAYS", 7: "ONE_WEEK", 14: "TWO_WEEKS", 30: "ONE_MONTH",
    60: "TWO_MONTHS", 90: "THREE_MONTHS", 120: "FOUR_MONTHS", 150: "FIVE_MONTHS", 180: "SIX_MONTHS",
    365: "ONE_YEAR", 400: "THIRTEEN_MONTHS", 545: "EIGHTEEN_MONTHS", 731: "TWO_YEARS", 1096: "THREE_YEARS",
    1827: "FIVE_YEARS", 2192: "SIX_YEARS", 2557: "SEVEN_YEARS", 2922: "EIGHT_YEARS", 3288: "NINE_YEARS",
    3653: "TEN_YEARS",
}


def retention(days: int) -> logs.RetentionDays:
    """The RetentionDays member for a number of days."""
    if days not in _RETENTION_BY_DAYS:
        raise ValueError(f"log_retention_days={days} is not a CloudWatch retention; use one of {sorted(_RETENTION_BY_DAYS)}")
    return getattr(logs.RetentionDays, _RETENTION_BY_DAYS[days])


class ComputeStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: EnvConfig,
        layer_dir: Path,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        removal = config.cdk_removal_policy
        self._removal = removal
        self._log_retention = retention(config.log_retention_days)

        # The ingest function starts executions of a state machine defined in the pipeline
        # stack; its ARN is built from the fixed name so the stacks do not depend in a cycle.
        self.state_machine_arn = self.format_arn(
            service="states",
            resource="stateMachine",
            resource_name=config.state_machine_name,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )

        platforms = config.platforms()
        lambda_platform = next(name for name, p in platforms.items() if p["kind"] == "lambda")
        fargate_platform = next(name for name, p in platforms.items() if p["kind"] == "fargate")
        # Converters run as their own platforms (memory bound of a rechunk, the platform a
        # variant's convert time is recorded under): the convert function's memory and the
        # convert task's size, never the bench profiles.
        convert_platforms = config.convert_platforms()
        self.common_environment = {
            "LAYOUTLAB_ENV": config.name,
            "POWERTOOLS_SERVICE_NAME": observability.SERVICE,
            "POWERTOOLS_METRICS_NAMESPACE": observability.NAMESPACE,
            "POWERTOOLS_LOG_LEVEL": "INFO",
        }

        # ---- Lambda -------------------------------------------------------------------
        # The function asset: the package installed from its own wheel, C module built for the
        # runtime (layers/build_layer.py builds it beside the layer); the image copies the same two.
        function_dir = layer_dir.with_name("function")
        for built in (layer_dir / "python", function_dir / "layoutlab"):
            if not built.is_dir():
                raise FileNotFoundError(
                    f"{built}: the deployment artifacts are not built; run `make artifacts` "
                    "(python layers/build_layer.py) first"
                )
        code = lambda_.Code.from_asset(str(function_dir), exclude=CODE_EXCLUDES)
        self.layer = lambda_.LayerVersion(
            self,
            "Dependencies",
            # bytecode compiled by whoever imported from the build dir must not ship
            code=lambda_.Code.from_asset(str(layer_dir), exclude=["**/__pycache__", "**/*.pyc"]),
            compatible_runtimes=[LAMBDA_RUNTIME],
            compatible_architectures=[lambda_.Architecture.X86_64],
            description=f"layoutlab runtime dependencies for {LAMBDA_RUNTIME.name} (layers/build_layer.py, manylinux x86_64)",
            removal_policy=removal,
        )

        self.names = {
            "ingest_bucket": config.bucket_name("ingest"),
            "outputs_bucket": config.bucket_name("outputs"),
            "results_table": config.table_name("results"),
            "idempotency_table": config.table_name("idempotency"),
        }
        self.common_environment.update(
            LAYOUTLAB_INGEST_BUCKET=self.names["ingest_bucket"],
            LAYOUTLAB_OUTPUTS_BUCKET=self.names["outputs_bucket"],
            LAYOUTLAB_RESULTS_TABLE=self.names["results_table"],
        )
        permissions = {
            "ingest": self._ingest_permissions,
            "plan": self._plan_permissions,
            "convert": lambda role: self._convert_and_bench_permissions(role, write=True),
            "bench": lambda role: self._convert_and_bench_permissions(role, write=False),
            "summarize": self._summarize_permissions,
            # (and a failed product granule: its PRODUCT / GRANULE items are read back)
            "record_failure": lambda role: policy.allow(role, policy.DYNAMODB_READ + policy.DYNAMODB_WRITE,
                                                        [self._results_arn]),
            "backfill": self._backfill_permissions,
        }
        ceilings = config.ceilings.to_json()  # the same ceilings wherever work is estimated
        extra_environment = {
            "ingest": {
                "LAYOUTLAB_CEILINGS": ceilings,
                "LAYOUTLAB_IDEMPOTENCY_TABLE": self.names["idempotency_table"],
                "LAYOUTLAB_STATE_MACHINE_ARN": self.state_machine_arn,
                "LAYOUTLAB_MAX_INPUT_BYTES": str(config.max_input_bytes),
            },
            "plan": {
                "LAYOUTLAB_CEILINGS": ceilings,
                "LAYOUTLAB_PLATFORMS": json.dumps(platforms, sort_keys=True),
                "LAYOUTLAB_FARGATE_CONVERT_ABOVE_BYTES": str(config.fargate_convert_above_bytes),
                "LAYOUTLAB_WORK_UNITS_ABOVE_BYTES": str(config.work_units_above_bytes),
                "LAYOUTLAB_MAX_CONCURRENCY": json.dumps(config.max_concurrency, sort_keys=True),
                "LAYOUTLAB_TOLERATED_FAILURE_PERCENTAGE": str(config.tolerated_failure_percentage),
            },
            "bench": {"LAYOUTLAB_PLATFORM": lambda_platform},
            "convert": {"LAYOUTLAB_PLATFORM": convert_platforms["lambda"], "LAYOUTLAB_CEILINGS": ceilings},
        }
        # a backfill batch plans and converts each granule itself: the plan's settings and the converter's platform
        extra_environment["backfill"] = {**extra_environment["plan"], **extra_environment["convert"]}
        self.functions: dict[str, lambda_.Function] = {}
        for name, grant in permissions.items():
            self.functions[name] = self._function(name, code, grant, extra_environment.get(name, {}))

        # Ingest runs asynchronously (EventBridge → Lambda): events it still fails on after
        # Lambda's retries land in a queue instead of vanishing.
        self.ingest_failures = sqs.Queue(
            self,
            "IngestFailures",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
            removal_policy=removal,
        )
        acknowledge(
            self.ingest_failures,
            "AwsSolutions-SQS3",
            "This queue is the ingest function's on-failure destination (a dead-letter queue itself).",
        )
        self.functions["ingest"].configure_async_invoke(
            on_failure=destinations.SqsDestination(self.ingest_failures),
            retry_attempts=2,
            max_event_age=Duration.hours(6),
        )

        # ---- Fargate ------------------------------------------------------------------
        # Public subnets without NAT (no hourly NAT cost): tasks get a public IP to pull the
        # image, accept no inbound traffic, and reach S3 and DynamoDB through gateway
        # endpoints — the same in-region path a benchmark from Lambda measures.
        flow_logs = logs.LogGroup(self, "VpcFlowLogs", retention=self._log_retention, removal_policy=removal)
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=2,
            nat_gateways=0,
            restrict_default_security_group=False,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="tasks", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=22)
            ],
            gateway_endpoints={
                "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3),
                "DynamoDB": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.DYNAMODB),
            },
            flow_logs={
                "all": ec2.FlowLogOptions(
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
                    traffic_type=ec2.FlowLogTrafficType.REJECT,
                )
            },
        )
        self.task_subnets = self.vpc.public_subnets
        if len(self.task_subnets) != 2:
            raise ValueError("pipeline.asl.json names exactly two task subnets (${TaskSubnet1}, ${TaskSubnet2})")
        self.task_security_group = ec2.SecurityGroup(
            self,
            "TaskSecurityGroup",
            vpc=self.vpc,
            description="layoutlab Fargate tasks: no inbound; outbound to S3, DynamoDB, ECR, CloudWatch",
            allow_all_outbound=True,
        )
        self.cluster = ecs.Cluster(
            self,
            "Cluster",
            cluster_name=config.cluster_name,
            vpc=self.vpc,
            container_insights_v2=ecs.ContainerInsights.ENABLED,
        )
        self.image = ecs.ContainerImage.from_asset(
            str(REPO_ROOT),
            file=DOCKERFILE,
            exclude=IMAGE_CONTEXT_EXCLUDES,
            ignore_mode=IgnoreMode.DOCKER,
            platform=ecr_assets.Platform.LINUX_AMD64,
        )
        self.convert_task = self._task_definition(
            "convert",
            config.convert_task,
            lambda role: self._convert_and_bench_permissions(role, write=True),
            {"LAYOUTLAB_PLATFORM": convert_platforms["fargate"], "LAYOUTLAB_CEILINGS": config.ceilings.to_json()},
        )
        self.bench_task = self._task_definition(
            "bench",
            config.bench_task,
            lambda role: self._convert_and_bench_permissions(role, write=False),
            {"LAYOUTLAB_PLATFORM": fargate_platform},
        )
        self.task_container_name = TASK_CONTAINER_NAME

    # -------------------------------------------------------------------------------------
    @property
    def _results_arn(self) -> str:
        return policy.table_arn(self.names["results_table"])

    def _read_inputs(self, role: iam.IRole, prefixes: list[str]) -> None:
        policy.allow_objects(role, self.names["ingest_bucket"], prefixes, policy.S3_READ)
        policy.allow_list(role, self.names["ingest_bucket"], prefixes)

    def _ingest_permissions(self, role: iam.IRole) -> None:
        self._read_inputs(role, [INGEST_PREFIX, PLANS_PREFIX])
        # the ingest queue's event source (pipeline stack) receives and deletes with this role; the handler sets a
        # refused upload's visibility (a product at its bound: handlers/ingest.py, GetQueueUrl + ChangeMessageVisibility)
        policy.allow(role, ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility",
                            "sqs:GetQueueAttributes", "sqs:GetQueueUrl"],
                     [f"arn:{Aws.PARTITION}:sqs:{Aws.REGION}:{Aws.ACCOUNT_ID}:{ingest_queue_name(self.config)}"])
        policy.allow(role, policy.DYNAMODB_IDEMPOTENCY, [policy.table_arn(self.names["idempotency_table"])])
        policy.allow(role, policy.DYNAMODB_WRITE, [self._results_arn])
        policy.allow(role, ["states:StartExecution"], [self.state_machine_arn])

    def _plan_permissions(self, role: iam.IRole) -> None:
        self._read_inputs(role, [INGEST_PREFIX, PLANS_PREFIX])
        outputs = self.names["outputs_bucket"]
        # writes the case lists; for a later round of repetitions (phase more_repetitions) reads the first back
        policy.allow_objects(role, outputs, [OUTPUT_PREFIXES["runs"]], policy.S3_READ + policy.S3_WRITE)
        # plan stages the (empty) target of a rechunk that fans out over work units.
        variants = OUTPUT_PREFIXES["variants"]
        policy.allow_objects(role, outputs, [variants], policy.S3_READ + policy.S3_WRITE + policy.S3_DELETE)
        policy.allow_list(role, outputs, [variants])
        # the dataset's RESULT items decide which comparisons get more repetitions
        policy.allow(role, policy.DYNAMODB_READ + policy.DYNAMODB_WRITE, [self._results_arn])

    def _backfill_permissions(self, role: iam.IRole) -> None:
        """Each granule of a batch: admitted (the results table), planned and converted under products/."""
        self._convert_and_bench_permissions(role, write=True)
        policy.allow(role, policy.DYNAMODB_READ, [self._results_arn])

    def _convert_and_bench_permissions(self, role: iam.IRole, *, write: bool) -> None:
        variants, products = OUTPUT_PREFIXES["variants"], OUTPUT_PREFIXES["products"]
        self._read_inputs(role, [INGEST_PREFIX])
        outputs = self.names["outputs_bucket"]
        actions = policy.S3_READ + (policy.S3_WRITE + policy.S3_DELETE if write else [])
        # a product's granules are converted (and drift-checked) under products/
        policy.allow_objects(role, outputs, [variants, products], actions)
        policy.allow_list(role, outputs, [variants, products])
        policy.allow(role, policy.DYNAMODB_WRITE, [self._results_arn])
        if write:
            # a fanned-out rechunk's publish step reads its work units' records back (Query)
            policy.allow(role, ["dynamodb:Query"], [self._results_arn])
        else:
            # a case reads its variant's item: a variant the convert step SKIPPED (page_size auto) is not measured
            policy.allow(role, ["dynamodb:GetItem"], [self._results_arn])

    def _summarize_permissions(self, role: iam.IRole) -> None:
        from .data_stack import PATTERN_INDEX

        results = self._results_arn
        policy.allow(role, policy.DYNAMODB_READ + policy.DYNAMODB_WRITE, [results, f"{results}/index/{PATTERN_INDEX}"])
        outputs = self.names["outputs_bucket"]
        policy.allow_objects(role, outputs, [OUTPUT_PREFIXES["map_runs"], OUTPUT_PREFIXES["runs"]], policy.S3_READ)
        policy.allow_objects(role, outputs, [OUTPUT_PREFIXES["summaries"], OUTPUT_PREFIXES["reports"]], policy.S3_WRITE)

    def _function(
        self,
        name: str,
        code: lambda_.Code,
        grant,
        extra_environment: dict[str, str],
    ) -> lambda_.Function:
        title = "".join(part.capitalize() for part in name.split("_"))
        size = self.config.functions[name]
        function_name = self.config.function_name(name)
        log_group = logs.LogGroup(
            self,
            f"{title}Logs",
            log_group_name=f"/aws/lambda/{function_name}",
            retention=self._log_retention,
            removal_policy=self._removal,
        )
        role = iam.Role(
            self,
            f"{title}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"layoutlab {name} function",
        )
        # Instead of AWSLambdaBasicExecutionRole (any log group): this function's group only.
        policy.allow(
            role,
            ["logs:CreateLogStream", "logs:PutLogEvents"],
            [log_group.log_group_arn],
            wildcard_reason="Log streams of this function's own log group (stream names are made at run time).",
        )
        grant(role)
        function = lambda_.Function(
            self,
            f"{title}Function",
            function_name=function_name,
            description=f"layoutlab {name}: layoutlab.handlers.{name}.handler",
            runtime=LAMBDA_RUNTIME,
            architecture=lambda_.Architecture.X86_64,
            handler=f"layoutlab.handlers.{name}.handler",
            code=code,
            layers=[self.layer],
            memory_size=size.memory_mb,
            timeout=Duration.seconds(size.timeout_seconds),
            ephemeral_storage_size=Size.mebibytes(size.ephemeral_storage_mb),
            role=role,
            log_group=log_group,
            tracing=lambda_.Tracing.ACTIVE,
            environment={**self.common_environment, **extra_environment},
        )
        _acknowledge_common(role, function)
        return function

    def _task_definition(
        self,
        command: str,
        size,
        grant,
        extra_environment: dict[str, str],
    ) -> ecs.FargateTaskDefinition:
        title = command.capitalize()
        task_role = iam.Role(
            self,
            f"{title}TaskRole",
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            description=f"layoutlab {command} Fargate task",
        )
        grant(task_role)
        task = ecs.FargateTaskDefinition(
            self,
            f"{title}Task",
            family=self.config.task_family(command),
            cpu=size.cpu,
            memory_limit_mib=size.memory_mb,
            ephemeral_storage_gib=size.ephemeral_storage_gib,
            task_role=task_role,
            runtime_platform=ecs.RuntimePlatform(
                cpu_architecture=ecs.CpuArchitecture.X86_64,
                operating_system_family=ecs.OperatingSystemFamily.LINUX,
            ),
        )
        log_group = logs.LogGroup(
            self, f"{title}TaskLogs", retention=self._log_retention, removal_policy=self._removal
        )
        task.add_container(
            TASK_CONTAINER_NAME,
            image=self.image,
            # Same entry point as the Lambda handler; the state machine passes the payload
            # in the LAYOUTLAB_TASK_PAYLOAD environment override (stepfunctions/README.md).
            command=["python", "-m", "layoutlab.handlers.task", command],
            essential=True,
            logging=ecs.LogDrivers.aws_logs(stream_prefix=command, log_group=log_group),
            environment={**self.common_environment, **extra_environment},
        )
        acknowledge(
            task,
            "AwsSolutions-ECS2",
            "The environment holds only resource names and settings (no secrets); the task "
            "payload arrives per run as an override.",
        )
        acknowledge(
            task,
            "AwsSolutions-IAM5[Resource::*]",
            "ecr:GetAuthorizationToken (added by CDK to the execution role) has no resource-level "
            "permissions; AWS requires Resource '*'.",
        )
        return task


def _acknowledge_common(role: iam.Role, function: lambda_.Function) -> None:
    acknowledge(
        role,
        "AwsSolutions-IAM5[Resource::*]",
        "X-Ray PutTraceSegments/PutTelemetryRecords (active tracing) have no resource-level "
        "permissions; AWS requires Resource '*'.",
    )
    acknowledge(
        function,
        "AwsSolutions-L1",
        f"Pinned to {LAMBDA_RUNTIME.name} (Amazon Linux 2023, glibc 2.34), the one interpreter the "
        f"project, its dependency layer (cp{PYTHON_RUNTIME.replace('.', '')} manylinux wheels) and the Fargate image are built and "
        "tested for (config.PYTHON_RUNTIME).",
    )
