"""Local dispatch: every Lambda invocation and Fargate task of the pipeline, run from the deployment artifacts.

Installed in the local cloud's server process (``cloud.serve``), where moto's
Step Functions interpreter runs: ``sfn_adapter`` hands each Lambda task and
each ``ecs:runTask.sync`` task to the functions here, which run it with the
runtime's Python from the built layer and function asset, laid out as Lambda
or the Fargate image lays them out (``artifact_runtime``), in a process of its
own pinned to the measured core with the memory limit of the platform it stands
for and the ephemeral storage its function is configured with, and pass its
answer (or its error, by name) back to the state machine.

Names of the local resources live here too, so the local run, the demo and the
tests agree on them.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from layoutlab import settings
from layoutlab.ceilings import ENV_VARIABLE as CEILINGS_VARIABLE
from layoutlab.ceilings import Ceilings
from layoutlab.local import sfn_adapter
from layoutlab.local.cloud import LOCAL_CREDENTIALS

LOG = logging.getLogger(__name__)

ACCOUNT = "123456789012"
REGION = "us-east-1"
PREFIX = "layoutlab-local"
INGEST_BUCKET = f"{PREFIX}-ingest"
OUTPUTS_BUCKET = f"{PREFIX}-outputs"
RESULTS_TABLE = f"{PREFIX}-results"
IDEMPOTENCY_TABLE = f"{PREFIX}-idempotency"
STATE_MACHINE = f"{PREFIX}-pipeline"
BACKFILL_STATE_MACHINE = f"{PREFIX}-backfill"
# S3 → EventBridge → this queue → ingest (layoutlab.local.sqs_source), as the CDK app deploys it. Locally an
# upload over its product's bound comes back after 10 s, not AWS's 6 × ingest's timeout (a burst on one core
# would otherwise idle), and a record goes to the dead-letter queue after 1,000 deliveries (hours here).
INGEST_QUEUE = f"{PREFIX}-ingest-queue"
INGEST_DEAD_LETTERS = f"{PREFIX}-ingest-dead-letters"
INGEST_QUEUE_VISIBILITY_S = 10
INGEST_QUEUE_MAX_RECEIVES = 1000
# ingest invocations at once: the deployed event source allows INGEST_MAX_CONCURRENCY; two cores here
INGEST_POLLERS = 2
# the plan (plans/<name>.json in the ingest bucket) that an upload naming none runs locally
LOCAL_DEFAULT_PLAN = "local"
CLUSTER = f"{PREFIX}"
CONTAINER = "layoutlab"
FUNCTIONS = ("ingest", "plan", "convert", "bench", "summarize", "record_failure", "backfill")
# Locally the bench cases of one dataset run one at a time: they share the measured core.
MAX_CONCURRENCY = {"convert": 1, "work_units": 1, "bench": 1}
PLATFORMS = {"local-lambda": {"kind": "lambda"}, "local-fargate": {"kind": "fargate"}}
TASK_LOG_ENV = "LAYOUTLAB_TASK_LOG"
TASK_TIMEOUT_S = {"ingest": 120, "plan": 300, "convert": 900, "bench": 300, "summarize": 120, "record_failure": 60,
                  "backfill": 900}
# The local counterpart of a Lambda function's configured timeout: JSON like {"bench": 30},
# read by the local cloud server when it starts.
TASK_TIMEOUT_ENV = "LAYOUTLAB_TASK_TIMEOUT_S"
LAMBDA_TIMEOUT_ERROR = "Sandbox.Timedout"


def task_timeouts(environ=None) -> dict[str, float]:
    """``TASK_TIMEOUT_S`` with the overrides of ``LAYOUTLAB_TASK_TIMEOUT_S``; a clear error for bad ones."""
    timeouts = dict(TASK_TIMEOUT_S)
    for name, seconds in settings.value(TASK_TIMEOUT_ENV, environ).items():
        if name not in TASK_TIMEOUT_S or not isinstance(seconds, (int, float)) or seconds <= 0:
            raise ValueError(f"{TASK_TIMEOUT_ENV}: {name!r}: {seconds!r}: expected {{task: seconds > 0}} with task "
                             f"one of {', '.join(TASK_TIMEOUT_S)}")
        timeouts[name] = float(seconds)
    return timeouts


def function_name(name: str) -> str:
    return f"{PREFIX}-{name.replace('_', '-')}"


def function_arn(name: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function_name(name)}"


def task_definition_arn(kind: str) -> str:
    return f"arn:aws:ecs:{REGION}:{ACCOUNT}:task-definition/{PREFIX}-{kind}:1"


def state_machine_arn() -> str:
    return f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{STATE_MACHINE}"


def backfill_state_machine_arn() -> str:
    return f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{BACKFILL_STATE_MACHINE}"


def substitutions() -> dict[str, str]:
    """Values for the ASL's ``${...}`` placeholders in the local run."""
    return {
        "PlanFunctionArn": function_arn("plan"),
        "ConvertFunctionArn": function_arn("convert"),
        "BenchFunctionArn": function_arn("bench"),
        "SummarizeFunctionArn": function_arn("summarize"),
        "RecordFailureFunctionArn": function_arn("record_failure"),
        "BackfillFunctionArn": function_arn("backfill"),
        "ClusterArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/{CLUSTER}",
        "ConvertTaskDefinitionArn": task_definition_arn("convert"),
        "BenchTaskDefinitionArn": task_definition_arn("bench"),
        "TaskSubnet1": "subnet-local1",
        "TaskSubnet2": "subnet-local2",
        "TaskSecurityGroup": "sg-local",
        "TaskContainerName": CONTAINER,
        "OutputsBucketName": OUTPUTS_BUCKET,
    }


def task_environment(moto_endpoint: str, proxy_control: str | None) -> dict[str, str]:
    """What every local task gets: endpoints, resource names, plan settings (as the CDK app sets them)."""
    env = {
        "AWS_ENDPOINT_URL": moto_endpoint,
        # Conversions and bookkeeping talk to moto directly; a bench case opens its own
        # latency-emulating proxy client (LAYOUTLAB_PROXY_CONTROL) for what it measures.
        "AWS_ENDPOINT_URL_S3": moto_endpoint,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        # the local cloud's stand-ins, never the user's own credentials (moto takes any)
        **LOCAL_CREDENTIALS,
        "AWS_EC2_METADATA_DISABLED": "true",
        "LAYOUTLAB_ENV": "local",
        "LAYOUTLAB_INGEST_BUCKET": INGEST_BUCKET,
        "LAYOUTLAB_OUTPUTS_BUCKET": OUTPUTS_BUCKET,
        "LAYOUTLAB_RESULTS_TABLE": RESULTS_TABLE,
        "LAYOUTLAB_IDEMPOTENCY_TABLE": IDEMPOTENCY_TABLE,
        "LAYOUTLAB_DEFAULT_PLAN": LOCAL_DEFAULT_PLAN,
        "LAYOUTLAB_STATE_MACHINE_ARN": state_machine_arn(),
        "LAYOUTLAB_PLATFORMS": json.dumps(PLATFORMS),
        "LAYOUTLAB_MAX_CONCURRENCY": json.dumps(MAX_CONCURRENCY),
        CEILINGS_VARIABLE: local_ceilings(),
        "POWERTOOLS_SERVICE_NAME": "layoutlab",
        "POWERTOOLS_METRICS_NAMESPACE": "layoutlab",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }
    if proxy_control:
        env["LAYOUTLAB_PROXY_CONTROL"] = proxy_control
    # the isolation switches of the cloud's own environment (a test turns one wall off to see the other hold)
    for name in ("LAYOUTLAB_SANDBOX", "LAYOUTLAB_OUTSIDE_FILE_CHECK"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    return env


# cdk.json's environment whose sizes the local run takes (ephemeral storage of each function and task).
LOCAL_SIZES_ENV = "dev"
DEFAULT_EPHEMERAL_MB = 512  # Lambda's default /tmp


def _cdk_environment() -> dict | None:
    """The checkout's cdk.json environment the local run follows (``dev``), or None without one."""
    cdk_json = Path(__file__).resolve().parents[3] / "cdk.json"
    try:
        return json.loads(cdk_json.read_text())["context"]["layoutlab:environments"][LOCAL_SIZES_ENV]
    except (OSError, ValueError, KeyError):
        return None


def local_ceilings(environ=None) -> str:
    """``LAYOUTLAB_CEILINGS`` of the local run, as the CDK app gives it: the value the local cloud was
    started with (to try other ceilings), else cdk.json's ``dev`` ceilings (layoutlab's defaults where absent)."""
    if settings.given(CEILINGS_VARIABLE, environ):
        return settings.value(CEILINGS_VARIABLE, environ).to_json()
    env = _cdk_environment() or {}
    return Ceilings.from_mapping(env.get("ceilings", {}), f"cdk.json: {LOCAL_SIZES_ENV}.ceilings").to_json()


def ephemeral_storage_mb(environ=None) -> dict[str, int]:
    """Scratch space per local task (Lambda functions by name, ``fargate-convert``/``fargate-bench``), from the
    checkout's cdk.json (environment ``dev``); Lambda's default where a size is not configured."""
    sizes = {name: DEFAULT_EPHEMERAL_MB for name in FUNCTIONS}
    sizes.update({"fargate-convert": 20 * 1024, "fargate-bench": 20 * 1024})
    env = _cdk_environment()
    if env is None:
        return sizes
    for name, size in env.get("functions", {}).items():
        sizes[name] = int(size.get("ephemeral_storage_mb", DEFAULT_EPHEMERAL_MB))
    for kind in ("convert", "bench"):
        if "ephemeral_storage_gib" in env.get(f"{kind}_task", {}):
            sizes[f"fargate-{kind}"] = int(env[f"{kind}_task"]["ephemeral_storage_gib"]) * 1024
    return sizes


def _platform_for(name: str, event) -> str:
    """Which platform profile (memory limit) a local invocation stands for."""
    if isinstance(event, dict) and name == "bench" and event.get("platform"):
        return event["platform"]
    return "local-lambda"


class Dispatcher:
    """Runs tasks one at a time: every task process is pinned to the same measured core, and
    two executions (two uploads) running side by side must not share it while measuring."""

    def __init__(self, moto_endpoint: str, proxy_control: str | None, cpu: int | None):
        import threading

        self.env = task_environment(moto_endpoint, proxy_control)
        self.cpu = cpu
        self.timeouts = task_timeouts()
        self._one_at_a_time = threading.Lock()
        self._cloudwatch = None
        self._moto_endpoint = moto_endpoint
        self._hosts: dict = {}
        self._artifacts = None
        self.scratch_mb = ephemeral_storage_mb()
        # In AWS a task's stdout/stderr goes to CloudWatch Logs; locally it is kept only when
        # LAYOUTLAB_TASK_LOG names a file (appended to), e.g. to read or scan the tasks' logs.
        self._task_log = settings.value(TASK_LOG_ENV) or None

    def _task_output(self, printed: bytes) -> None:
        if self._task_log and printed:
            with open(self._task_log, "ab") as log:  # one append per task: tasks' lines never interleave
                log.write(printed if printed.endswith(b"\n") else printed + b"\n")
        self._forward_metrics(printed)

    def _forward_metrics(self, printed: bytes) -> None:
        """Tasks print their metrics as EMF; in AWS Lambda delivers them, here we do."""
        import boto3

        from layoutlab.local import emf

        if self._cloudwatch is None:
            self._cloudwatch = boto3.client("cloudwatch", endpoint_url=self._moto_endpoint, region_name=REGION,
                                            aws_access_key_id="testing", aws_secret_access_key="testing")
        try:
            emf.forward(printed, self._cloudwatch)
        except Exception as error:  # metrics are a by-product: never fail a task over them, but say so
            LOG.warning("could not forward a task's metrics to the local CloudWatch: %s", error)

    def _host(self, kind: str):
        from layoutlab.local.artifact_runtime import Artifacts, TaskHost

        if kind not in self._hosts:
            self._hosts[kind] = TaskHost(self._artifacts or Artifacts.locate(), kind, self.env)
        return self._hosts[kind]

    def _run(self, kind: str, target: str, payload, platform: str, timeout: float, scratch_mb: int,
             env: dict | None = None):
        from layoutlab.platforms import platform_profile

        memory_mb = platform_profile(platform).memory_mb
        with self._one_at_a_time:
            started = time.perf_counter()
            outcome = self._host(kind).run(target, payload, memory_mb=memory_mb, cpu=self.cpu, timeout=timeout,
                                           scratch_limit_mb=scratch_mb, env={"LAYOUTLAB_PLATFORM": platform, **(env or {})},
                                           on_output=self._task_output)
        LOG.info("%s on %s (%s): %s in %.2f s (task's own wall %.2f s)", target, platform, kind,
                 "ok" if outcome.ok else "failed", time.perf_counter() - started, outcome.process_wall_s)
        if not outcome.ok:
            LOG.warning("local task %s failed: %s", target, outcome.error)
            error_type = outcome.error_type or "TaskFailed"
            if outcome.timed_out:
                error_type = "States.Timeout"
            raise sfn_adapter.TaskFailed(error_type, outcome.error or "failed")
        return outcome.result

    def stop(self) -> None:
        for host in self._hosts.values():
            host.stop()

    def invoke_lambda(self, function: str, event):
        name = function.removeprefix(PREFIX + "-").replace("-", "_")
        if name not in FUNCTIONS:
            raise sfn_adapter.TaskFailed("Lambda.ResourceNotFoundException", f"no local function {function!r}")
        function_env = {"AWS_LAMBDA_FUNCTION_NAME": function_name(name), "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
                        "LAYOUTLAB_FUNCTION_ARN": function_arn(name),
                        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{function_name(name)}"}
        platform = _platform_for(name, event)
        from layoutlab.platforms import platform_profile

        function_env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = str(platform_profile(platform).memory_mb)
        try:
            return self._run("lambda", f"handler:{name}", event, platform, self.timeouts[name],
                             self.scratch_mb[name], env=function_env)
        except sfn_adapter.TaskFailed as failure:
            if failure.error == "States.Timeout":
                # What lambda:invoke reports when the function hits its own timeout; a function
                # error may not carry a States.* name (moto's interpreter refuses it, as AWS does).
                raise sfn_adapter.TaskFailed(LAMBDA_TIMEOUT_ERROR, failure.cause) from None
            raise

    def run_task(self, parameters: dict) -> None:
        definition = str(parameters.get("TaskDefinition", ""))
        kind = "bench" if f"{PREFIX}-bench" in definition else "convert" if f"{PREFIX}-convert" in definition else None
        if kind is None:
            raise sfn_adapter.TaskFailed("States.TaskFailed", f"no local task definition {definition!r}")
        overrides = (parameters.get("Overrides") or {}).get("ContainerOverrides") or [{}]
        env = {e["Name"]: e["Value"] for e in overrides[0].get("Environment", [])}
        payload = json.loads(settings.value(settings.TASK_PAYLOAD, env) or "{}")  # (the task's environment)
        platform = payload.get("platform", "local-fargate") if kind == "bench" else "local-fargate"
        self._run("fargate", f"task:{kind}", None, platform, self.timeouts[kind], self.scratch_mb[f"fargate-{kind}"],
                  env=env)


def install(moto_endpoint: str, proxy_control: str | None, cpu: int | None) -> Dispatcher:
    """Route the state machine's tasks in this process (the local cloud server) to the artifact runtime."""
    dispatcher = Dispatcher(moto_endpoint, proxy_control, cpu)
    sfn_adapter.install(dispatcher.invoke_lambda, dispatcher.run_task)
    return dispatcher
