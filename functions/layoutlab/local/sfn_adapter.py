"""Let moto's Step Functions interpreter run our real task entry points.

moto 5.2.5 executes state machines (``stepfunctions.execute_state_machine``),
but without Docker its ``lambda:invoke`` only echoes the input and its
``ecs:runTask.sync`` never sees a task stop. This adapter replaces exactly
those two calls, in the process that runs the moto server, with functions the
local run supplies (which start each task as a fresh, single-core subprocess).
Everything else — Map, Distributed Map, Choice, Retry, Catch, JSONPath — stays
moto's, so the local run executes the same ASL file as AWS.

It patches private moto functions, hence the pinned moto version: the tests in
``tests/integration/test_pipeline_sfn_adapter.py`` fail loudly if an upgrade
moves them. No well-kept library offers a pluggable task dispatcher for moto's
interpreter, which is why this is written by hand.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Callable

LOG = logging.getLogger(__name__)

SUPPORTED_MOTO = "5.2.5"


class TaskFailed(Exception):
    """A local task failed; ``error`` becomes the Step Functions error name (Retry/Catch match on it)."""

    def __init__(self, error: str, cause: str):
        super().__init__(f"{error}: {cause}")
        self.error = error
        self.cause = cause


# invoke_lambda(function_name, payload) -> JSON-able result; raise TaskFailed on error.
LambdaInvoker = Callable[[str, object], object]
# run_task(parameters) -> None when the task exited 0; raise TaskFailed otherwise. The
# parameters are the RunTask "Parameters" of the ASL state after path evaluation, in
# the ASL's own PascalCase ("Cluster", "TaskDefinition", "Overrides": {"ContainerOverrides": ...}).
EcsTaskRunner = Callable[[dict], None]


@dataclass
class _Installed:
    invoke_lambda: LambdaInvoker
    run_task: EcsTaskRunner


_installed: _Installed | None = None


def function_name_of(function_name_or_arn: str) -> str:
    """``arn:aws:lambda:r:a:function:NAME[:qualifier]`` or ``NAME`` -> ``NAME``."""
    parts = function_name_or_arn.split(":")
    if len(parts) >= 7 and parts[5] == "function":
        return parts[6]
    return function_name_or_arn


def _lambda_invoke_replacement(parameters: dict, region: str, state_credentials) -> dict:
    assert _installed is not None
    name = function_name_of(parameters["FunctionName"])
    raw = parameters.get("Payload") or b"{}"
    payload = json.loads(raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw)
    try:
        result = _installed.invoke_lambda(name, payload)
    except TaskFailed as failure:
        # What Lambda returns for an unhandled error; moto turns errorType into the error name.
        return {
            "StatusCode": 200,
            "FunctionError": "Unhandled",
            "Payload": {"errorType": failure.error, "errorMessage": failure.cause},
        }
    return {"StatusCode": 200, "ExecutedVersion": "$LATEST", "Payload": result}


def install(invoke_lambda: LambdaInvoker, run_task: EcsTaskRunner) -> None:
    """Route moto's Lambda and ECS task states to ``invoke_lambda`` / ``run_task``."""
    global _installed
    import moto
    from moto.stepfunctions.parser.api import HistoryEventType, TaskFailedEventDetails
    from moto.stepfunctions.parser.asl.component.common.error_name.custom_error_name import CustomErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
        FailureEvent,
        FailureEventException,
    )
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import StatesErrorName
    from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
        StatesErrorNameType,
    )
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import state_task_service_ecs
    from moto.stepfunctions.parser.asl.eval.event.event_detail import EventDetails

    if moto.__version__ != SUPPORTED_MOTO:
        LOG.warning("sfn_adapter was written for moto %s, found %s", SUPPORTED_MOTO, moto.__version__)

    _installed = _Installed(invoke_lambda=invoke_lambda, run_task=run_task)
    lambda_eval_utils._invoke_lambda_function = _lambda_invoke_replacement

    ecs_service = state_task_service_ecs.StateTaskServiceEcs

    def eval_service_task(self, env, resource_runtime_part, normalised_parameters, state_credentials):
        cluster = normalised_parameters.get("Cluster") or "default"
        task_arn = f"arn:aws:ecs:{resource_runtime_part.region}:{resource_runtime_part.account}:task/{cluster}/{uuid.uuid4().hex}"
        try:
            _installed.run_task(normalised_parameters)
        except TaskFailed as failure:
            raise FailureEventException(
                FailureEvent(
                    env=env,
                    error_name=(
                        StatesErrorName(typ=StatesErrorNameType.from_name(failure.error))
                        if failure.error.startswith("States.")
                        else CustomErrorName(failure.error)
                    ),
                    event_type=HistoryEventType.TaskFailed,
                    event_details=EventDetails(
                        taskFailedEventDetails=TaskFailedEventDetails(
                            error=failure.error,
                            cause=failure.cause,
                            resource=self._get_sfn_resource(),
                            resourceType=self._get_sfn_resource_type(),
                        )
                    ),
                )
            ) from None
        # The shape AWS returns for a finished .sync task (describe-tasks output).
        env.stack.append(
            {
                "Tasks": [
                    {
                        "TaskArn": task_arn,
                        "ClusterArn": cluster,
                        "TaskDefinitionArn": normalised_parameters.get("TaskDefinition"),
                        "LastStatus": "STOPPED",
                        "DesiredStatus": "STOPPED",
                        "StopCode": "EssentialContainerExited",
                        "Containers": [{"ExitCode": 0, "LastStatus": "STOPPED"}],
                    }
                ]
            }
        )

    def build_sync_resolver(self, env, resource_runtime_part, normalised_parameters, state_credentials):
        finished = env.stack.pop()["Tasks"][0]
        return lambda: finished

    ecs_service._eval_service_task = eval_service_task
    ecs_service._build_sync_resolver = build_sync_resolver


def uninstall() -> None:
    """Forget the dispatchers (the moto patches stay; they refuse to run without them)."""
    global _installed
    _installed = None
