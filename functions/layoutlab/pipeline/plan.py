"""Plans: which variants, patterns, readers, platforms and repetitions to run.

A plan is JSON. The default ships in ``default_plan.json``; an upload can name
another without any redeploy: set the object's user metadata
``layoutlab-plan: NAME`` (``x-amz-meta-layoutlab-plan``) and put the plan at
``s3://<ingest bucket>/plans/NAME.json``. A named plan may be partial: its
top-level keys replace the default's.

``expand_cases`` turns a plan and what inspection learnt about the dataset
into the list of benchmark cases the Distributed Map runs. Repetitions are the
outer loop, so the repetitions of one case are spread over the run rather than
measured back to back.

``repetitions`` is the first round. With ``max_repetitions`` above it, the
comparisons still undecided after a round (``pipeline/repetitions.py``) get
``repetitions`` more, round after round, until decided or at ``max_repetitions``
(``repetition_schedule``). A plan naming ``repetitions`` but not
``max_repetitions`` gets exactly those repetitions (no further rounds).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import re
from dataclasses import dataclass
from importlib import resources

from layoutlab import kinds
from layoutlab.ceilings import CeilingError, Ceilings
from layoutlab.ceilings import over as ceiling_over
from layoutlab.errors import UserError
from layoutlab.pipeline.payloads import BenchCase, Schedule
from layoutlab.kinds._grid import chunk_preset  # noqa: F401  (where benchmarks and tests find it)
from layoutlab.units import parse_size, size_label  # noqa: F401  (the one size parser; plans' sizes are its)

PLAN_METADATA_KEY = "layoutlab-plan"
PLANS_PREFIX = "plans/"


def plan_schema() -> dict:
    """The JSON Schema every plan is validated against (``plan.schema.json``, Draft 2020-12), its variant
    entry built from the variant kinds (``layoutlab/kinds/``: each kind's module says the fields it takes)."""
    schema = json.loads(resources.files("layoutlab.pipeline").joinpath("plan.schema.json").read_text())
    schema["$defs"]["variant"] = {"description": schema["$defs"]["variant"]["description"], **kinds.entry_schema()}
    return schema


# The names a plan may use are the schema's: one list, read from it.
_DEFS = plan_schema()["$defs"]
GRID_PATTERNS = tuple(_DEFS["grid_pattern"]["enum"])
GRANULE_PATTERNS = tuple(_DEFS["granule_pattern"]["enum"])
PATTERNS = GRID_PATTERNS + GRANULE_PATTERNS
HDF5_READERS = tuple(_DEFS["hdf5_reader"]["enum"])
ZARR_READERS = tuple(_DEFS["zarr_reader"]["enum"])
KERCHUNK_READERS = tuple(_DEFS["kerchunk_reader"]["enum"])
ICECHUNK_READERS = tuple(_DEFS["icechunk_reader"]["enum"])
# the readers of each variant format (a variant's "format" picks its readers in expand_cases)
READERS_BY_FORMAT = {"hdf5": HDF5_READERS, "zarr": ZARR_READERS, "kerchunk": KERCHUNK_READERS,
                     "icechunk": ICECHUNK_READERS}
ALL_READERS = tuple(r for readers in READERS_BY_FORMAT.values() for r in readers)
# each kind is one module of layoutlab/kinds/ (what it takes, makes, stores and is read with)
VARIANT_KINDS = kinds.names()
DATASET_KINDS = ("grid", "granule")
# any other file, by the role its layouts are made for (variants applies_to "table" / "swath"); "grid" is a
# dataset kind already
STRUCTURE_ROLES = ("any", "table", "swath")

MAX_REPETITIONS = plan_schema()["properties"]["repetitions"]["maximum"]
# A difference in read time smaller than this share is not worth more repetitions to tell apart
# (see pipeline/repetitions.py: a ratio interval inside 1/(1+r)..1+r is decided).
DEFAULT_RESOLUTION = 0.1

_PLATFORM = re.compile(r"^(local-lambda|local-fargate|lambda-(\d+)|fargate-(0\.25|0\.5|1|2|4|8|16)-(\d+))$")


class PlanError(UserError):
    """A plan that cannot run; the message names the plan and the field."""


def default_plan() -> dict:
    text = resources.files("layoutlab.pipeline").joinpath("default_plan.json").read_text()
    return json.loads(text)


def merge_plan(override: dict | None, base: dict | None = None, *, ceilings: Ceilings | None = None,
               input_bytes: int | None = None) -> dict:
    """The plan to run: ``override``'s top-level keys over ``base`` (default plan), validated against the
    schema and this environment's ``ceilings`` (defaults when None) for an input of ``input_bytes``."""
    plan = copy.deepcopy(base or default_plan())
    if override is not None:
        if not isinstance(override, dict):
            raise PlanError(f"a plan must be a JSON object, got {json_type(override)}")
        plan.update(copy.deepcopy(override))
        if "repetitions" in override and "max_repetitions" not in override:
            plan.pop("max_repetitions", None)  # the repetitions asked for, no more (a base's cap may be lower)
    validate_plan(plan, ceilings=ceilings, input_bytes=input_bytes)
    return plan


def json_type(value) -> str:
    """A value's JSON type, as a plan's author wrote it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__)


@functools.cache
def _validator():
    import jsonschema

    return jsonschema.Draft202012Validator(plan_schema())


def schema_problems(plan) -> list[str]:
    """Where ``plan`` breaks the schema, one line each (``field: reason``), the most telling first."""
    from jsonschema.exceptions import best_match, relevance

    errors = list(_validator().iter_errors(plan))
    if not errors:
        return []
    first = best_match(errors)

    def leads_to(error, target) -> bool:  # an anyOf whose alternatives hold ``target``: the same problem
        return any(sub is target or leads_to(sub, target) for sub in error.context)

    others = sorted((e for e in errors if e is not first and not leads_to(e, first)), key=relevance)
    return [_schema_error_line(e) for e in [first, *others]]


def field_path(parts) -> str:
    """``variants[0].chunks.time`` for the path parts of a plan's field; odd names quoted, so one line."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", part):
            path += f".{part}" if path else part
        else:
            path += f"[{part!r}]"
    return path or "plan"


def _schema_error_line(error) -> str:
    """``field: reason`` in the plan author's terms: the field's path, and what the schema expects there
    (its ``description`` where a bare 'not valid under any of the given schemas' would say nothing)."""
    path = field_path(error.absolute_path)
    if error.validator == "additionalProperties":
        unknown = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return (f"{field_path([*error.absolute_path, unknown[0]])}: unknown field; known: "
                f"{', '.join(error.schema.get('properties', {}))}")
    if error.validator in ("anyOf", "pattern") and error.schema.get("description"):
        return f"{path}: {error.instance!r} is not {error.schema['description']}"
    return f"{path}: {error.message}"


def validate_plan(plan, ceilings: Ceilings | None = None, input_bytes: int | None = None) -> None:
    """Refuse a plan that cannot run, or costs more than ``ceilings`` allow, naming the field at fault.

    The schema (``plan.schema.json``) says what a plan looks like; then what it cannot: sizes parse,
    page sizes are powers of two, platforms fit Lambda, and the estimates of cases, variants and chunk
    objects stay under this environment's ceilings (``layoutlab/ceilings.py``), so nothing a plan asks
    for runs unbounded.
    """
    name = plan.get("name", "<unnamed>") if isinstance(plan, dict) else "<unnamed>"

    def fail(reason: str):
        raise PlanError(f"plan {name!r}: {reason}")

    problems = schema_problems(plan)
    if problems:
        fail(problems[0] + (f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""))
    for i, variant in enumerate(plan["variants"]):
        try:
            kinds.get(variant["kind"]).check(variant, f"variants[{i}]")
        except ValueError as error:
            fail(str(error))
        for option in ("target_chunk_bytes", "max_mem"):  # max_mem: the rechunk's bound per work unit
            if option in variant:
                try:
                    parse_size(variant[option], what=f"variants[{i}].{option}")
                except ValueError as error:
                    fail(str(error))
    for platform in plan["platforms"]:
        match = _PLATFORM.match(platform)
        if match.group(2) and not 128 <= int(match.group(2)) <= 10240:
            fail(f"platform {platform!r}: Lambda memory must be 128..10240 MB")
    repetitions = plan.get("repetitions", 1)
    most = plan.get("max_repetitions", repetitions)
    if not repetitions <= most:
        fail(f"'max_repetitions' must be an integer from 'repetitions' ({repetitions}) to {MAX_REPETITIONS}, "
             f"got {most!r}")
    try:
        check_ceilings(plan, ceilings or Ceilings(), input_bytes)
    except CeilingError as error:
        fail(str(error))


# --- what a plan costs, before anything runs ------------------------------------------------------

def _variant_formats(plan: dict, kind: str) -> list[str]:
    """The formats of the variants ``plan`` resolves to for a dataset of ``kind`` (an upper bound: a
    grid's rechunks are counted whether or not the file turns out to hold one)."""
    entries = [(v, kinds.get(v["kind"])) for v in plan["variants"] if v.get("applies_to") in (None, kind)]
    entries = [(v, k) for v, k in entries if k.needs(v) in (None, kind)]
    paged = sum(1 for _, k in entries if k.paged)
    return [f for v, k in entries for f in k.bound_formats(v, paged)]


def case_bound(plan: dict) -> tuple[int, str]:
    """The most benchmark cases ``plan`` can run on any dataset, every repetition round included,
    and how that number is made (for the message that refuses it)."""
    rounds = max(plan.get("repetitions", 1), plan.get("max_repetitions", 1))
    platforms = len(plan["platforms"])
    scaling = plan.get("scaling") or {}
    best = (0, "")
    for kind in DATASET_KINDS:
        patterns = [p for p in _for_kind(plan["patterns"], kind)
                    if p in (GRID_PATTERNS if kind == "grid" else GRANULE_PATTERNS)]
        formats = _variant_formats(plan, kind)
        readers = {f: len([r for r in _for_kind(plan["readers"], f) if r in READERS_BY_FORMAT[f]])
                   for f in READERS_BY_FORMAT}
        grid_cases = sum(len(patterns) * readers[f] * platforms for f in formats)
        scaling_cases = 0
        if scaling:
            workers = sum(scaling["workers"]) * len(scaling.get("modes", ["strong"]))
            scaling_cases = sum(workers * platforms for f in formats if readers[f] or scaling.get("reader"))
        total = rounds * (grid_cases + scaling_cases)
        if total > best[0]:
            how = (f"{rounds} repetitions x ({grid_cases:,} cases of {len(formats)} variants x patterns x readers x "
                   f"{platforms} platforms" + (f" + {scaling_cases:,} scaling.workers cases" if scaling else "")
                   + f") for a {kind}")
            best = (total, how)
    # any other file: the variants that apply to every file and to its role, at most family_bound cases each
    # (no scaling study)
    readers = {f: len([r for r in _for_kind(plan["readers"], f) if r in READERS_BY_FORMAT[f]]) for f in READERS_BY_FORMAT}
    for role in STRUCTURE_ROLES:  # ("any": no variant applies_to it, only those for every file)
        formats = _variant_formats(plan, role)
        family_cases = family_bound(plan) * platforms * sum(readers[f] for f in formats)
        if rounds * family_cases > best[0]:
            best = (rounds * family_cases, f"{rounds} repetitions x ({family_cases:,} cases of {len(formats)} variants x "
                                           f"up to {family_bound(plan)} family patterns x readers x {platforms} "
                                           f"platforms) for a {'file of any other structure' if role == 'any' else role}")
    return best


def family_settings(plan: dict) -> tuple[tuple[str, ...], int, int]:
    """(families, variables per role, roles) a plan asks for a file of any structure."""
    from layoutlab.pipeline.families import DEFAULT_FAMILIES, DEFAULT_ROLES, DEFAULT_VARIABLES

    given = plan.get("families") or {}
    return (tuple(given.get("patterns") or DEFAULT_FAMILIES), int(given.get("variables") or DEFAULT_VARIABLES),
            int(given.get("roles") or DEFAULT_ROLES))


def family_bound(plan: dict) -> int:
    """The most family cases one file gets (per variant, reader and platform): the open-list, then per role
    its variables' whole reads and one case of each other family."""
    families, variables, roles = family_settings(plan)
    others = len([f for f in families if f not in ("open-list", "variable-read", "column-read")])
    reads = variables if {"variable-read", "column-read"} & set(families) else 0
    return int("open-list" in families) + roles * (reads + others)


def check_ceilings(plan: dict, ceilings: Ceilings, input_bytes: int | None = None) -> None:
    """Raise ``CeilingError`` naming the field, the estimate and the ceiling when ``plan`` (for an input
    of ``input_bytes``, when known) asks for more than this environment allows."""
    variants = max(len(_variant_formats(plan, kind)) for kind in (*DATASET_KINDS, *STRUCTURE_ROLES))
    if variants > ceilings.max_variants:
        raise ceiling_over("variants", "a count of", variants, "max_variants", ceilings.max_variants)
    for field in ("repetitions", "max_repetitions"):
        if plan.get(field, 1) > ceilings.max_repetitions:
            raise ceiling_over(field, "asks for", plan[field], "max_repetitions", ceilings.max_repetitions)
    scaling = plan.get("scaling")
    if scaling and max(scaling["workers"]) > ceilings.max_scaling_workers:
        raise ceiling_over("scaling.workers", "a study of", max(scaling["workers"]), "max_scaling_workers",
                           ceilings.max_scaling_workers)
    cases, how = case_bound(plan)
    if cases > ceilings.max_cases:
        raise ceiling_over("cases", "up to", cases, "max_cases", ceilings.max_cases, note=how)
    for i, variant in enumerate(plan["variants"]):
        kinds.get(variant["kind"]).check_ceilings(variant, f"variants[{i}]", ceilings, input_bytes)


def check_dataset_ceilings(plan: dict, specs: list[dict], facts: DatasetFacts, ceilings: Ceilings) -> None:
    """What only the file tells: a rechunk's chunks and objects against the ceilings, from the grid's shape.

    The conversion itself counts every array of the file again before it writes (convert/rechunk_plan.py);
    this refuses the plan before any conversion starts.
    """
    try:
        for spec in specs:
            kinds.get(spec["kind"]).check_dataset_ceilings(spec, facts, ceilings)
    except CeilingError as error:
        raise PlanError(f"plan {plan.get('name', '<unnamed>')!r}: {error}") from None


@dataclass(frozen=True)
class DatasetFacts:
    """What the plan step needs to know of a dataset (from inspection)."""

    kind: str  # "grid" | "granule" (the samples' shapes) | "structure" (any other file) | "other"
    grid_shape: tuple[int, ...] | None = None  # (time, lat, lon) of the main variable; any grid's own axes
    dims: tuple[str, ...] = ("time", "lat", "lon")
    # each grid axis's kind: T (time, the record axis), Z (level), Y, X, or None; () = (T, Y, X)
    grid_axes: tuple = ()
    itemsize: int = 4
    variable: str | None = None  # the main gridded variable's path
    beams: tuple[str, ...] = ()
    # a granule's largest beam, declared: elements and bytes of heights/h_ph, bytes of heights/lat_ph
    beam_elements: int = 0
    beam_bytes: int = 0
    beam_lat_bytes: int = 0
    # any other file: its role (structure.py) and the family cases planned from its structure
    # (pipeline/families.py: each {"pattern", "params", "role", "variable", "why", "read_bytes"})
    role: str | None = None
    family_cases: tuple = ()
    family_skipped: tuple = ()
    structure: dict | None = None  # the structure model's units, for the run's record
    # a table's or a swath's record axis (rows, scan lines): the longest table's rows or the swath's scan lines,
    # the bytes of one scan line of the swath's largest variable, and (first-axis length, elements of the other
    # axes) of every numeric array of more than one element (what a record-chunked copy writes)
    record_length: int = 0
    record_bytes: int = 0
    record_arrays: tuple = ()
    # ((reader, why), ...): a reader that cannot read the uploaded file's cases (h5coro's own probe, facts.py);
    # its cases are not planned on the original and the run lists why (never a failed case)
    reader_refusals: tuple = ()

    def pattern_params(self) -> dict:
        """Parameters every pattern of this dataset needs (which variable, which beam)."""
        if self.kind == "grid" and self.variable:
            return {"variable": self.variable}
        if self.kind == "granule" and self.beams:
            return {"beam": self.beams[0]}
        return {}


def variant_specs(plan: dict, facts: DatasetFacts) -> list[dict]:
    """The variants this dataset gets, each with its resolved ``name``.

    References over a paged variant (``virtual-kerchunk`` with ``over`` paged/all) are
    named ``kerchunk-<paged name>`` and carry ``over: <paged name>``: the convert task of
    that paged variant builds them once it has published it.
    """
    entries = [(v, kinds.get(v["kind"])) for v in plan["variants"]
               if not v.get("applies_to") or v.get("applies_to") in (facts.kind, facts.role)]
    specs = []
    for spec in (spec for entry, kind in entries for spec in kind.expand(entry, facts)):
        if spec not in specs:  # (two entries resolving to the same layout, capped at the file's extent: one)
            specs.append(spec)
    specs += [spec for entry, kind in entries for spec in kind.expand_after(entry, list(specs))]
    names = [s["name"] for s in specs]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise PlanError(f"plan {plan.get('name')!r}: variants resolve to the same name: {', '.join(sorted(duplicates))}")
    return specs


def _for_kind(value, kind_or_format: str) -> list[str]:
    if isinstance(value, dict):
        return list(value.get(kind_or_format, []))
    return list(value)


def _known_params(pattern: str, params: dict) -> dict:
    """The dataset-derived parameters this pattern takes (a listing takes none)."""
    from layoutlab.bench.patterns import get_pattern

    accepted = get_pattern(pattern).defaults
    return {k: v for k, v in params.items() if k in accepted}


def case_id(variant: str, pattern: str, reader: str, platform: str, repetition: int) -> str:
    return f"{variant}#{pattern}#{reader}#{platform}#{repetition:03d}"


def repeat_case(case: BenchCase, repetition: int) -> BenchCase:
    """``case`` once more, as repetition ``repetition`` (its id, hence its RESULT key, follows; only the
    repetition part changes, so a family case's numbered pattern and a scaling worker's id are kept)."""
    return dataclasses.replace(case, repetition=repetition,
                               case_id=f"{case.case_id.rsplit('#', 1)[0]}#{repetition:03d}")


def repetition_schedule(plan: dict) -> Schedule:
    """The rounds of repetitions: round 1 runs ``first``; each later round ``per_round`` more of the
    undecided comparisons' cases, never beyond ``max`` per case, so at most ``max_rounds`` rounds."""
    first = plan.get("repetitions", 1)
    most = plan.get("max_repetitions", first)
    return Schedule(first=first, max=most, per_round=first, max_rounds=1 + math.ceil((most - first) / first),
                    resolution=float(plan.get("resolution", DEFAULT_RESOLUTION)))


def round_repetitions(schedule: Schedule, round_number: int) -> range:
    """The repetition indexes round ``round_number`` (from 1) runs: rounds never share one."""
    if round_number == 1:
        return range(schedule.first)
    start = schedule.first + (round_number - 2) * schedule.per_round
    return range(min(start, schedule.max), min(start + schedule.per_round, schedule.max))


def expand_cases(plan: dict, facts: DatasetFacts, dataset_id: str, variants: list[dict]) -> list[dict]:
    """Every benchmark case, each the bench event (``payloads.BenchCase``): variants x patterns x readers x
    platforms x repetitions.

    ``variants`` are the produced variants' specs (``name``, ``kind``, ``format``, ``uri``); a
    reader runs only on the format it reads, a pattern only on the kind of
    dataset it fits (a beam read needs a granule).
    """
    if facts.kind in DATASET_KINDS:
        planned = [(p, p, None) for p in _for_kind(plan["patterns"], facts.kind)
                   if p in (GRID_PATTERNS if facts.kind == "grid" else GRANULE_PATTERNS)]
    else:  # any other file: the family cases planned from its structure (facts.family_cases)
        planned = [(c["label"], c["pattern"], c["params"]) for c in family_labels(facts.family_cases)]
    cases = []
    for repetition in range(plan.get("repetitions", 1)):
        for variant in variants:
            readers = _for_kind(plan["readers"], variant["format"])
            known = READERS_BY_FORMAT.get(variant["format"], ())
            options = kinds.get(variant["kind"]).reader_options(variant) or None
            refused = {r for r, _why in readers_not_planned(facts, variant)}
            for pattern, family, family_params in planned:
                params = family_params if family_params is not None else {
                    **_known_params(pattern, facts.pattern_params()), **plan.get("pattern_params", {}).get(pattern, {})}
                for reader in (r for r in readers if r in known and r not in refused):
                    for platform in plan["platforms"]:
                        kind = "fargate" if platform.startswith(("fargate", "local-fargate")) else "lambda"
                        cases.append(BenchCase(
                            case_id=case_id(variant["name"], pattern, reader, platform, repetition),
                            dataset_id=dataset_id, dataset=dataset_id, variant=variant["name"],
                            format=variant["format"], target=variant["uri"], pattern=pattern, reader=reader,
                            platform=platform, platform_kind=kind, repetition=repetition,
                            params=dict(params),
                            reader_options=options,
                        ).to_event())
        cases += _scaling_cases(plan, facts, dataset_id, variants, repetition)
    return cases


def readers_not_planned(facts: DatasetFacts, variant: dict) -> list[tuple[str, str]]:
    """[(reader, why)] of the readers that cannot read ``variant`` of this file: h5coro on a paged copy (superblock
    version 3), or on a file whose cases' datasets h5coro did not parse in the plan step (``facts.reader_refusals``:
    the original, and the references' source is read by their own reader). Not planned, never a failed case."""
    from layoutlab.bench.readers import H5CORO_PAGED_REFUSAL

    if variant.get("format") != "hdf5":
        return []
    if kinds.get(variant["kind"]).paged:
        return [("h5coro", H5CORO_PAGED_REFUSAL)]
    return [(reader, why) for reader, why in facts.reader_refusals]


def not_planned_list(plan: dict, facts: DatasetFacts, variants: list[dict]) -> list[dict]:
    """For the run's record: each variant x reader of the plan left out, and why."""
    out = []
    for variant in variants:
        wanted = _for_kind(plan["readers"], variant.get("format", ""))
        out += [{"variant": variant["name"], "reader": reader, "why": why}
                for reader, why in readers_not_planned(facts, variant) if reader in wanted]
    return out


def fit_family_cases(facts: DatasetFacts, ceilings: Ceilings) -> DatasetFacts:
    """``facts`` without the family cases that would read more than ``max_case_read_bytes`` (a family that
    cannot fit the file is not planned, and the skipped list says why; a named preset over the ceiling
    still refuses the plan, pipeline/case_reads.py)."""
    if not facts.family_cases:
        return facts
    kept = [c for c in facts.family_cases if c["read_bytes"] <= ceilings.max_case_read_bytes]
    dropped = [f"{c['pattern']} of {c['variable']}: reads {c['read_bytes']:,} bytes, over max_case_read_bytes "
               f"({ceilings.max_case_read_bytes:,})" for c in facts.family_cases if c not in kept]
    return dataclasses.replace(facts, family_cases=tuple(kept), family_skipped=facts.family_skipped + tuple(dropped))


def family_labels(family_cases) -> list[dict]:
    """The family cases, each with its ``label``: the family's name, numbered from the second case of the
    same family on (``column-read``, ``column-read:2``): what the case's id, RESULT key and report rows
    carry, so two variables read by one family stay two comparisons (bench/patterns.get_pattern reads
    the family back from the label)."""
    seen: dict[str, int] = {}
    out = []
    for case in family_cases:
        seen[case["pattern"]] = seen.get(case["pattern"], 0) + 1
        n = seen[case["pattern"]]
        out.append({**case, "label": case["pattern"] if n == 1 else f"{case['pattern']}:{n}"})
    return out


def _scaling_cases(plan: dict, facts: DatasetFacts, dataset_id: str, variants: list[dict], repetition: int) -> list[dict]:
    """Xu et al.'s scaling study: N concurrent ``slab-read`` cases, worker K of N, strong or weak.

    Strong: the variable split N ways; weak: ``rows_per_worker`` rows each. The N
    cases of one study are adjacent in the list, so a Distributed Map with
    ``max_concurrency`` >= N runs them side by side; the summary reports the
    aggregate throughput against N.
    """
    scaling = plan.get("scaling")
    if not scaling or facts.kind not in DATASET_KINDS:  # (slab-read's default variable is a sample's)
        return []
    chosen = set(scaling.get("variants") or [v["name"] for v in variants])
    cases = []
    for variant in (v for v in variants if v["name"] in chosen):
        readers = _for_kind(plan["readers"], variant["format"])
        reader = scaling.get("reader") or (readers[0] if readers else None)
        if reader is None:
            continue
        for platform in plan["platforms"]:
            kind = "fargate" if platform.startswith(("fargate", "local-fargate")) else "lambda"
            for mode in scaling.get("modes", ["strong"]):
                for n in scaling["workers"]:
                    for k in range(n):
                        params = {**_known_params("slab-read", facts.pattern_params()),
                                  "workers": n, "worker": k, "scaling": mode}
                        if scaling.get("rows_per_worker"):
                            params["rows_per_worker"] = int(scaling["rows_per_worker"])
                        cases.append(BenchCase(
                            case_id=f"{variant['name']}#slab-read-{mode}-{n}w-{k}#{reader}#{platform}#{repetition:03d}",
                            dataset_id=dataset_id, dataset=dataset_id, variant=variant["name"],
                            format=variant["format"], target=variant["uri"], pattern="slab-read",
                            reader=reader, platform=platform, platform_kind=kind,
                            repetition=repetition, params=params,
                            reader_options=kinds.get(variant["kind"]).reader_options(variant) or None,
                        ).to_event())
    return cases
