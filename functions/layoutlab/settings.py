"""Every ``LAYOUTLAB_*`` environment variable, declared once: its type, default and meaning.

Code reads them only through ``value(NAME)`` (tests/unit/test_settings.py fails on a name read anywhere
else, and on one not declared here). ``check()`` validates every variable that is set, at the start of a
handler's cold start and of the CLI: a bad value is one line naming the variable and why, before any event
or file is touched, not a ValueError deep in a conversion.

``Settings`` is what the deployed functions need (the CDK app gives every function the same variables,
and the local run does too): a missing one is reported by name, all at once.

Who sets what: ``cdk`` the CDK app (cdk/layoutlab_cdk/compute_stack.py) and the local run alike; ``user``
a person tuning or debugging a run; ``local`` the local cloud and its task runner (layoutlab.local, never
in AWS). Declaring the local ones here imports nothing of layoutlab.local.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from layoutlab.ceilings import ENV_VARIABLE as CEILINGS
from layoutlab.ceilings import Ceilings
from layoutlab.errors import UserError


class SettingError(UserError, ValueError):
    """An environment variable set to a value that cannot be used."""


class MissingSettings(UserError):
    pass


# -- types: each parses the variable's text or raises ValueError saying what was expected -------------
def _text(raw: str) -> str:
    return raw


def _count(raw: str) -> int:
    try:
        number = int(raw)
    except ValueError:
        raise ValueError("expected a whole number") from None
    if number < 0:
        raise ValueError("expected a number >= 0")
    return number


def _number(raw: str) -> float:
    try:
        number = float(raw)
    except ValueError:
        raise ValueError("expected a number") from None
    if not number >= 0 or number == float("inf"):
        raise ValueError("expected a finite number >= 0")
    return number


def _switch(raw: str) -> bool:
    if raw not in ("0", "1"):
        raise ValueError("expected 0 (off) or 1 (on)")
    return raw == "1"


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return raw

    parse.__name__ = "one of " + " | ".join(choices)
    return parse


def _json_object(raw: str) -> dict:
    try:
        parsed = json.loads(raw)
    except ValueError as error:
        raise ValueError(f"not JSON ({error})") from None
    if not isinstance(parsed, dict):
        raise ValueError("expected a JSON object")
    return parsed


def _platforms(raw: str) -> dict[str, dict]:
    platforms = _json_object(raw)
    bad = [name for name, spec in platforms.items() if not isinstance(spec, dict)]
    if bad or not platforms:
        raise ValueError("expected a JSON object of platform name -> profile object, e.g. "
                         '{"lambda-1769": {"kind": "lambda", "memory_mb": 1769}}')
    return platforms


def _concurrency(raw: str) -> dict[str, int]:
    limits = _json_object(raw)
    bad = [stage for stage, n in limits.items() if stage not in DEFAULT_MAX_CONCURRENCY
           or not isinstance(n, int) or isinstance(n, bool) or n < 1]
    if bad:
        raise ValueError(f"expected {{stage: whole number >= 1}} with stage one of {', '.join(DEFAULT_MAX_CONCURRENCY)}")
    return {**DEFAULT_MAX_CONCURRENCY, **limits}


def _json_text(raw: str) -> str:
    """JSON kept as its text (the task payload is parsed by the task it is for)."""
    try:
        json.loads(raw)
    except ValueError as error:
        raise ValueError(f"not JSON ({error})") from None
    return raw


def _ceilings(raw: str) -> Ceilings:
    return Ceilings.from_json(raw, where=CEILINGS)


@dataclass(frozen=True)
class Variable:
    name: str
    parse: Callable[[str], Any]
    default: Any
    meaning: str
    set_by: str  # cdk | user | local

    @property
    def type(self) -> str:
        """What the value must be: the name of its parser (count, number, switch, json_object, one of a | b...)."""
        return self.parse.__name__.strip("_")


DEFAULT_MAX_CONCURRENCY = {"convert": 4, "work_units": 20, "bench": 20}
LOCAL_PLATFORMS = {"local-lambda": {"kind": "lambda"}, "local-fargate": {"kind": "fargate"}}
TASK_PAYLOAD = "LAYOUTLAB_TASK_PAYLOAD"  # the contract with the state machine (stepfunctions/README.md)

_DECLARED = (
    # -- the deployment: set on every function and task by the CDK app (and the local run) -------------
    Variable("LAYOUTLAB_ENV", _text, "local", "the environment of cdk.json this deployment is (dev, prod, local)",
             "cdk"),
    Variable("LAYOUTLAB_RESULTS_TABLE", _text, "", "DynamoDB table of RUN/VARIANT/RESULT/SUMMARY items; the "
             "CLI's `results` and `report` read it when no --table or --env is given", "cdk"),
    Variable("LAYOUTLAB_OUTPUTS_BUCKET", _text, "", "S3 bucket the pipeline writes variants, case lists and "
             "summaries to", "cdk"),
    Variable("LAYOUTLAB_INGEST_BUCKET", _text, "", "S3 bucket users upload to (incoming/, plans/)", "cdk"),
    Variable("LAYOUTLAB_STATE_MACHINE_ARN", _text, "", "the pipeline's state machine, which ingest starts", "cdk"),
    Variable("LAYOUTLAB_IDEMPOTENCY_TABLE", _text, "", "DynamoDB table of ingest's idempotency records", "cdk"),
    Variable("LAYOUTLAB_MAX_INPUT_BYTES", _count, 50 * 2**30, "ingest refuses larger uploads (bytes)", "cdk"),
    Variable(CEILINGS, _ceilings, Ceilings(), "how much work one upload may ask for, JSON of "
             "layoutlab.ceilings.Ceilings' fields (keys not given keep the defaults)", "cdk"),
    Variable("LAYOUTLAB_DEFAULT_PLAN", _text, "", "a plan in the ingest bucket's plans/ that an upload naming "
             "none runs; empty: the packaged default plan", "cdk"),
    Variable("LAYOUTLAB_PLATFORMS", _platforms, LOCAL_PLATFORMS, "the bench platforms deployed, JSON "
             "{name: profile}; the plan's platforms are resolved against them", "cdk"),
    Variable("LAYOUTLAB_FARGATE_CONVERT_ABOVE_BYTES", _count, 8 * 2**30, "plan: inputs larger than this convert "
             "on Fargate (bytes)", "cdk"),
    Variable("LAYOUTLAB_WORK_UNITS_ABOVE_BYTES", _count, 4 * 2**30, "plan: rechunks larger than this fan out over "
             "work units (bytes)", "cdk"),
    Variable("LAYOUTLAB_MAX_CONCURRENCY", _concurrency, DEFAULT_MAX_CONCURRENCY, "plan: the Map stages' "
             "concurrency, JSON {convert, work_units, bench: n} (stages not given keep the defaults)", "cdk"),
    Variable("LAYOUTLAB_TOLERATED_FAILURE_PERCENTAGE", _number, 25.0, "plan: the share of bench cases that may "
             "fail before the Map stage fails (%)", "cdk"),
    Variable("LAYOUTLAB_PLATFORM", _text, "", "the platform this function or task runs as (lambda-1769, "
             "fargate-1-4096, local-lambda); names its memory and the platform its times are recorded under", "cdk"),
    Variable(TASK_PAYLOAD, _json_text, "", "a Fargate task's input, as JSON (the state machine's container "
             "override; stepfunctions/README.md)", "cdk"),
    # -- engines and guards: a person tuning or debugging a run -----------------------------------------
    Variable("LAYOUTLAB_FASTCOPY", _switch, True, "0 turns off all of layoutlab's C code (_fastcopy)", "user"),
    Variable("LAYOUTLAB_PREALLOCATE", _switch, True, "0: write outputs without reserving their size first "
             "(fallocate)", "user"),
    Variable("LAYOUTLAB_NO_GUARD", _switch, False, "1 runs parsing of users' files in this process, without the "
             "guard's child process (memory and stall limits off)", "user"),
    Variable("LAYOUTLAB_STALL_SECONDS", _number, 60.0, "the guard stops a child that has spun on a CPU without "
             "reading or writing for this long (s)", "user"),
    Variable("LAYOUTLAB_SANDBOX", _switch, True, "0: the workers that read an uploaded file's values do not "
             "restrict themselves with Landlock (layoutlab/sandbox.py; for testing the pre-pass alone)", "user"),
    Variable("LAYOUTLAB_OUTSIDE_FILE_CHECK", _switch, True, "0: the metadata pre-pass that refuses datasets whose "
             "values lie outside the file is off (hdf5_input.py; for testing the Landlock restriction alone)", "user"),
    Variable("LAYOUTLAB_BENCH_CHILD", _one_of("auto", "interpreter"), "auto", "how a bench case gets its fresh "
             "process: auto forks when that is safe, interpreter always starts a new one", "user"),
    # -- the local cloud (layoutlab.local): never set in AWS ---------------------------------------------
    Variable("LAYOUTLAB_STATE_DIR", _text, "", "directory of `layoutlab local up`'s state (default "
             "$XDG_STATE_HOME/layoutlab)", "local"),
    Variable("LAYOUTLAB_ARTIFACTS", _text, "", "the deployment artifacts the local run executes (default the "
             "checkout's layers/build)", "local"),
    Variable("LAYOUTLAB_FRESH_INTERPRETER", _switch, False, "1: each local task in a new interpreter instead of a "
             "fork of a warm one", "local"),
    Variable("LAYOUTLAB_CORPUS", _text, "", "the shared corpus of real files the tests and benchmarks/bench_real.py "
             "read (default ../shared/corpus beside the checkout)", "local"),
    Variable("LAYOUTLAB_TASK_LOG", _text, "", "a file the local tasks' output is appended to (in AWS: CloudWatch "
             "Logs)", "local"),
    Variable("LAYOUTLAB_CLOUD_TRACEMALLOC", _text, "", "debug: a directory; the local cloud then traces its "
             "allocations and writes a tracemalloc snapshot there on SIGUSR1 (costs memory and CPU while set)",
             "local"),
    Variable("LAYOUTLAB_TASK_TIMEOUT_S", _json_object, {}, "local functions' timeouts, JSON {task: seconds}, over "
             "the defaults of layoutlab.local.dispatch", "local"),
    Variable("LAYOUTLAB_PROXY_CONTROL", _text, "", "control URL of the local S3 proxy; bench cases count their "
             "requests through it", "local"),
    Variable("LAYOUTLAB_LAYER_ROOT", _text, "", "the layer a local task's interpreter puts on sys.path", "local"),
    Variable("LAYOUTLAB_FUNCTION_ARN", _text, "", "the ARN a local task's Lambda context reports", "local"),
)
VARIABLES: dict[str, Variable] = {v.name: v for v in _DECLARED}


def default(name: str) -> Any:
    return VARIABLES[name].default


def given(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """The declared variable ``name`` is set to something (an empty value counts as not set)."""
    return (os.environ if environ is None else environ).get(VARIABLES[name].name, "") != ""


def value(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The typed value of the declared variable ``name``: its default when unset or empty; SettingError (one
    line naming it and why) when its value cannot be used."""
    variable = VARIABLES[name]
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None or raw == "":
        return copy.deepcopy(variable.default)  # a caller may change what it gets
    try:
        return variable.parse(raw)
    except (ValueError, UserError) as error:
        reason = str(error)
        raise SettingError(reason if reason.startswith(name) else f"{name}={raw!r}: {reason}") from None


def problems(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per declared variable set to a value that cannot be used."""
    found = []
    for name in VARIABLES:
        try:
            value(name, environ)
        except SettingError as error:
            found.append(str(error))
    return found


def check(environ: Mapping[str, str] | None = None) -> None:
    """Validate every variable set, at start (handlers' cold start, the CLI): SettingError listing the bad ones."""
    found = problems(environ)
    if found:
        raise SettingError("; ".join(found))


@dataclass(frozen=True)
class Settings:
    """What every deployed function is given (cdk/layoutlab_cdk/compute_stack.py), read once at cold start."""

    results_table: str
    outputs_bucket: str
    ingest_bucket: str
    state_machine_arn: str = default("LAYOUTLAB_STATE_MACHINE_ARN")
    idempotency_table: str = default("LAYOUTLAB_IDEMPOTENCY_TABLE")
    max_input_bytes: int = default("LAYOUTLAB_MAX_INPUT_BYTES")
    environment: str = default("LAYOUTLAB_ENV")
    ceilings: Ceilings = field(default_factory=Ceilings)
    default_plan: str = default("LAYOUTLAB_DEFAULT_PLAN")

    ENV = {
        "results_table": "LAYOUTLAB_RESULTS_TABLE",
        "outputs_bucket": "LAYOUTLAB_OUTPUTS_BUCKET",
        "ingest_bucket": "LAYOUTLAB_INGEST_BUCKET",
        "state_machine_arn": "LAYOUTLAB_STATE_MACHINE_ARN",
        "idempotency_table": "LAYOUTLAB_IDEMPOTENCY_TABLE",
        "max_input_bytes": "LAYOUTLAB_MAX_INPUT_BYTES",
        "environment": "LAYOUTLAB_ENV",
        "ceilings": CEILINGS,
        "default_plan": "LAYOUTLAB_DEFAULT_PLAN",
    }

    @classmethod
    def from_env(cls, required: tuple[str, ...] = ("results_table", "outputs_bucket", "ingest_bucket"),
                 environ=None) -> "Settings":
        values, missing = {}, []
        for setting in fields(cls):
            name = cls.ENV[setting.name]
            if given(name, environ):
                values[setting.name] = value(name, environ)
            elif setting.name in required:
                missing.append(name)
        if missing:
            raise MissingSettings("missing environment variable(s): " + ", ".join(missing))
        return cls(**values)

    def as_environment(self) -> dict[str, str]:
        """The variables that reproduce these settings (used to start local tasks)."""
        def text(setting) -> str:
            return setting.to_json() if isinstance(setting, Ceilings) else str(setting)

        return {self.ENV[f.name]: text(getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) != ""}
