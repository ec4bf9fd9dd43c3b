"""The deployment environments of cdk.json (``context["layoutlab:environments"]``): their schema, read
and validated once.

``cdk deploy -c env=NAME`` picks ``context["layoutlab:environments"][NAME]``; every number that differs
between environments (sizes, retention, removal policies) lives there, not in the stacks. The CDK app
(cdk/layoutlab_cdk/config.py) and ``layoutlab doctor`` both read it with this module: the rules are
written once, inside the package, where the import contracts see them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layoutlab.ceilings import Ceilings
from layoutlab.errors import UserError

# The state machine's definition in this checkout (its ECS task timeouts are checked against the sizes).
ASL_PATH = Path(__file__).resolve().parents[2] / "stepfunctions" / "pipeline.asl.json"
ENVIRONMENTS_KEY = "layoutlab:environments"
HANDLERS = ("ingest", "plan", "convert", "bench", "summarize", "record_failure", "backfill")

# ---- scratch space (checked at synth: ``validate``) ---------------------------------------
# A whole conversion downloads the input to local disk, writes the variant beside it and
# (repack) reserves the output's size up front: input + output + preallocation come to about
# 2.3 x the input (the output of a paged repack is up to ~27 % larger than its input). An input
# that may reach a platform must fit there that many times, or the conversion dies of ENOSPC.
# (Rechunk work units stream from S3 and need no local copy: work_units_above_bytes does not
# lower the bound, since a repack of the same input still runs whole.)
SCRATCH_FACTOR = 2.3
LAMBDA_EPHEMERAL_MB_RANGE = (512, 10240)  # Lambda /tmp, MiB
FARGATE_EPHEMERAL_GIB_RANGE = (21, 200)  # ECS ephemeralStorage.sizeInGiB (20 GiB when not set)
# Fargate keeps the pulled image on the same ephemeral storage, compressed and unpacked; what
# the task may use is the total minus that (AWS ECS docs, "Fargate task ephemeral storage").
FARGATE_IMAGE_RESERVE_GIB = 4

# ---- ECS task timeouts (TimeoutSeconds of the ecs:runTask.sync states in pipeline.asl.json) --
# The ASL carries fixed values (the local run substitutes only names into it); at synth they
# are checked against this environment's sizes: a Fargate conversion of the largest input
# accepted must fit at a pessimistic end-to-end rate (download + convert + verify + upload)
# after the task has started (image pull, ENI), and a Fargate bench case gets at least the
# bench function's own timeout.
FARGATE_START_SECONDS = 600
FARGATE_CONVERT_MIN_BYTES_PER_S = 20 * 2**20


class ConfigError(ValueError):
    """cdk.json is missing an environment or a setting."""


@dataclass(frozen=True)
class FunctionSize:
    memory_mb: int
    timeout_seconds: int
    ephemeral_storage_mb: int = 512


@dataclass(frozen=True)
class TaskSize:
    cpu: int  # Fargate CPU units (1024 = 1 vCPU)
    memory_mb: int
    ephemeral_storage_gib: int = 21

    @property
    def platform(self) -> str:
        """The platform name (``layoutlab.platforms``) of a task this size: fargate-<vcpu>-<MB>."""
        return f"fargate-{self.cpu / 1024:g}-{self.memory_mb}"


@dataclass(frozen=True)
class EnvConfig:
    name: str
    removal_policy: str  # "destroy" | "retain"
    log_retention_days: int
    functions: dict[str, FunctionSize]
    convert_task: TaskSize
    bench_task: TaskSize
    fargate_convert_above_bytes: int  # plan: inputs larger than this convert on Fargate
    work_units_above_bytes: int  # plan: rechunks larger than this fan out over work units
    max_input_bytes: int  # ingest: reject larger uploads
    max_concurrency: dict[str, int]  # plan's default Map concurrency per stage
    tolerated_failure_percentage: int
    variants_expire_days: int  # outputs lifecycle; 0 keeps them
    alarm_email: str | None  # alarms topic: an e-mail subscription when set
    # Ingest bucket lifecycle: days after which a *noncurrent* version expires; 0 keeps every
    # version. Datasets (RUN/VARIANT/RESULT items, the "original" variant's URI) name the exact
    # source version they measured, so a version may go only after what was made from it:
    # 0 where variants are kept (variants_expire_days 0), else >= variants_expire_days.
    noncurrent_versions_expire_days: int = 0
    # DynamoDB deletion protection on the fixed-name tables. With it, a rolled-back *first*
    # create cannot delete the new table (DeleteTable is refused) and the retry fails on the
    # name: deploy the first time with false, turn it on once the stacks exist (docs/deploy.md).
    table_deletion_protection: bool = False
    # How much work one upload may ask for (layoutlab/ceilings.py: cases, variants, chunk objects,
    # declared bytes, page size against the input); given to ingest, plan and convert as
    # LAYOUTLAB_CEILINGS. Keys not set keep layoutlab's defaults.
    ceilings: Ceilings | None = None

    @property
    def destroy_on_delete(self) -> bool:
        return self.removal_policy == "destroy"

    @property
    def cdk_removal_policy(self):
        """The RemovalPolicy of everything stateful or fixed-name (buckets, tables, log groups,
        queues, the state machine, the alarm key). "retain" is RETAIN_ON_UPDATE_OR_DELETE
        (DeletionPolicy RetainExceptOnCreate): kept on stack delete and on replacement, but
        deleted when the create that made it rolls back — a plain RETAIN would leave the
        fixed names behind and the next attempt would fail with "already exists"."""
        from aws_cdk import RemovalPolicy

        return RemovalPolicy.DESTROY if self.destroy_on_delete else RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE

    def stack_name(self, part: str) -> str:
        return f"layoutlab-{self.name}-{part}"

    @property
    def state_machine_name(self) -> str:
        return f"layoutlab-{self.name}-pipeline"

    @property
    def backfill_state_machine_name(self) -> str:
        return f"layoutlab-{self.name}-backfill"

    # Fixed physical names: IAM statements and other stacks refer to resources by name
    # (no cross-stack exports, and cdk-nag findings with predictable ids).
    def bucket_name(self, kind: str) -> str:
        """S3 names are global: account and region make them unique per deployment."""
        from aws_cdk import Aws

        return f"layoutlab-{self.name}-{kind}-{Aws.ACCOUNT_ID}-{Aws.REGION}"

    def table_name(self, kind: str) -> str:
        return f"layoutlab-{self.name}-{kind}"

    @property
    def cluster_name(self) -> str:
        return f"layoutlab-{self.name}"

    def function_name(self, handler: str) -> str:
        return f"layoutlab-{self.name}-{handler.replace('_', '-')}"

    def task_family(self, command: str) -> str:
        """Fargate task definition family of ``convert`` / ``bench`` (the state machine runs the
        family's latest ACTIVE revision)."""
        return f"layoutlab-{self.name}-{command}"

    def platforms(self) -> dict[str, dict[str, Any]]:
        """Bench platform profiles the plan may use (DESIGN.md §3), derived from the sizes deployed."""
        bench = self.functions["bench"]
        task = self.bench_task
        return {
            f"lambda-{bench.memory_mb}": {"kind": "lambda", "memory_mb": bench.memory_mb},
            task.platform: {"kind": "fargate", "vcpu": task.cpu / 1024, "memory_mb": task.memory_mb},
        }

    def convert_platforms(self) -> dict[str, str]:
        """The platform each converter runs as (its LAYOUTLAB_PLATFORM): the convert function's
        memory and the convert task's size, not the bench profiles. A conversion's memory bound
        and the platform its time is recorded under come from this name."""
        return {"lambda": f"lambda-{self.functions['convert'].memory_mb}", "fargate": self.convert_task.platform}


def _require(mapping: dict[str, Any], key: str, where: str) -> Any:
    if key not in mapping:
        raise ConfigError(f"cdk.json: {where} has no {key!r}")
    return mapping[key]


def _ceilings(raw: Any, where: str) -> Ceilings:
    try:
        return Ceilings.from_mapping(raw, where)
    except UserError as error:
        raise ConfigError(str(error)) from None


def load(context: dict[str, Any], env_name: str | None, *, check: bool = True) -> EnvConfig:
    """Build the EnvConfig of ``env_name`` from the app's context dictionary.

    ``check=False`` leaves out ``validate`` (``layoutlab doctor`` lists its problems one by one)."""
    environments = context.get(ENVIRONMENTS_KEY)
    if not isinstance(environments, dict) or not environments:
        raise ConfigError(f"cdk.json: context has no {ENVIRONMENTS_KEY!r}")
    if not env_name:
        raise ConfigError(f"choose an environment with -c env=NAME (one of: {', '.join(sorted(environments))})")
    if env_name not in environments:
        raise ConfigError(f"unknown environment {env_name!r} (cdk.json has: {', '.join(sorted(environments))})")
    raw = environments[env_name]
    where = f"{ENVIRONMENTS_KEY}.{env_name}"
    removal = _require(raw, "removal_policy", where)
    if removal not in ("destroy", "retain"):
        raise ConfigError(f"cdk.json: {where}.removal_policy must be 'destroy' or 'retain', not {removal!r}")
    functions_raw = _require(raw, "functions", where)
    missing = [name for name in HANDLERS if name not in functions_raw]
    if missing:
        raise ConfigError(f"cdk.json: {where}.functions has no size for {', '.join(missing)}")
    config = EnvConfig(
        name=env_name,
        removal_policy=removal,
        log_retention_days=int(_require(raw, "log_retention_days", where)),
        functions={name: FunctionSize(**functions_raw[name]) for name in HANDLERS},
        convert_task=TaskSize(**_require(raw, "convert_task", where)),
        bench_task=TaskSize(**_require(raw, "bench_task", where)),
        fargate_convert_above_bytes=int(_require(raw, "fargate_convert_above_bytes", where)),
        work_units_above_bytes=int(_require(raw, "work_units_above_bytes", where)),
        max_input_bytes=int(_require(raw, "max_input_bytes", where)),
        max_concurrency={k: int(v) for k, v in _require(raw, "max_concurrency", where).items()},
        tolerated_failure_percentage=int(_require(raw, "tolerated_failure_percentage", where)),
        variants_expire_days=int(raw.get("variants_expire_days", 0)),
        alarm_email=raw.get("alarm_email") or None,
        noncurrent_versions_expire_days=int(raw.get("noncurrent_versions_expire_days", 0)),
        table_deletion_protection=bool(raw.get("table_deletion_protection", False)),
        ceilings=_ceilings(raw.get("ceilings", {}), f"cdk.json: {where}.ceilings"),
    )
    problems = validate(config) if check else []
    if problems:
        raise ConfigError(f"cdk.json: {where}: " + "; ".join(problems))
    return config


def validate(config: EnvConfig) -> list[str]:
    """What in ``config`` cannot work once deployed (empty when all is well); ``load`` refuses those."""
    problems = []
    gib = 2**30
    where_lambda = "functions.convert.ephemeral_storage_mb"
    low, high = LAMBDA_EPHEMERAL_MB_RANGE
    for name, size in config.functions.items():
        if not low <= size.ephemeral_storage_mb <= high:
            problems.append(f"functions.{name}.ephemeral_storage_mb={size.ephemeral_storage_mb} is outside "
                            f"Lambda's {low}..{high} MB")
    lambda_scratch = config.functions["convert"].ephemeral_storage_mb * 2**20
    lambda_needs = SCRATCH_FACTOR * config.fargate_convert_above_bytes
    if lambda_needs > lambda_scratch:
        problems.append(
            f"fargate_convert_above_bytes={config.fargate_convert_above_bytes} lets the convert function get "
            f"inputs of {config.fargate_convert_above_bytes / gib:.2f} GiB, which need "
            f"{SCRATCH_FACTOR} x input = {lambda_needs / gib:.2f} GiB of scratch, but {where_lambda}="
            f"{config.functions['convert'].ephemeral_storage_mb} gives {lambda_scratch / gib:.2f} GiB: lower the "
            f"threshold to <= {int(lambda_scratch / SCRATCH_FACTOR)} bytes or raise the storage (max {high} MB)"
        )
    low, high = FARGATE_EPHEMERAL_GIB_RANGE
    for name, task in (("convert_task", config.convert_task), ("bench_task", config.bench_task)):
        if not low <= task.ephemeral_storage_gib <= high:
            problems.append(f"{name}.ephemeral_storage_gib={task.ephemeral_storage_gib} is outside Fargate's "
                            f"{low}..{high} GiB")
    task_gib = config.convert_task.ephemeral_storage_gib
    fargate_scratch = (task_gib - FARGATE_IMAGE_RESERVE_GIB) * gib
    fargate_needs = SCRATCH_FACTOR * config.max_input_bytes
    if fargate_needs > fargate_scratch:
        problems.append(
            f"max_input_bytes={config.max_input_bytes} lets the convert task get inputs of "
            f"{config.max_input_bytes / gib:.2f} GiB, which need {SCRATCH_FACTOR} x input = "
            f"{fargate_needs / gib:.2f} GiB of scratch, but convert_task.ephemeral_storage_gib={task_gib} leaves "
            f"{fargate_scratch / gib:.2f} GiB after {FARGATE_IMAGE_RESERVE_GIB} GiB for the image: lower "
            f"max_input_bytes to <= {int(fargate_scratch / SCRATCH_FACTOR)} or raise the storage (max {high} GiB)"
        )
    if config.table_deletion_protection and config.destroy_on_delete:
        problems.append("table_deletion_protection=true with removal_policy 'destroy': the stack could not "
                        "delete its tables")
    if config.max_input_bytes < config.fargate_convert_above_bytes:
        problems.append(f"max_input_bytes={config.max_input_bytes} is below fargate_convert_above_bytes="
                        f"{config.fargate_convert_above_bytes}: the convert task would never run")
    keep = config.noncurrent_versions_expire_days
    variants = config.variants_expire_days
    if keep < 0 or (keep and (not variants or keep < variants)):
        problems.append(
            f"noncurrent_versions_expire_days={keep} would expire source versions that datasets still "
            f"point at (variants_expire_days={variants}; 0 keeps): use 0"
            + (f" or >= {variants}" if variants else "")
        )
    problems += _platform_problems(config)
    problems += task_timeout_problems(config)
    return problems


def _platform_problems(config: EnvConfig) -> list[str]:
    from layoutlab.platforms import platform_profile

    problems = []
    names = {**{f"bench {k}": p for k, p in zip(("lambda", "fargate"), config.platforms())},
             **{f"convert {k}": p for k, p in config.convert_platforms().items()}}
    for role, name in names.items():
        try:
            platform_profile(name)
        except UserError as error:
            problems.append(f"{role} platform: {error}")
    return problems


def ecs_task_timeouts(definition: dict | None = None) -> dict[str, int | None]:
    """TimeoutSeconds of every ecs:runTask.sync state in the ASL, by task definition placeholder
    (e.g. ``ConvertTaskDefinitionArn``); None where a state has none."""
    import json

    if definition is None:
        definition = json.loads(ASL_PATH.read_text())
    found: dict[str, list[int | None]] = {}

    def walk(states: dict) -> None:
        for state in states.values():
            if state.get("Resource", "").startswith("arn:aws:states:::ecs:runTask"):
                placeholder = state["Parameters"]["TaskDefinition"].removeprefix("${").removesuffix("}")
                found.setdefault(placeholder, []).append(state.get("TimeoutSeconds"))
            processor = state.get("ItemProcessor") or state.get("Iterator")
            if processor:
                walk(processor["States"])

    walk(definition["States"])
    return {p: None if None in seconds else min(seconds) for p, seconds in found.items()}


def task_timeout_problems(config: EnvConfig, definition: dict | None = None) -> list[str]:
    timeouts = ecs_task_timeouts(definition)
    problems = [f"pipeline.asl.json: the ecs:runTask.sync state running ${{{p}}} has no TimeoutSeconds"
                for p, seconds in timeouts.items() if not seconds]
    convert = timeouts.get("ConvertTaskDefinitionArn")
    if convert:
        needed = FARGATE_START_SECONDS + config.max_input_bytes / FARGATE_CONVERT_MIN_BYTES_PER_S
        if convert < needed:
            problems.append(
                f"pipeline.asl.json: ConvertOnFargate TimeoutSeconds={convert} is too short for max_input_bytes="
                f"{config.max_input_bytes} ({FARGATE_START_SECONDS} s to start + the input at "
                f"{FARGATE_CONVERT_MIN_BYTES_PER_S // 2**20} MiB/s = {needed:.0f} s)"
            )
    bench = timeouts.get("BenchTaskDefinitionArn")
    if bench and bench < config.functions["bench"].timeout_seconds + FARGATE_START_SECONDS:
        problems.append(
            f"pipeline.asl.json: BenchOnFargate TimeoutSeconds={bench} is shorter than functions.bench."
            f"timeout_seconds={config.functions['bench'].timeout_seconds} + {FARGATE_START_SECONDS} s to start"
        )
    return problems
