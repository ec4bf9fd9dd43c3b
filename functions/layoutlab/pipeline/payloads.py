"""The payloads between the state machine and the handlers, typed (stepfunctions/README.md in code).

Each handler parses its event once, here, into one of these frozen dataclasses, and the pipeline's
functions take them; ``to_event`` writes one back exactly as the state machine carries it (the plan
step writes convert tasks and cases this way). A payload missing a field, or holding one of the
wrong type, is refused in one line naming the payload and the field.
``tests/unit/test_payloads_asl.py`` checks that every path ``stepfunctions/pipeline.asl.json``
reads or writes is a field of these types.

- ``ExecutionInput``: what ``ingest`` starts an execution with; the ``plan`` handler's event.
- ``ConvertTask``: one item of ``convert_tasks``, ``publish_tasks`` or ``work-units.json``; the ``convert`` event.
- ``BenchCase``: one item of a case list (``cases.json``); the ``bench`` event.
- ``PlanOutput``: what ``plan`` returns; the state keeps ``PlanState`` of it under ``$.plan``.
- ``MoreRepetitionsInput``: the ``plan`` handler's event after a round of cases; it returns a ``CaseList``.
- ``SummarizeInput``: the whole state (``ExecutionState``), the ``summarize`` event; it reads ``READS`` of it.
- ``FailureInput``: the ``record_failure`` event.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field

PHASES = ("whole", "unit", "publish")
MORE_REPETITIONS = "more_repetitions"
CASES_OF_MADE_VARIANTS = "cases_of_made_variants"


class PayloadError(ValueError):
    """A payload that is not what the state machine's contract says; the message names the field."""


def _field(event, payload: str, name: str, kind, *, required: bool = True, default=None):
    if not isinstance(event, dict):
        raise PayloadError(f"{payload}: expected a JSON object, got {type(event).__name__}")
    if name not in event or event[name] is None:
        if required:
            raise PayloadError(f"{payload}: '{name}' is missing (stepfunctions/README.md)")
        return default
    value = event[name]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise PayloadError(f"{payload}: '{name}' must be {getattr(kind, '__name__', kind)}, got {value!r}"[:300])
    return value


def _source(event, payload: str, *, required: bool = True) -> dict | None:
    """The upload's identity as ingest wrote it (bucket, key, version_id, etag, size...), carried untouched."""
    source = _field(event, payload, "source", dict, required=required)
    if source is not None:
        for name in ("bucket", "key"):
            _field(source, f"{payload}.source", name, str)
    return source


def _dropping_none(pairs: dict) -> dict:
    return {k: v for k, v in pairs.items() if v is not None}


@dataclass(frozen=True)
class ExecutionInput:
    dataset_id: str
    source: dict
    plan: dict | None = None  # validated by ingest (pipeline/plan.py); None: the default plan
    carried: dict = field(default_factory=dict)  # outputs_bucket, outputs_prefix...: carried along untouched

    @classmethod
    def from_event(cls, event) -> ExecutionInput:
        what = "execution input"
        return cls(dataset_id=_field(event, what, "dataset_id", str), source=_source(event, what),
                   plan=_field(event, what, "plan", dict, required=False),
                   carried={k: v for k, v in event.items() if k not in ("dataset_id", "source", "plan")})

    def to_event(self) -> dict:
        return {"dataset_id": self.dataset_id, "source": self.source, **_dropping_none({"plan": self.plan}),
                **self.carried}


@dataclass(frozen=True)
class ConvertTask:
    """Make one variant (phase ``whole``), one rechunk work unit (``unit``) or publish a fanned-out one."""

    dataset_id: str
    source: dict
    variant: dict  # the spec: name, kind, format, uri and its kind's resolved options (layoutlab/kinds/)
    phase: str = "whole"
    convert_on: str | None = None  # "lambda" | "fargate" (phase whole): the Choice of ConvertVariants
    work_unit: int | None = None  # k, of phase unit
    over_uri: str | None = None  # references built over the variant just published (made in the same task)

    @classmethod
    def from_event(cls, event) -> ConvertTask:
        what = "convert task"
        phase = _field(event, what, "phase", str, required=False, default="whole")
        if phase not in PHASES:
            raise PayloadError(f"{what}: 'phase' must be one of {', '.join(PHASES)}, got {phase!r}")
        variant = _field(event, what, "variant", dict)
        for name in ("name", "kind", "format", "uri"):
            _field(variant, f"{what}.variant", name, str)
        unit = _field(event, what, "work_unit", dict, required=phase == "unit")
        return cls(dataset_id=_field(event, what, "dataset_id", str), source=_source(event, what), variant=variant,
                   phase=phase, convert_on=_field(event, what, "convert_on", str, required=False),
                   work_unit=None if unit is None else int(_field(unit, f"{what}.work_unit", "k", int)))

    def to_event(self) -> dict:
        return {"dataset_id": self.dataset_id, "source": self.source, "variant": self.variant, "phase": self.phase,
                **_dropping_none({"convert_on": self.convert_on}),
                **({"work_unit": {"k": self.work_unit}} if self.work_unit is not None else {})}

    @property
    def name(self) -> str:
        return self.variant["name"]

    @property
    def kind(self) -> str:
        return self.variant["kind"]

    @property
    def uri(self) -> str:
        return self.variant["uri"]

    @property
    def upload_url(self) -> str:
        """The upload, as its user named it (``s3://bucket/key``)."""
        return f"s3://{self.source['bucket']}/{self.source['key']}"

    def derived(self) -> list[ConvertTask]:
        """The tasks of the references planned over this variant (its spec's ``derived``), made right after it."""
        return [dataclasses.replace(self, variant=spec, over_uri=self.uri) for spec in self.variant.get("derived") or ()]


@dataclass(frozen=True)
class BenchCase:
    """One benchmark case: a variant read with one pattern and one reader on one platform, once."""

    case_id: str
    dataset_id: str
    dataset: str
    variant: str
    format: str
    target: str
    pattern: str
    reader: str
    platform: str
    platform_kind: str  # "lambda" | "fargate": the Choice of BenchCases
    repetition: int
    params: dict = field(default_factory=dict)
    reader_options: dict | None = None  # what the reader must know of the variant (its kind's reader_options)

    @classmethod
    def from_event(cls, event) -> BenchCase:
        what = "bench case"
        hints = typing.get_type_hints(cls)
        values = {f.name: _field(event, what, f.name, _runtime_type(hints[f.name]),
                                 required=f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                  for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if v is not None})

    def to_event(self) -> dict:
        event = dataclasses.asdict(self)
        if self.reader_options is None:
            del event["reader_options"]
        return event


@dataclass(frozen=True)
class WorkUnits:
    key: str | None  # runs/<dataset>/work-units.json, or None when there are none
    count: int

    def to_event(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class CaseList:
    """The case list of a round: its key in the outputs bucket (None: no round to run), how many, which round
    (from 1), the cases of every round so far, and how many comparisons were still undecided (later rounds)."""

    key: str | None
    count: int
    round: int
    planned: int
    undecided: int | None = None

    @classmethod
    def from_event(cls, event, what: str = "cases") -> CaseList:
        return cls(key=_field(event, what, "key", str, required=False), count=_field(event, what, "count", int),
                   round=_field(event, what, "round", int), planned=_field(event, what, "planned", int),
                   undecided=_field(event, what, "undecided", int, required=False))

    def to_event(self) -> dict:
        event = dataclasses.asdict(self)
        if self.undecided is None:
            del event["undecided"]
        return event


@dataclass(frozen=True)
class Schedule:
    """The rounds of repetitions (``plan.repetition_schedule``)."""

    first: int
    max: int
    per_round: int
    max_rounds: int
    resolution: float

    @classmethod
    def from_event(cls, event, what: str = "repetitions") -> Schedule:
        return cls(**{f.name: _field(event, what, f.name, float if f.name == "resolution" else int)
                      for f in dataclasses.fields(cls)})

    def to_event(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Concurrency:
    convert: int
    work_units: int
    bench: int

    @classmethod
    def from_event(cls, event, what: str = "max_concurrency") -> Concurrency:
        return cls(**{f.name: _field(event, what, f.name, int) for f in dataclasses.fields(cls)})

    def to_event(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PlanState:
    """What the state keeps of the plan step's answer under ``$.plan`` (the Plan state's ResultSelector);
    ``cases`` is replaced by each later round's ``CaseList``."""

    convert_tasks: list[ConvertTask]
    publish_tasks: list[ConvertTask]
    work_units: WorkUnits
    cases: CaseList
    repetitions: Schedule
    max_concurrency: Concurrency
    tolerated_failure_percentage: float

    def to_event(self) -> dict:
        return {"convert_tasks": [t.to_event() for t in self.convert_tasks],
                "publish_tasks": [t.to_event() for t in self.publish_tasks],
                "work_units": self.work_units.to_event(), "cases": self.cases.to_event(),
                "repetitions": self.repetitions.to_event(), "max_concurrency": self.max_concurrency.to_event(),
                "tolerated_failure_percentage": self.tolerated_failure_percentage}


@dataclass(frozen=True)
class PlanOutput(PlanState):
    """What the plan step returns."""

    results_prefix: str = ""

    def to_event(self) -> dict:
        event = super().to_event()
        # (the order stepfunctions/README.md shows)
        return {**{k: event[k] for k in ("convert_tasks", "publish_tasks", "work_units", "cases", "repetitions")},
                "results_prefix": self.results_prefix,
                **{k: event[k] for k in ("max_concurrency", "tolerated_failure_percentage")}}


@dataclass(frozen=True)
class MoreRepetitionsInput:
    dataset_id: str
    cases: CaseList  # the round just run
    repetitions: Schedule
    phase: str = MORE_REPETITIONS

    @classmethod
    def from_event(cls, event) -> MoreRepetitionsInput:
        what = "more_repetitions"
        return cls(dataset_id=_field(event, what, "dataset_id", str),
                   cases=CaseList.from_event(_field(event, what, "cases", dict), f"{what}.cases"),
                   repetitions=Schedule.from_event(_field(event, what, "repetitions", dict), f"{what}.repetitions"))


@dataclass(frozen=True)
class MadeVariantsInput:
    """The plan function's phase after the variants are converted: the first round's cases, to keep those of
    the variants that were made."""

    dataset_id: str
    cases: CaseList
    phase: str = CASES_OF_MADE_VARIANTS

    @classmethod
    def from_event(cls, event) -> MadeVariantsInput:
        what = CASES_OF_MADE_VARIANTS
        return cls(dataset_id=_field(event, what, "dataset_id", str),
                   cases=CaseList.from_event(_field(event, what, "cases", dict), f"{what}.cases"))


@dataclass(frozen=True)
class SummarizeInput:
    """The whole state at its end: the upload, and of the plan what the summary reports (the rounds run);
    an execution started before the schedule existed has no ``repetitions`` (one round)."""

    dataset_id: str
    source: dict | None = None
    cases: CaseList | None = None
    repetitions: Schedule | None = None

    READS = {"dataset_id": "dataset_id", "source": "source", "cases": "plan.cases", "repetitions": "plan.repetitions"}

    @classmethod
    def from_event(cls, event) -> SummarizeInput:
        what = "summarize"
        plan = _field(event, what, "plan", dict, required=False, default={})
        cases = _field(plan, f"{what}.plan", "cases", dict, required=False)
        schedule = _field(plan, f"{what}.plan", "repetitions", dict, required=False)
        return cls(dataset_id=_field(event, what, "dataset_id", str), source=_source(event, what, required=False),
                   cases=None if cases is None else CaseList.from_event(cases, f"{what}.plan.cases"),
                   repetitions=None if schedule is None else Schedule.from_event(schedule,
                                                                                 f"{what}.plan.repetitions"))


@dataclass(frozen=True)
class ExecutionState:
    """The execution's state as pipeline.asl.json builds it: the input (``ExecutionInput``), then what each
    state writes at its ResultPath: ``plan`` (the Plan state replaces the input's plan with ``PlanState``),
    ``bench`` (the Distributed Map's ResultWriter record), ``error`` and ``failed_stage`` (a caught failure),
    ``summary``. Never parsed: the contract the state machine's paths are checked against."""

    dataset_id: str
    source: dict
    plan: PlanState
    bench: dict | None = None
    error: dict | None = None
    failed_stage: str | None = None
    summary: dict | None = None


@dataclass(frozen=True)
class FailureInput:
    """An error the state machine caught: never refused (recording a failure must not fail on its input);
    what is missing reads as unknown."""

    stage: str = "unknown"
    dataset_id: str = "unknown"
    error: dict = field(default_factory=dict)  # {"Error", "Cause"}
    execution_id: str | None = None
    source: dict | None = None
    case: dict | None = None  # a bench case, its caught error inside

    @classmethod
    def from_event(cls, event) -> FailureInput:
        event = event if isinstance(event, dict) else {}
        return cls(stage=event.get("stage") or "unknown", dataset_id=event.get("dataset_id") or "unknown",
                   error=event.get("error") or {}, execution_id=event.get("execution_id"),
                   source=event.get("source"), case=event.get("case") or None)


def _runtime_type(hint):
    """``dict`` of ``dict | None``: the type a present value must have."""
    return next((a for a in typing.get_args(hint) if a is not type(None)), hint)


def field_types(payload) -> dict[str, object]:
    """A payload type's fields and their types (for the check that the ASL's paths are fields)."""
    return typing.get_type_hints(payload)
