"""moto's Step Functions interpreter runs our tasks through the local dispatch adapter.

These tests pin the behaviour the local pipeline depends on: Lambda task
results flow back into the state machine, failures become the error name that
Retry and Catch match, ECS ``runTask.sync`` waits for the local task, and a
Map runs every item.
"""

from __future__ import annotations

import json
import threading
import time

import boto3
import pytest
from moto.core.config import default_user_config
from moto.server import ThreadedMotoServer

from layoutlab.local import sfn_adapter

ROLE = "arn:aws:iam::123456789012:role/sfn"
LAMBDA = "arn:aws:lambda:us-east-1:123456789012:function:{}"


@pytest.fixture(scope="module")
def moto_endpoint(monkeypatch_module):
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    monkeypatch_module.setenv("MOTO_PORT", str(port))
    previous = dict(default_user_config["stepfunctions"])
    default_user_config["stepfunctions"]["execute_state_machine"] = True
    yield f"http://{host}:{port}"
    default_user_config["stepfunctions"].update(previous)
    sfn_adapter.uninstall()
    server.stop()


@pytest.fixture(scope="module")
def monkeypatch_module():
    patcher = pytest.MonkeyPatch()
    yield patcher
    patcher.undo()


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.lambda_calls: list[tuple[str, object]] = []
        self.tasks: list[dict] = []
        self.failures_left = {"flaky": 1}

    def invoke(self, name, payload):
        with self.lock:
            self.lambda_calls.append((name, payload))
            if name == "flaky" and self.failures_left["flaky"] > 0:
                self.failures_left["flaky"] -= 1
                raise sfn_adapter.TaskFailed("Lambda.ServiceException", "transient")
        if name == "boom":
            raise sfn_adapter.TaskFailed("BadInputFile", "incoming/x.h5: not an HDF5 file")
        if name == "double":
            return {"value": payload["value"] * 2}
        return {"name": name, "got": payload}

    def run_task(self, params):
        with self.lock:
            self.tasks.append(params)
        env = params["Overrides"]["ContainerOverrides"][0]["Environment"]
        if any(e["Name"] == "FAIL" for e in env):
            raise sfn_adapter.TaskFailed("States.TaskFailed", "container exited with 1")


def run(endpoint, definition, execution_input, timeout=30):
    sfn = boto3.client("stepfunctions", endpoint_url=endpoint, region_name="us-east-1")
    arn = sfn.create_state_machine(
        name=f"m{time.monotonic_ns()}", definition=json.dumps(definition), roleArn=ROLE
    )["stateMachineArn"]
    execution = sfn.start_execution(stateMachineArn=arn, input=json.dumps(execution_input))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        described = sfn.describe_execution(executionArn=execution["executionArn"])
        if described["status"] != "RUNNING":
            return described
        time.sleep(0.05)
    raise AssertionError("execution did not finish")


@pytest.fixture
def recorder(moto_endpoint):
    rec = Recorder()
    sfn_adapter.install(rec.invoke, rec.run_task)
    return rec


def test_map_of_lambda_tasks_returns_their_results(moto_endpoint, recorder):
    definition = {
        "StartAt": "Each",
        "States": {
            "Each": {
                "Type": "Map",
                "ItemsPath": "$.items",
                "MaxConcurrency": 2,
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": "Double",
                    "States": {
                        "Double": {
                            "Type": "Task",
                            "Resource": "arn:aws:states:::lambda:invoke",
                            "Parameters": {"FunctionName": LAMBDA.format("double"), "Payload.$": "$"},
                            "OutputPath": "$.Payload",
                            "End": True,
                        }
                    },
                },
                "End": True,
            }
        },
    }
    done = run(moto_endpoint, definition, {"items": [{"value": i} for i in range(5)]})
    assert done["status"] == "SUCCEEDED"
    assert json.loads(done["output"]) == [{"value": 2 * i} for i in range(5)]
    assert sorted(p["value"] for _, p in recorder.lambda_calls) == list(range(5))


def test_retry_then_catch_see_the_error_name(moto_endpoint, recorder):
    definition = {
        "StartAt": "Flaky",
        "States": {
            "Flaky": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {"FunctionName": LAMBDA.format("flaky"), "Payload.$": "$"},
                "Retry": [{"ErrorEquals": ["Lambda.ServiceException"], "IntervalSeconds": 1,
                           "MaxAttempts": 2, "BackoffRate": 1.0}],
                "ResultPath": "$.flaky",
                "Next": "Boom",
            },
            "Boom": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {"FunctionName": LAMBDA.format("boom"), "Payload.$": "$"},
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Failed"}],
                "End": True,
            },
            "Failed": {"Type": "Pass", "End": True},
        },
    }
    done = run(moto_endpoint, definition, {"dataset": "d1"})
    assert done["status"] == "SUCCEEDED"
    output = json.loads(done["output"])
    assert output["error"]["Error"] == "BadInputFile"
    assert "not an HDF5 file" in output["error"]["Cause"]
    assert [name for name, _ in recorder.lambda_calls] == ["flaky", "flaky", "boom"]


def test_ecs_run_task_sync_runs_the_local_task_and_reports_failure(moto_endpoint, recorder):
    def task_state(next_or_end, env):
        state = {
            "Type": "Task",
            "Resource": "arn:aws:states:::ecs:runTask.sync",
            "Parameters": {
                "Cluster": "arn:aws:ecs:us-east-1:123456789012:cluster/c",
                "TaskDefinition": "bench",
                "LaunchType": "FARGATE",
                "Overrides": {"ContainerOverrides": [{"Name": "task", "Environment": env}]},
            },
            "ResultPath": None,
        }
        state.update(next_or_end)
        return state

    definition = {
        "StartAt": "Ok",
        "States": {
            "Ok": task_state({"Next": "Bad"}, [{"Name": "LAYOUTLAB_TASK_INPUT", "Value.$": "States.JsonToString($)"}]),
            "Bad": task_state({"End": True}, [{"Name": "FAIL", "Value": "1"}])
            | {"Catch": [{"ErrorEquals": ["States.TaskFailed"], "ResultPath": "$.error", "Next": "Caught"}]},
            "Caught": {"Type": "Pass", "End": True},
        },
    }
    done = run(moto_endpoint, definition, {"case": 7})
    assert done["status"] == "SUCCEEDED", done
    assert json.loads(done["output"])["error"]["Error"] == "States.TaskFailed"
    first_env = recorder.tasks[0]["Overrides"]["ContainerOverrides"][0]["Environment"]
    assert json.loads(first_env[0]["Value"]) == {"case": 7}
    assert len(recorder.tasks) == 2


def test_function_names_are_taken_from_arns():
    assert sfn_adapter.function_name_of(LAMBDA.format("bench")) == "bench"
    assert sfn_adapter.function_name_of(LAMBDA.format("bench") + ":live") == "bench"
    assert sfn_adapter.function_name_of("bench") == "bench"


def test_distributed_map_reads_cases_from_s3_and_tolerates_failures(moto_endpoint, recorder):
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="outputs")
    cases = [{"value": i} for i in range(6)] + [{"value": -1, "fail": True}]
    s3.put_object(Bucket="outputs", Key="runs/d1/cases.json", Body=json.dumps(cases).encode())

    def invoke(name, payload):
        if payload.get("fail"):
            raise sfn_adapter.TaskFailed("CaseFailed", "pattern does not fit the data")
        return {"value": payload["value"] * 2}

    sfn_adapter.install(invoke, recorder.run_task)
    definition = {
        "StartAt": "Cases",
        "States": {
            "Cases": {
                "Type": "Map",
                "ItemReader": {
                    "Resource": "arn:aws:states:::s3:getObject",
                    "ReaderConfig": {"InputType": "JSON"},
                    "Parameters": {"Bucket.$": "$.bucket", "Key.$": "$.key"},
                },
                "MaxConcurrency": 3,
                "ToleratedFailurePercentage": 50.0,  # moto 5.2.5 parses only a decimal here (an int is a syntax error)
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"},
                    "StartAt": "Case",
                    "States": {
                        "Case": {
                            "Type": "Task",
                            "Resource": "arn:aws:states:::lambda:invoke",
                            "Parameters": {"FunctionName": LAMBDA.format("bench"), "Payload.$": "$"},
                            "OutputPath": "$.Payload",
                            "End": True,
                        }
                    },
                },
                "ResultWriter": {
                    "Resource": "arn:aws:states:::s3:putObject",
                    "Parameters": {"Bucket": "outputs", "Prefix": "runs/d1/map"},
                },
                "End": True,
            }
        },
    }
    done = run(moto_endpoint, definition, {"bucket": "outputs", "key": "runs/d1/cases.json"}, timeout=60)
    assert done["status"] == "SUCCEEDED", done
    written = s3.list_objects_v2(Bucket="outputs", Prefix="runs/d1/map")
    assert written.get("KeyCount", 0) >= 1
