"""The pipeline definition (stepfunctions/pipeline.asl.json) keeps the contract of
stepfunctions/README.md: valid JSON, only known ${...} substitutions, no `[0].` paths
(moto's JSONPath returns a list for them), retries on Lambda service errors, every
stage caught and recorded, and bench failures recorded without sinking the dataset."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
ASL_PATH = REPO_ROOT / "stepfunctions" / "pipeline.asl.json"
sys.path.insert(0, str(REPO_ROOT / "cdk"))

from layoutlab import observability  # noqa: E402
from layoutlab_cdk import config as cdk_config  # noqa: E402

LAMBDA_SERVICE_ERRORS = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
}


@pytest.fixture(scope="module")
def asl() -> dict:
    return json.loads(ASL_PATH.read_text())


def walk_states(states: dict, path: str = ""):
    """Yield (path, name, state) for every state, nested Map processors included."""
    for name, state in states.items():
        yield path, name, state
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor:
            yield from walk_states(processor["States"], f"{path}{name}/")


def string_values(node):
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from string_values(value)
    elif isinstance(node, list):
        for value in node:
            yield from string_values(value)
    elif isinstance(node, str):
        yield node


def test_asl_is_valid_json_and_every_transition_lands_on_a_state(asl):
    for path, name, state in walk_states(asl["States"]):
        siblings = asl["States"] if not path else None
        targets = [state.get("Next"), state.get("Default")]
        targets += [choice["Next"] for choice in state.get("Choices", [])]
        targets += [catch["Next"] for catch in state.get("Catch", [])]
        scope = siblings
        if scope is None:  # resolve the enclosing processor's states
            scope = asl["States"]
            for part in path.strip("/").split("/"):
                scope = (scope[part].get("ItemProcessor") or scope[part]["Iterator"])["States"]
        for target in filter(None, targets):
            assert target in scope, f"{path}{name} goes to unknown state {target!r}"
        assert state.get("End") or state.get("Next") or state["Type"] in ("Choice", "Fail", "Succeed"), name


def test_no_indexed_paths_that_moto_misreads(asl):
    """moto 5.2.5 evaluates `$.a[0].b` to `[1]` instead of `1` (DESIGN.md §5)."""
    indexed = [value for value in string_values(asl) if value.startswith("$") and re.search(r"\[\d+\]", value)]
    assert indexed == []


def test_placeholders_are_exactly_the_documented_substitutions():
    from layoutlab_cdk.pipeline_stack import asl_placeholders

    placeholders = asl_placeholders(ASL_PATH.read_text()) | asl_placeholders(
        (ASL_PATH.parent / "backfill.asl.json").read_text())  # (the pipeline's and the backfill's)
    readme = (REPO_ROOT / "stepfunctions" / "README.md").read_text()
    documented = set(re.findall(r"`\$\{([A-Za-z0-9]+)\}`", readme))
    assert placeholders == documented
    assert placeholders >= {"PlanFunctionArn", "BenchFunctionArn", "BenchTaskDefinitionArn", "OutputsBucketName"}


def test_lambda_tasks_retry_service_errors_with_backoff(asl):
    lambda_tasks = [
        (f"{path}{name}", state)
        for path, name, state in walk_states(asl["States"])
        if state.get("Resource") == "arn:aws:states:::lambda:invoke"
    ]
    assert len(lambda_tasks) >= 8
    for name, state in lambda_tasks:
        retries = state.get("Retry", [])
        covered = {error for retry in retries for error in retry["ErrorEquals"] if retry.get("BackoffRate", 1) > 1}
        assert LAMBDA_SERVICE_ERRORS <= covered, f"{name} does not retry {LAMBDA_SERVICE_ERRORS - covered}"
        # Never retry everything. A task killed by its timeout or memory limit gets one more
        # attempt (the kill may come from the environment: a slow S3 moment, a noisy
        # neighbour); a second kill is the case's result, caught and recorded (issue #8).
        assert not any("States.ALL" in r["ErrorEquals"] for r in retries), name
        for retry in retries:
            if {"States.Timeout", "MemoryError"} & set(retry["ErrorEquals"]):
                assert retry["MaxAttempts"] == 1 and name.rsplit("/", 1)[-1].startswith("Bench"), name


def test_every_top_level_stage_is_caught_recorded_and_fails(asl):
    states = asl["States"]
    stage_states = {name for name, s in states.items() if s["Type"] in ("Task", "Map")} - {"RecordFailure"}
    stages_recorded = set()
    for name in stage_states:
        catches = states[name].get("Catch", [])
        assert catches and catches[0]["ErrorEquals"] == ["States.ALL"], f"{name} is not caught"
        assert catches[0]["ResultPath"] == "$.error", f"{name}: the caught error must keep the input"
        stage_pass = states[catches[0]["Next"]]
        assert stage_pass["Type"] == "Pass" and stage_pass["Next"] == "RecordFailure"
        stages_recorded.add(stage_pass["Result"])
    assert stages_recorded <= set(observability.STAGES)
    record = states["RecordFailure"]
    assert record["Parameters"]["FunctionName"] == "${RecordFailureFunctionArn}"
    assert record["Parameters"]["Payload"]["stage.$"] == "$.failed_stage"
    assert states[record["Next"]]["Type"] == "Fail"


def test_benchmark_fan_out_is_a_distributed_map_that_tolerates_recorded_failures(asl):
    bench = asl["States"]["BenchCases"]
    assert bench["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    assert bench["ItemReader"]["Resource"] == "arn:aws:states:::s3:getObject"
    assert bench["ItemReader"]["Parameters"]["Bucket"] == "${OutputsBucketName}"
    assert "ToleratedFailurePercentagePath" in bench
    writer = bench["ResultWriter"]
    assert writer["Parameters"]["Bucket"] == "${OutputsBucketName}"
    assert writer["Parameters"]["Prefix"].startswith(cdk_config.OUTPUT_PREFIXES["map_runs"])
    child = bench["ItemProcessor"]["States"]
    choice = child[bench["ItemProcessor"]["StartAt"]]
    assert choice["Type"] == "Choice"
    for task in ("BenchOnLambda", "BenchOnFargate"):
        catch = child[task]["Catch"][0]
        assert catch["ErrorEquals"] == ["States.ALL"]
        recorder = child[catch["Next"]]
        assert recorder["Parameters"]["FunctionName"] == "${RecordFailureFunctionArn}"
        assert recorder["Parameters"]["Payload"]["stage"] == "bench"
        assert child[recorder["Next"]]["Type"] == "Fail"  # counted by ToleratedFailurePercentage


def test_fargate_tasks_pass_the_payload_in_the_documented_environment_variable(asl):
    fargate = [
        state for _, _, state in walk_states(asl["States"]) if state.get("Resource") == "arn:aws:states:::ecs:runTask.sync"
    ]
    assert {s["Parameters"]["TaskDefinition"] for s in fargate} == {
        "${ConvertTaskDefinitionArn}",
        "${BenchTaskDefinitionArn}",
    }
    for state in fargate:
        (override,) = state["Parameters"]["Overrides"]["ContainerOverrides"]
        assert override["Name"] == "${TaskContainerName}"
        assert override["Environment"] == [
            {"Name": cdk_config.TASK_PAYLOAD_ENV, "Value.$": "States.JsonToString($)"}
        ]
        assert state["Parameters"]["LaunchType"] == "FARGATE"


def test_lists_for_distributed_maps_are_read_from_the_outputs_bucket_never_incoming(asl):
    distributed = [
        state for _, _, state in walk_states(asl["States"])
        if state.get("ItemProcessor", {}).get("ProcessorConfig", {}).get("Mode") == "DISTRIBUTED"
    ]
    assert len(distributed) == 2
    for state in distributed:
        reader = state["ItemReader"]
        assert reader["Parameters"]["Bucket"] == "${OutputsBucketName}"
        assert reader["ReaderConfig"] == {"InputType": "JSON"}
        # results go to S3, so thousands of items never hit the 256 KiB state-output limit
        writer = state["ResultWriter"]["Parameters"]
        assert writer["Bucket"] == "${OutputsBucketName}"
        assert writer["Prefix"].startswith(cdk_config.OUTPUT_PREFIXES["map_runs"])
    assert cdk_config.INGEST_PREFIX not in ASL_PATH.read_text()


# Step Functions' own error names for ecs:runTask.sync (Developer Guide, "Run Amazon ECS or
# Fargate tasks"): an ECS API error is ECS.<Exception>, e.g. ECS.AmazonECSException when RunTask
# is refused; a RunTask answer with a non-empty `failures` list (no Fargate capacity in the AZ,
# ...) fails the state as AmazonECS.Unknown. Both are transient and retried with backoff.
ECS_TRANSIENT_ERRORS = {"ECS.AmazonECSException", "AmazonECS.Unknown"}


def test_fargate_tasks_have_a_timeout_and_retry_runtask_capacity_failures(asl):
    fargate = {
        f"{path}{name}": state for path, name, state in walk_states(asl["States"])
        if state.get("Resource") == "arn:aws:states:::ecs:runTask.sync"
    }
    assert len(fargate) == 2
    for name, state in fargate.items():
        # without TimeoutSeconds a hung task holds the execution for up to a year
        assert isinstance(state.get("TimeoutSeconds"), int) and state["TimeoutSeconds"] > 0, name
        assert "TimeoutSecondsPath" not in state and "HeartbeatSeconds" not in state, name
        retries = state.get("Retry", [])
        covered = {error for retry in retries for error in retry["ErrorEquals"] if retry.get("BackoffRate", 1) > 1}
        assert ECS_TRANSIENT_ERRORS <= covered, f"{name} does not retry {ECS_TRANSIENT_ERRORS - covered}"
        assert not any("States.ALL" in r["ErrorEquals"] or "States.TaskFailed" in r["ErrorEquals"]
                       for r in retries), f"{name}: a task that ran and failed is a result, not a glitch"
    # consistent with the environments' sizes (also checked at synth: config.task_timeout_problems)
    timeouts = cdk_config.ecs_task_timeouts(asl)
    assert timeouts == {
        "ConvertTaskDefinitionArn": fargate["ConvertVariants/ConvertOnFargate"]["TimeoutSeconds"],
        "BenchTaskDefinitionArn": fargate["BenchCases/BenchOnFargate"]["TimeoutSeconds"],
    }
    readme = (REPO_ROOT / "stepfunctions" / "README.md").read_text()
    for seconds in timeouts.values():
        assert f"`TimeoutSeconds` {seconds}" in readme, "stepfunctions/README.md documents each ECS timeout"
    assert "AmazonECS.Unknown" in readme
