"""The state machine and the handlers' payload types agree (issue 26, item 2).

Every path stepfunctions/pipeline.asl.json reads (``Parameters``, ``ItemsPath``, ``ItemReader``,
``*Path`` fields, ``Choice`` variables) resolves to a field of the type the handlers parse
(``layoutlab/pipeline/payloads.py``): the execution's state at the top, a convert task or a case
inside a Map. What a Task hands a handler is that handler's payload type, and what the state keeps
of an answer (``ResultSelector``) is the type of the answer. A renamed field on either side fails
here, naming the state and the path, instead of in a deployed execution.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import types
import typing
from pathlib import Path

import pytest

from layoutlab.pipeline import payloads
from layoutlab.pipeline.payloads import (
    BenchCase,
    CaseList,
    ConvertTask,
    ExecutionInput,
    ExecutionState,
    FailureInput,
    MadeVariantsInput,
    MoreRepetitionsInput,
    PlanOutput,
    PlanState,
    SummarizeInput,
)

ASL = json.loads((Path(__file__).resolve().parents[2] / "stepfunctions" / "pipeline.asl.json").read_text())
# The payload each function's handler parses (handlers/*.py), by the ARN placeholder the ASL invokes.
HANDLER_EVENT = {"${ConvertFunctionArn}": ConvertTask, "${BenchFunctionArn}": BenchCase,
                 "${RecordFailureFunctionArn}": FailureInput, "${SummarizeFunctionArn}": SummarizeInput}
PLAN_EVENTS = {"Plan": ExecutionInput, "PlanMoreRepetitions": MoreRepetitionsInput,
               "KeepCasesOfMadeVariants": MadeVariantsInput}
ANSWERS = {"Plan": PlanOutput, "PlanMoreRepetitions": CaseList, "KeepCasesOfMadeVariants": CaseList}
MAP_ITEMS = {"ConvertVariants": ConvertTask, "RechunkWorkUnits": ConvertTask, "PublishVariants": ConvertTask,
             "BenchCases": BenchCase}
ANY = object()  # an untyped JSON object (the upload's source, an error): any path below it is carried, not read


def _unwrap(hint):
    """``X`` of ``X | None``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return hint


def resolve(scope, path: str):
    """The type ``$.a.b`` names in ``scope`` (a payload dataclass); KeyError naming the missing field."""
    hint = scope
    for part in [p for p in path.removeprefix("$").split(".") if p]:
        if hint is ANY or hint is dict:
            return ANY
        if not dataclasses.is_dataclass(hint):
            raise KeyError(f"{path}: {part!r} is below {hint}, which has no fields")
        hints = typing.get_type_hints(hint)
        if part not in hints:
            raise KeyError(f"{path}: {hint.__name__} has no field {part!r} (it has {', '.join(hints)})")
        hint = _unwrap(hints[part])
    return hint


def _states(states: dict, scope, where: str = ""):
    """(name, state, scope of its input) of every state, inside Maps too."""
    for name, state in states.items():
        yield f"{where}{name}", state, scope
        if "ItemProcessor" in state:
            inner = state["ItemProcessor"]["States"]
            item = MAP_ITEMS[name]
            if any(c.get("ResultPath") == "$.error" for s in inner.values() for c in s.get("Catch", [])):
                item = _with_caught_error(item)  # what a Catch in the Map wrote into the item
            yield from _states(inner, item, f"{where}{name}/")


def _paths(value, key: str = ""):
    """Every (key, "$...") reference in a Parameters/Payload/ResultSelector block."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, k)
    elif key.endswith(".$") and isinstance(value, str) and value.startswith("$") and not value.startswith("$$"):
        yield key[:-2], value


def _with_caught_error(scope):
    """A Map item's scope after a Catch wrote ``$.error`` into it."""
    return dataclasses.make_dataclass(scope.__name__, [("error", dict, dataclasses.field(default=None))],
                                   bases=(scope,), frozen=True)


def problems(asl: dict) -> list[str]:
    found = []
    for name, state, scope in _states(asl["States"], ExecutionState):
        if name == asl["StartAt"]:
            scope = ExecutionInput  # the execution's input, before any state wrote into it
        reads = [(f"{name}.{field}", state[field]) for field in ("ItemsPath", "MaxConcurrencyPath",
                                                                  "ToleratedFailurePercentagePath") if field in state]
        reads += [(f"{name}.ItemReader", path) for _, path in _paths(state.get("ItemReader", {}).get("Parameters", {}))]
        for choice in state.get("Choices", []):
            reads += [(f"{name}.Choices", choice["Variable"])]
            reads += [(f"{name}.Choices", v) for k, v in choice.items() if k.endswith("Path")]
        for where, path in reads:
            try:
                resolve(scope, path)
            except KeyError as error:
                found.append(f"{where}: {error.args[0]}")
        if "ItemsPath" in state and typing.get_args(resolve(scope, state["ItemsPath"])) != (MAP_ITEMS[name],):
            found.append(f"{name}.ItemsPath: {state['ItemsPath']} is not a list of {MAP_ITEMS[name].__name__}")
        parameters = state.get("Parameters", {})
        function = parameters.get("FunctionName")
        event = PLAN_EVENTS.get(name) or HANDLER_EVENT.get(function)
        payload = parameters.get("Payload.$") or parameters.get("Payload")
        if event is not None and payload == "$":  # the whole input is the handler's event
            reads_of = getattr(event, "READS", None) or {f.name: f.name for f in dataclasses.fields(event)}
            for field, path in reads_of.items():
                try:
                    if resolve(scope, path) != resolve(event, field):
                        found.append(f"{name}: the state's {path} is {resolve(scope, path)}, {event.__name__}."
                                     f"{field} is {resolve(event, field)}")
                except KeyError as error:
                    required = next(f for f in dataclasses.fields(event) if f.name == field).default
                    if required is dataclasses.MISSING:
                        found.append(f"{name}: {event.__name__} needs {field}: {error.args[0]}")
        elif event is not None and isinstance(payload, dict):  # the handler's event built field by field
            fields = {f.name for f in dataclasses.fields(event)}
            for key in payload:
                field = key.removesuffix(".$")
                if field not in fields:
                    found.append(f"{name}.Payload: {event.__name__} has no field {field!r}")
            for field, path in _paths(payload):
                try:
                    got = resolve(scope, path)
                except KeyError as error:
                    found.append(f"{name}.Payload.{field}: {error.args[0]}")
                    continue
                wanted = resolve(event, field) if field in {f.name for f in dataclasses.fields(event)} else ANY
                if got not in (ANY, wanted) and wanted is not ANY \
                        and not (dataclasses.is_dataclass(got) and wanted is dict):
                    found.append(f"{name}.Payload.{field}: {path} is {got}, {event.__name__}.{field} is {wanted}")
        if "ResultSelector" in state:
            answer = ANSWERS[name]
            kept = {key.removesuffix(".$") for key in state["ResultSelector"]}
            at = state["ResultPath"]
            if resolve(ExecutionState, at) not in (answer, *answer.__mro__[1:]):
                found.append(f"{name}.ResultPath: {at} holds {resolve(ExecutionState, at)}, the answer is {answer}")
            if kept != {f.name for f in dataclasses.fields(resolve(ExecutionState, at))}:
                found.append(f"{name}.ResultSelector keeps {sorted(kept)}, {resolve(ExecutionState, at).__name__} "
                             f"has {[f.name for f in dataclasses.fields(resolve(ExecutionState, at))]}")
            for field, path in _paths(state["ResultSelector"]):
                try:
                    resolve(answer, path.removeprefix("$.Payload"))
                except KeyError as error:
                    found.append(f"{name}.ResultSelector.{field}: {error.args[0]}")
    return found


def test_every_path_of_the_state_machine_is_a_field_of_the_handlers_payloads():
    assert problems(ASL) == []


def test_the_plan_state_is_what_the_plan_step_answers_less_what_the_state_drops():
    assert {f.name for f in dataclasses.fields(PlanOutput)} - {f.name for f in dataclasses.fields(PlanState)} \
        == {"results_prefix"}


@pytest.mark.parametrize("mutate, named", [
    (lambda asl: asl["States"]["BenchCases"]["ItemProcessor"]["States"]["BenchWhere"]["Choices"][0].update(
        Variable="$.platform_type"), "BenchCases/BenchWhere.Choices: $.platform_type: BenchCase has no field"),
    (lambda asl: asl["States"]["Plan"]["ResultSelector"].pop("cases.$"), "Plan.ResultSelector keeps"),
    (lambda asl: asl["States"]["PlanMoreRepetitions"]["Parameters"]["Payload"].update({"round.$": "$.plan.cases"}),
     "PlanMoreRepetitions.Payload: MoreRepetitionsInput has no field 'round'"),
    (lambda asl: asl["States"]["AnotherRound"]["Choices"][0].update(NumericLessThanPath="$.plan.repetitions.rounds"),
     "AnotherRound.Choices: $.plan.repetitions.rounds: Schedule has no field 'rounds'"),
    (lambda asl: asl["States"]["ConvertVariants"].update(ItemsPath="$.plan.cases"), "ConvertVariants.ItemsPath"),
])
def test_a_path_the_types_do_not_have_is_named(mutate, named):
    asl = copy.deepcopy(ASL)
    mutate(asl)
    assert any(named in problem for problem in problems(asl)), problems(asl)


def test_a_payload_missing_a_field_is_refused_in_one_line_naming_it():
    with pytest.raises(payloads.PayloadError, match=r"^convert task: 'variant' is missing"):
        ConvertTask.from_event({"dataset_id": "d", "source": {"bucket": "b", "key": "k"}})
    with pytest.raises(payloads.PayloadError, match=r"^bench case: 'repetition' must be int, got '1'"):
        BenchCase.from_event({"case_id": "c", "dataset_id": "d", "dataset": "d", "variant": "v", "format": "hdf5",
                              "target": "s3://b/k", "pattern": "p", "reader": "r", "platform": "local-lambda",
                              "platform_kind": "lambda", "repetition": "1"})


def test_the_plan_steps_tasks_and_cases_round_trip_through_their_types():
    task = {"dataset_id": "d", "source": {"bucket": "b", "key": "k", "etag": "e"}, "phase": "unit",
            "variant": {"name": "zarr-1x2x3", "kind": "rechunk-zarr", "format": "zarr", "uri": "s3://o/v"},
            "work_unit": {"k": 7}}
    assert ConvertTask.from_event(task).to_event() == {**task, "phase": "unit"}
    case = {"case_id": "c", "dataset_id": "d", "dataset": "d", "variant": "paged-1MiB", "format": "hdf5",
            "target": "s3://b/k", "pattern": "p", "reader": "r", "platform": "local-lambda", "platform_kind": "lambda",
            "repetition": 0, "params": {"beam": "gt1l"}, "reader_options": {"page_size": 2**20}}
    assert BenchCase.from_event(case).to_event() == case
