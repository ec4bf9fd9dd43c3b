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
import json
import math
import re
from dataclasses import dataclass
from importlib import resources

from layoutlab.errors import UserError
from layoutlab.units import parse_size, size_label  # noqa: F401  (the one size parser; plans' sizes are its)

PLAN_METADATA_KEY = "layoutlab-plan"
PLANS_PREFIX = "plans/"

GRID_PATTERNS = ("timeseries-point", "map-timestep", "timeseries-region-mean", "map-time-mean",
                 "full-read-throughput", "slab-read")
GRANULE_PATTERNS = ("granule-open-list", "beam-read", "beam-subset")
PATTERNS = GRID_PATTERNS + GRANULE_PATTERNS
HDF5_READERS = ("h5py-s3fs-default", "h5py-s3fs-aligned", "xarray-h5netcdf", "h5py-ros3", "h5coro")
ZARR_READERS = ("zarr-obstore", "zarr-obstore-nocoalesce", "zarr-fsspec")
KERCHUNK_READERS = ("kerchunk-fsspec",)
ICECHUNK_READERS = ("icechunk",)
# the readers of each variant format (a variant's "format" picks its readers in expand_cases)
READERS_BY_FORMAT = {"hdf5": HDF5_READERS, "zarr": ZARR_READERS, "kerchunk": KERCHUNK_READERS,
                     "icechunk": ICECHUNK_READERS}
ALL_READERS = tuple(r for readers in READERS_BY_FORMAT.values() for r in readers)
# virtual-kerchunk: references over the original and/or each paged variant (no chunk data copied);
# icechunk-virtual: an Icechunk repository of virtual chunks pinned to the original's ETag;
# icechunk: native Icechunk, rechunked like rechunk-zarr (grid only), sharded optionally.
VARIANT_KINDS = ("original", "repack-paged", "rechunked-paged", "rechunk-zarr", "virtual-kerchunk",
                 "icechunk-virtual", "icechunk")
KERCHUNK_OVER = ("original", "paged", "all")
REFERENCE_FORMATS = ("json",)  # Parquet needs fastparquet, which the layer does not carry
DATASET_KINDS = ("grid", "granule")
CHUNK_PRESETS = ("timeseries", "map", "balanced")

MAX_REPETITIONS = 100
# A difference in read time smaller than this share is not worth more repetitions to tell apart
# (see pipeline/repetitions.py: a ratio interval inside 1/(1+r)..1+r is decided).
DEFAULT_RESOLUTION = 0.1

_PLATFORM = re.compile(r"^(local-lambda|local-fargate|lambda-(\d+)|fargate-(0\.25|0\.5|1|2|4|8|16)-(\d+))$")


class PlanError(UserError):
    """A plan that cannot run; the message names the plan and the field."""


def default_plan() -> dict:
    text = resources.files("layoutlab.pipeline").joinpath("default_plan.json").read_text()
    return json.loads(text)


def merge_plan(override: dict | None, base: dict | None = None) -> dict:
    """The plan to run: ``override``'s top-level keys over ``base`` (default plan)."""
    plan = copy.deepcopy(base or default_plan())
    if override:
        if not isinstance(override, dict):
            raise PlanError(f"plan must be a JSON object, got {type(override).__name__}")
        plan.update(copy.deepcopy(override))
        if "repetitions" in override and "max_repetitions" not in override:
            plan.pop("max_repetitions", None)  # the repetitions asked for, no more (a base's cap may be lower)
    validate_plan(plan)
    return plan


def validate_plan(plan: dict) -> None:
    name = plan.get("name", "<unnamed>")

    def fail(reason: str):
        raise PlanError(f"plan {name!r}: {reason}")

    if not plan.get("variants"):
        fail("'variants' is empty")
    for i, variant in enumerate(plan["variants"]):
        kind = variant.get("kind")
        if kind not in VARIANT_KINDS:
            fail(f"variants[{i}].kind {kind!r} is not one of {', '.join(VARIANT_KINDS)}")
        if kind in ("repack-paged", "rechunked-paged"):
            from layoutlab.convert.page_budget import DEFAULT_BUDGET, is_auto, parse_budget

            try:  # "auto": chosen from the file at conversion (convert/page_budget.py) within size_budget
                page = None if is_auto(variant.get("page_size")) else parse_size(
                    variant.get("page_size", "8MiB"), what=f"variants[{i}].page_size")
            except ValueError as error:
                fail(str(error))
            try:
                parse_budget(variant.get("size_budget", DEFAULT_BUDGET))
            except ValueError as error:
                fail(f"variants[{i}].{error}")
            if page is not None and (page < 4096 or page & (page - 1)):
                fail(f"variants[{i}].page_size must be \"auto\" or a power of two >= 4KiB, "
                     f"got {variant.get('page_size')}")
        if kind == "virtual-kerchunk":
            if variant.get("over", "all") not in KERCHUNK_OVER:
                fail(f"variants[{i}].over must be one of {', '.join(KERCHUNK_OVER)}, got {variant.get('over')!r}")
            if variant.get("references", "json") not in REFERENCE_FORMATS:
                fail(f"variants[{i}].references {variant.get('references')!r}: only json is supported "
                     "(kerchunk Parquet needs fastparquet, which is not in the Lambda layer)")
        if kind in ("rechunk-zarr", "icechunk"):
            shards = variant.get("shards")
            if shards is not None and not (
                    (isinstance(shards, dict) and shards and all(isinstance(v, int) and v > 0 for v in shards.values()))
                    or (isinstance(shards, list) and shards and all(isinstance(c, int) and c > 0 for c in shards))):
                fail(f"variants[{i}].shards must be a {{dimension: size}} object (whole multiples of the chunks) "
                     "or a list of positive factors, one per dimension (shard = chunk x factor)")
            if "target_chunk_bytes" in variant:
                try:
                    parse_size(variant["target_chunk_bytes"], what=f"variants[{i}].target_chunk_bytes")
                except ValueError as error:
                    fail(str(error))
        if kind in ("rechunk-zarr", "icechunk"):
            chunks = variant.get("chunks")
            if not (chunks in CHUNK_PRESETS or (isinstance(chunks, dict) and chunks)
                    or (isinstance(chunks, list) and all(isinstance(c, int) and c > 0 for c in chunks))):
                fail(f"variants[{i}].chunks must be one of {', '.join(CHUNK_PRESETS)}, "
                     "a list of positive integers, or a {dimension: size} object")
            if "max_mem" in variant:  # the rechunk's memory bound per work unit (default 512MiB)
                try:
                    parse_size(variant["max_mem"], what=f"variants[{i}].max_mem")
                except ValueError as error:
                    fail(str(error))
    for key, known in (("patterns", PATTERNS), ("readers", ALL_READERS)):
        value = plan.get(key)
        groups = value.values() if isinstance(value, dict) else [value]
        for group in groups:
            if not isinstance(group, list):
                fail(f"'{key}' must be a list or an object of lists")
            for entry in group:
                if entry not in known:
                    fail(f"unknown {key[:-1]} {entry!r}; known: {', '.join(known)}")
    for platform in plan.get("platforms", []):
        match = _PLATFORM.match(str(platform))
        if not match:
            fail(f"unknown platform {platform!r}; use local-lambda, local-fargate, lambda-<MB>, fargate-<vcpu>-<MB>")
        if match.group(2) and not 128 <= int(match.group(2)) <= 10240:
            fail(f"platform {platform!r}: Lambda memory must be 128..10240 MB")
    if not plan.get("platforms"):
        fail("'platforms' is empty")
    repetitions = plan.get("repetitions", 1)
    if not isinstance(repetitions, int) or isinstance(repetitions, bool) or not 1 <= repetitions <= MAX_REPETITIONS:
        fail(f"'repetitions' must be an integer 1..{MAX_REPETITIONS}, got {repetitions!r}")
    most = plan.get("max_repetitions", repetitions)
    if not isinstance(most, int) or isinstance(most, bool) or not repetitions <= most <= MAX_REPETITIONS:
        fail(f"'max_repetitions' must be an integer from 'repetitions' ({repetitions}) to {MAX_REPETITIONS}, "
             f"got {most!r}")
    resolution = plan.get("resolution", DEFAULT_RESOLUTION)
    if not isinstance(resolution, (int, float)) or isinstance(resolution, bool) or not 0 < resolution < 1:
        fail(f"'resolution' must be a fraction between 0 and 1 (0.1: differences under 10 % need no deciding), "
             f"got {resolution!r}")
    scaling = plan.get("scaling")
    if scaling is not None:
        if not isinstance(scaling, dict):
            fail("'scaling' must be an object like {\"workers\": [1, 2, 4], \"modes\": [\"strong\", \"weak\"]}")
        workers = scaling.get("workers")
        if not workers or not all(isinstance(n, int) and 1 <= n <= 1000 for n in workers):
            fail("'scaling.workers' must list worker counts 1..1000")
        for mode in scaling.get("modes", ["strong"]):
            if mode not in ("strong", "weak"):
                fail(f"'scaling.modes': {mode!r} is neither 'strong' nor 'weak'")
    fan_out = plan.get("fan_out_above_bytes", 0)
    if not isinstance(fan_out, int) or fan_out < 0:
        fail(f"'fan_out_above_bytes' must be a non-negative integer, got {fan_out!r}")
    concurrency = plan.get("max_concurrency", 1)
    if not isinstance(concurrency, int) or not 1 <= concurrency <= 10000:
        fail(f"'max_concurrency' must be an integer 1..10000, got {concurrency!r}")


def chunk_preset(preset: str, shape: tuple[int, int, int], itemsize: int = 4,
                 target_bytes: int = 4 * 2**20) -> tuple[int, int, int]:
    """Chunk shape for a (time, lat, lon) array, after Nguyen et al.'s three archetypes.

    ``timeseries``: whole time axis, 10x10 in space (their 5136x10x10);
    ``map``: one time step, whole map (their 1x721x1152);
    ``balanced``: a chunk of about ``target_bytes`` for which a time series
    and a map touch the same number of chunks (T/ct = (Y/cy)(X/cx)), which is
    where the product of the two read times is smallest when cost tracks chunks.
    """
    t, y, x = shape
    if preset == "timeseries":
        return (t, min(y, 10), min(x, 10))
    if preset == "map":
        return (1, y, x)
    if preset == "balanced":
        elements = max(1, target_bytes // itemsize)
        ct = max(1, min(t, elements, round(math.sqrt(elements * t / (y * x)))))
        area = max(1, elements // ct)
        cy = max(1, min(y, area, round(math.sqrt(area * y / x))))
        cx = max(1, min(x, area // cy))
        return (ct, cy, cx)
    raise ValueError(f"unknown chunk preset {preset!r}; one of {', '.join(CHUNK_PRESETS)}")


@dataclass(frozen=True)
class DatasetFacts:
    """What the plan step needs to know of a dataset (from inspection)."""

    kind: str  # "grid" | "granule" | "other"
    grid_shape: tuple[int, int, int] | None = None  # (time, lat, lon) of the main variable
    dims: tuple[str, str, str] = ("time", "lat", "lon")
    itemsize: int = 4
    variable: str | None = None  # the main gridded variable's path
    beams: tuple[str, ...] = ()

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
    specs, deferred = [], []
    for variant in plan["variants"]:
        applies_to = variant.get("applies_to")
        if applies_to and applies_to != facts.kind:
            continue
        spec = dict(variant)
        kind = spec["kind"]
        if kind == "original":
            spec["name"], spec["format"] = "original", "hdf5"
        elif kind in ("repack-paged", "rechunked-paged"):
            from layoutlab.convert.page_budget import AUTO, DEFAULT_BUDGET, is_auto, parse_budget

            page = AUTO if is_auto(spec.get("page_size")) else parse_size(spec.get("page_size", "8MiB"))
            spec["page_size"], spec["size_budget"] = page, parse_budget(spec.get("size_budget", DEFAULT_BUDGET))
            prefix = "paged" if kind == "repack-paged" else "rechunked-paged"
            spec["name"], spec["format"] = f"{prefix}-{page if page == AUTO else size_label(page)}", "hdf5"
        elif kind == "virtual-kerchunk":
            if spec.get("over", "all") in ("original", "all"):
                specs.append({**spec, "name": "kerchunk-original", "format": "kerchunk", "over": "original"})
            if spec.get("over", "all") in ("paged", "all"):
                deferred.append(spec)  # over each paged variant, once all of them are named
            continue
        elif kind == "icechunk-virtual":
            spec["name"], spec["format"] = "icechunk-virtual", "icechunk"
        else:  # rechunk-zarr and icechunk need a grid
            if facts.kind != "grid" or not facts.grid_shape:
                continue
            chunks = spec["chunks"]
            if isinstance(chunks, str):
                chunks = chunk_preset(chunks, facts.grid_shape, facts.itemsize,
                                      parse_size(spec.get("target_chunk_bytes", 4 * 2**20)))
            elif isinstance(chunks, dict):
                chunks = tuple(int(chunks.get(d, n)) for d, n in zip(facts.dims, facts.grid_shape))
            chunks = tuple(min(int(c), n) for c, n in zip(chunks, facts.grid_shape))
            spec["chunks"] = dict(zip(facts.dims, chunks))
            if isinstance(spec.get("shards"), list):  # factors: shard = chunk x factor, within the axis
                factors = list(spec["shards"]) + [1] * (3 - len(spec["shards"]))
                spec["shards"] = {d: c * max(1, min(int(f), n // c))
                                  for d, c, n, f in zip(facts.dims, chunks, facts.grid_shape, factors)}
            label = "x".join(str(c) for c in chunks)
            base = "zarr" if kind == "rechunk-zarr" else "icechunk"
            spec["name"] = f"{base}-sharded-{label}" if spec.get("shards") else f"{base}-{label}"
            spec["format"] = "zarr" if kind == "rechunk-zarr" else "icechunk"
        specs.append(spec)
    for spec in deferred:
        for paged in [s for s in specs if s["kind"] in ("repack-paged", "rechunked-paged")]:
            specs.append({**spec, "name": f"kerchunk-{paged['name']}", "format": "kerchunk", "over": paged["name"]})
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


def repeat_case(case: dict, repetition: int) -> dict:
    """``case`` once more, as repetition ``repetition`` (its id, hence its RESULT key, follows)."""
    return {**case, "repetition": repetition,
            "case_id": case_id(case["variant"], case["pattern"], case["reader"], case["platform"], repetition)}


def repetition_schedule(plan: dict) -> dict:
    """The rounds of repetitions: round 1 runs ``first``; each later round ``per_round`` more of the
    undecided comparisons' cases, never beyond ``max`` per case, so at most ``max_rounds`` rounds."""
    first = plan.get("repetitions", 1)
    most = plan.get("max_repetitions", first)
    return {"first": first, "max": most, "per_round": first, "max_rounds": 1 + math.ceil((most - first) / first),
            "resolution": float(plan.get("resolution", DEFAULT_RESOLUTION))}


def round_repetitions(schedule: dict, round_number: int) -> range:
    """The repetition indexes round ``round_number`` (from 1) runs: rounds never share one."""
    if round_number == 1:
        return range(schedule["first"])
    start = schedule["first"] + (round_number - 2) * schedule["per_round"]
    return range(min(start, schedule["max"]), min(start + schedule["per_round"], schedule["max"]))


def expand_cases(plan: dict, facts: DatasetFacts, dataset_id: str, variants: list[dict]) -> list[dict]:
    """Every benchmark case: variants x patterns x readers x platforms x repetitions.

    ``variants`` are the produced variants (``name``, ``format``, ``uri``); a
    reader runs only on the format it reads, a pattern only on the kind of
    dataset it fits (a beam read needs a granule).
    """
    patterns = [p for p in _for_kind(plan["patterns"], facts.kind)
                if p in (GRID_PATTERNS if facts.kind == "grid" else GRANULE_PATTERNS)]
    cases = []
    for repetition in range(plan.get("repetitions", 1)):
        for variant in variants:
            readers = _for_kind(plan["readers"], variant["format"])
            known = READERS_BY_FORMAT.get(variant["format"], ())
            for pattern in patterns:
                for reader in (r for r in readers if r in known):
                    for platform in plan["platforms"]:
                        kind = "fargate" if platform.startswith(("fargate", "local-fargate")) else "lambda"
                        cases.append({
                            "case_id": case_id(variant["name"], pattern, reader, platform, repetition),
                            "dataset_id": dataset_id,
                            "dataset": dataset_id,
                            "variant": variant["name"],
                            "format": variant["format"],
                            "target": variant["uri"],
                            "pattern": pattern,
                            "reader": reader,
                            "platform": platform,
                            "platform_kind": kind,
                            "repetition": repetition,
                            "params": {**_known_params(pattern, facts.pattern_params()),
                                       **plan.get("pattern_params", {}).get(pattern, {})},
                        })
        cases += _scaling_cases(plan, facts, dataset_id, variants, repetition)
    return cases


def _scaling_cases(plan: dict, facts: DatasetFacts, dataset_id: str, variants: list[dict], repetition: int) -> list[dict]:
    """Xu et al.'s scaling study: N concurrent ``slab-read`` cases, worker K of N, strong or weak.

    Strong: the variable split N ways; weak: ``rows_per_worker`` rows each. The N
    cases of one study are adjacent in the list, so a Distributed Map with
    ``max_concurrency`` >= N runs them side by side; the summary reports the
    aggregate throughput against N.
    """
    scaling = plan.get("scaling")
    if not scaling:
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
                        cases.append({
                            "case_id": f"{variant['name']}#slab-read-{mode}-{n}w-{k}#{reader}#{platform}#{repetition:03d}",
                            "dataset_id": dataset_id, "dataset": dataset_id, "variant": variant["name"],
                            "format": variant["format"], "target": variant["uri"], "pattern": "slab-read",
                            "reader": reader, "platform": platform, "platform_kind": kind,
                            "repetition": repetition, "params": params,
                        })
    return cases
