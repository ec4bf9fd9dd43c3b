"""The same pipeline.asl.json runs under moto 5.2.5's Step Functions interpreter.

This is the evidence behind "Local run" in stepfunctions/README.md: with the ${...}
substituted and each ecs:runTask.sync task turned into a lambda:invoke of a local
dispatcher (moto cannot run ECS tasks), the definition executes end to end — inline
Maps, both Distributed Maps with their S3 ItemReader, the ResultWriter, Choice by
platform, Catch → record-failure — with test doubles standing in for the handlers.
"""

from __future__ import annotations

import copy
import io
import json
import threading
import time
import zipfile
from pathlib import Path

import boto3
import pytest

moto = pytest.importorskip("moto")
from moto import mock_aws  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
ASL_TEXT = (REPO_ROOT / "stepfunctions" / "pipeline.asl.json").read_text()
REGION = "us-east-1"
OUTPUTS = "layoutlab-local-outputs"
ECS_SYNC = "arn:aws:states:::ecs:runTask.sync"
LOCAL_FARGATE_FUNCTIONS = {"${ConvertTaskDefinitionArn}": "fargate-convert", "${BenchTaskDefinitionArn}": "fargate-bench"}


def local_definition(asl_text: str, substitutions: dict[str, str]) -> str:
    """What the local run must do to the ASL before moto can execute it (README "Local run").

    Each ecs:runTask.sync task becomes a lambda:invoke of the local dispatcher for its task
    definition, with the state's input as payload — exactly what the container receives in
    LAYOUTLAB_TASK_PAYLOAD — keeping Retry/Catch/Next. Then ${...} are substituted.
    """
    definition = json.loads(asl_text)

    def rewrite(states: dict) -> None:
        for state in states.values():
            if state.get("Resource") == ECS_SYNC:
                task_definition = state["Parameters"]["TaskDefinition"]
                state["Resource"] = "arn:aws:states:::lambda:invoke"
                state["Parameters"] = {"FunctionName": LOCAL_FARGATE_FUNCTIONS[task_definition], "Payload.$": "$"}
            processor = state.get("ItemProcessor") or state.get("Iterator")
            if processor:
                rewrite(processor["States"])

    rewrite(definition["States"])
    text = json.dumps(definition)
    for name, value in substitutions.items():
        text = text.replace("${%s}" % name, value)
    assert "${" not in text, "unsubstituted placeholder left"
    return text


def shorter_retry_intervals(asl_text: str) -> str:
    """Every Retry's IntervalSeconds set to 1 (what is retried, how often and the backoff stay),
    so a retried error costs the tests a second instead of ECS's ten."""
    definition = json.loads(asl_text)

    def shorten(node) -> None:
        if isinstance(node, dict):
            for retry in node.get("Retry", []):
                retry["IntervalSeconds"] = 1
            for value in node.values():
                shorten(value)
        elif isinstance(node, list):
            for value in node:
                shorten(value)

    shorten(definition)
    return json.dumps(definition)


def error_named(name: str, message: str) -> Exception:
    """An exception whose type name is ``name``: the Lambda runtime reports it as errorType, and
    Step Functions matches Retry/Catch on it (how a state sees e.g. ``AmazonECS.Unknown``)."""
    return type(name, (Exception,), {})(message)


class FakeHandlers:
    """Test doubles for the handlers: record each call, answer like the contract says."""

    def __init__(self, fail_cases=(), fail_convert=False, ecs_capacity_failures=0, max_rounds=1, rounds_wanted=1):
        self.calls: list[tuple[str, dict]] = []
        # the plan's schedule allows max_rounds rounds; the comparisons stay undecided for rounds_wanted
        self.max_rounds = max_rounds
        self.rounds_wanted = rounds_wanted
        self.fail_cases = set(fail_cases)
        self.fail_convert = fail_convert
        # the first N Fargate tasks fail to start as RunTask does without capacity under .sync
        self.ecs_capacity_failures = ecs_capacity_failures
        self.lock = threading.Lock()

    def __call__(self, function: str, event: dict):
        with self.lock:
            self.calls.append((function, copy.deepcopy(event)))
            if function.startswith("fargate-") and self.ecs_capacity_failures > 0:
                self.ecs_capacity_failures -= 1
                raise error_named("AmazonECS.Unknown", "RESOURCE:FARGATE capacity is unavailable at this time")
        if function == "plan" and event.get("phase") == "cases_of_made_variants":
            return {**event["cases"], "undecided": None}  # every variant made: the list as planned
        if function == "plan" and event.get("phase") == "more_repetitions":
            next_round = event["cases"]["round"] + 1
            if next_round > self.rounds_wanted:
                return {"key": None, "count": 0, "round": event["cases"]["round"],
                        "planned": event["cases"]["planned"], "undecided": 0}
            return {"key": f"runs/ds1/cases-round-{next_round}.json", "count": 2, "round": next_round,
                    "planned": event["cases"]["planned"] + 2, "undecided": 1}
        if function == "plan":
            return {
                "convert_tasks": [
                    {"phase": "whole", "convert_on": "lambda", "dataset_id": "ds1", "variant": {"name": "paged-8MiB"}},
                    {"phase": "whole", "convert_on": "fargate", "dataset_id": "ds1", "variant": {"name": "paged-4MiB"}},
                    {"phase": "prepare", "convert_on": "lambda", "dataset_id": "ds1", "variant": {"name": "zarr-a"}},
                ],
                "publish_tasks": [{"phase": "publish", "dataset_id": "ds1", "variant": {"name": "zarr-a"}}],
                "work_units": {"key": "runs/ds1/work-units.json", "count": 2},
                "cases": {"key": "runs/ds1/cases.json", "count": 4, "round": 1, "planned": 4},
                "repetitions": {"first": 1, "max": self.max_rounds, "per_round": 1, "max_rounds": self.max_rounds,
                                "resolution": 0.1},
                "max_concurrency": {"convert": 2, "work_units": 2, "bench": 2},
                "tolerated_failure_percentage": 50,
            }
        if function in ("convert", "fargate-convert") and self.fail_convert:
            raise RuntimeError("cannot convert")
        if function in ("bench", "fargate-bench") and event.get("case_id") in self.fail_cases:
            raise RuntimeError(f"case {event['case_id']} failed")
        if function == "summarize":
            return {"dataset_id": event["dataset_id"], "summary": "ok"}
        return {"ok": True}

    def named(self, function: str) -> list[dict]:
        return [event for name, event in self.calls if name == function]


@pytest.fixture
def pipeline(monkeypatch):
    """Create the local resources in moto and return run(handlers) -> (status, output, handlers)."""
    from moto.awslambda_simple.models import LambdaSimpleBackend

    current: dict[str, FakeHandlers] = {}

    def invoke(self, function_name, qualifier, body, headers, response_headers):
        name = function_name.split(":")[-1]
        try:
            result = current["handlers"](name, json.loads(body))
        except Exception as error:  # the Lambda runtime's answer to an unhandled exception
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps({"errorMessage": str(error), "errorType": type(error).__name__})
        return json.dumps(result)

    monkeypatch.setattr(LambdaSimpleBackend, "invoke", invoke)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}):
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=OUTPUTS)
        cases = [
            {"case_id": f"c{i}", "dataset_id": "ds1", "platform_kind": "fargate" if i == 3 else "lambda"}
            for i in range(4)
        ]
        s3.put_object(Bucket=OUTPUTS, Key="runs/ds1/cases.json", Body=json.dumps(cases))
        for round_number in range(2, 6):  # later rounds repeat two of the cases
            again = [{**case, "case_id": f"{case['case_id']}-r{round_number}"} for case in cases[:2]]
            s3.put_object(Bucket=OUTPUTS, Key=f"runs/ds1/cases-round-{round_number}.json", Body=json.dumps(again))
        units = [{"phase": "unit", "dataset_id": "ds1", "work_unit": {"index": i}} for i in range(2)]
        s3.put_object(Bucket=OUTPUTS, Key="runs/ds1/work-units.json", Body=json.dumps(units))
        role = boto3.client("iam", region_name=REGION).create_role(RoleName="sfn", AssumeRolePolicyDocument="{}")
        role_arn = role["Role"]["Arn"]
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("handler.py", "def handler(event, context):\n    return event\n")
        lambdas = boto3.client("lambda", region_name=REGION)
        arns = {}
        for name in ("plan", "convert", "bench", "summarize", "record_failure", "fargate-convert", "fargate-bench"):
            arns[name] = lambdas.create_function(
                FunctionName=name,
                Runtime="python3.11",
                Role=role_arn,
                Handler="handler.handler",
                Code={"ZipFile": buffer.getvalue()},
            )["FunctionArn"]
        substitutions = {
            "PlanFunctionArn": arns["plan"],
            "ConvertFunctionArn": arns["convert"],
            "BenchFunctionArn": arns["bench"],
            "SummarizeFunctionArn": arns["summarize"],
            "RecordFailureFunctionArn": arns["record_failure"],
            "ClusterArn": "unused-locally",
            "ConvertTaskDefinitionArn": "unused-locally",
            "BenchTaskDefinitionArn": "unused-locally",
            "TaskSubnet1": "unused-locally",
            "TaskSubnet2": "unused-locally",
            "TaskSecurityGroup": "unused-locally",
            "TaskContainerName": "layoutlab",
            "OutputsBucketName": OUTPUTS,
        }
        sfn = boto3.client("stepfunctions", region_name=REGION)
        machine = sfn.create_state_machine(
            name="layoutlab-local-pipeline",
            definition=local_definition(shorter_retry_intervals(ASL_TEXT), substitutions),
            roleArn=role_arn,
        )["stateMachineArn"]

        def run(handlers: FakeHandlers):
            current["handlers"] = handlers
            execution = sfn.start_execution(
                stateMachineArn=machine,
                input=json.dumps({"dataset_id": "ds1", "source": {"bucket": "in", "key": "incoming/a.nc"}}),
            )["executionArn"]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                described = sfn.describe_execution(executionArn=execution)
                if described["status"] != "RUNNING":
                    break
                time.sleep(0.05)
            output = json.loads(described["output"]) if described.get("output") else None
            return described["status"], output, handlers

        yield run



def test_pipeline_runs_end_to_end_under_moto(pipeline):
    status, output, handlers = pipeline(FakeHandlers())
    assert status == "SUCCEEDED"
    assert output == {"dataset_id": "ds1", "summary": "ok"}  # the execution's output is summarize's answer
    phases = sorted(e["phase"] for e in handlers.named("convert"))
    assert phases == ["prepare", "publish", "unit", "unit", "whole"]
    assert [e["variant"]["name"] for e in handlers.named("fargate-convert")] == ["paged-4MiB"]
    assert sorted(e["case_id"] for e in handlers.named("bench")) == ["c0", "c1", "c2"]
    assert [e["case_id"] for e in handlers.named("fargate-bench")] == ["c3"]
    assert handlers.named("record_failure") == []
    # order: every conversion (and publication) before the first benchmark case
    names = [name for name, _ in handlers.calls]
    last_convert = max(i for i, n in enumerate(names) if n in ("convert", "fargate-convert"))
    first_bench = min(i for i, n in enumerate(names) if n in ("bench", "fargate-bench"))
    assert last_convert < first_bench
    summarize_event = handlers.named("summarize")[0]
    assert summarize_event["bench"]["ResultWriterDetails"]["Bucket"] == OUTPUTS


def test_undecided_comparisons_get_more_rounds_of_the_same_map_until_decided(pipeline):
    status, output, handlers = pipeline(FakeHandlers(max_rounds=4, rounds_wanted=3))
    assert status == "SUCCEEDED" and output == {"dataset_id": "ds1", "summary": "ok"}
    bench = [e["case_id"] for e in handlers.named("bench")]
    assert sorted(bench) == ["c0", "c0-r2", "c0-r3", "c1", "c1-r2", "c1-r3", "c2"]
    assert [e.get("phase") for e in handlers.named("plan")[:2]] == [None, "cases_of_made_variants"]
    asked = handlers.named("plan")[2:]
    assert [e["phase"] for e in asked] == ["more_repetitions"] * 3  # after rounds 1, 2 and 3
    assert [e["cases"]["round"] for e in asked] == [1, 2, 3]
    assert asked[0]["repetitions"]["max_rounds"] == 4 and asked[0]["dataset_id"] == "ds1"
    # the summary sees the last answer: three rounds, every round's cases counted
    assert handlers.named("summarize")[0]["plan"]["cases"] == {"key": None, "count": 0, "round": 3, "planned": 8,
                                                               "undecided": 0}


def test_the_rounds_are_bounded_by_the_plans_schedule(pipeline):
    status, _output, handlers = pipeline(FakeHandlers(max_rounds=3, rounds_wanted=10))
    assert status == "SUCCEEDED"
    assert [e["cases"]["round"] for e in handlers.named("plan")[2:]] == [1, 2]  # never asked after round 3
    assert len(handlers.named("bench")) == 3 + 2 * 2
    assert handlers.named("summarize")[0]["plan"]["cases"]["round"] == 3


def test_without_more_rounds_the_plan_is_not_asked_again(pipeline):
    _status, _output, handlers = pipeline(FakeHandlers())
    assert [e.get("phase") for e in handlers.named("plan")] == [None, "cases_of_made_variants"]


def test_a_failed_case_is_recorded_and_the_dataset_still_succeeds(pipeline):
    status, _output, handlers = pipeline(FakeHandlers(fail_cases={"c1"}))
    assert status == "SUCCEEDED"
    (failure,) = handlers.named("record_failure")
    assert failure["stage"] == "bench"
    assert failure["case"]["case_id"] == "c1"
    assert failure["error"]["Error"]  # the caught error travels with the record
    assert len(handlers.named("summarize")) == 1


def test_a_failed_conversion_is_recorded_with_its_stage_and_fails_the_execution(pipeline):
    status, _output, handlers = pipeline(FakeHandlers(fail_convert=True))
    assert status == "FAILED"
    (failure,) = handlers.named("record_failure")
    assert failure["stage"] == "convert"
    assert failure["dataset_id"] == "ds1"
    assert failure["source"] == {"bucket": "in", "key": "incoming/a.nc"}
    assert handlers.named("bench") == [] and handlers.named("summarize") == []


def test_local_definition_leaves_no_ecs_task_and_no_placeholder():
    names = ("PlanFunctionArn ConvertFunctionArn BenchFunctionArn SummarizeFunctionArn RecordFailureFunctionArn "
             "ClusterArn ConvertTaskDefinitionArn BenchTaskDefinitionArn TaskSubnet1 TaskSubnet2 TaskSecurityGroup "
             "TaskContainerName OutputsBucketName").split()
    text = local_definition(ASL_TEXT, {name: f"local-{name}" for name in names})
    assert ECS_SYNC not in text and "${" not in text
    definition = json.loads(text)
    bench_states = definition["States"]["BenchCases"]["ItemProcessor"]["States"]
    assert bench_states["BenchOnFargate"]["Parameters"] == {"FunctionName": "fargate-bench", "Payload.$": "$"}
    assert bench_states["BenchOnFargate"]["Catch"] == json.loads(ASL_TEXT)["States"]["BenchCases"]["ItemProcessor"][
        "States"]["BenchOnFargate"]["Catch"]


def test_a_fargate_task_refused_for_capacity_is_retried_and_the_dataset_goes_on(pipeline):
    """RunTask without Fargate capacity fails an ecs:runTask.sync state as AmazonECS.Unknown
    (before the task ran): the state's Retry runs it again, nothing is recorded as failed."""
    status, _output, handlers = pipeline(FakeHandlers(ecs_capacity_failures=1))
    assert status == "SUCCEEDED"
    attempts = handlers.named("fargate-convert")
    assert len(attempts) == 2 and attempts[0] == attempts[1]  # the same payload, run again
    assert handlers.named("record_failure") == []


def test_the_local_definition_keeps_the_ecs_states_timeouts_and_retries():
    names = ("PlanFunctionArn ConvertFunctionArn BenchFunctionArn SummarizeFunctionArn RecordFailureFunctionArn "
             "ClusterArn ConvertTaskDefinitionArn BenchTaskDefinitionArn TaskSubnet1 TaskSubnet2 TaskSecurityGroup "
             "TaskContainerName OutputsBucketName").split()
    original = json.loads(ASL_TEXT)
    local = json.loads(local_definition(ASL_TEXT, {name: f"local-{name}" for name in names}))
    for stage, state in (("ConvertVariants", "ConvertOnFargate"), ("BenchCases", "BenchOnFargate")):
        before = original["States"][stage]["ItemProcessor"]["States"][state]
        after = local["States"][stage]["ItemProcessor"]["States"][state]
        assert after["TimeoutSeconds"] == before["TimeoutSeconds"] > 0
        assert after["Retry"] == before["Retry"]
