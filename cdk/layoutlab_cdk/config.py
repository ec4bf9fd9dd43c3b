"""Per-environment settings, read once from cdk.json's context and validated.

``cdk deploy -c env=NAME`` picks ``context["layoutlab:environments"][NAME]``;
every number that differs between environments (sizes, retention, removal
policies) lives there, not in the stacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
ASL_PATH = REPO_ROOT / "stepfunctions" / "pipeline.asl.json"
FUNCTIONS_DIR = REPO_ROOT / "functions"
DOCKERFILE = "cdk/container/Dockerfile"  # relative to REPO_ROOT, the image's build context

ENVIRONMENTS_KEY = "layoutlab:environments"
PYTHON_RUNTIME = "3.11"  # layers/build_layer.py builds wheels for this interpreter

# The S3 → ingest trigger watches this prefix of the ingest bucket only.
INGEST_PREFIX = "incoming/"
# User-supplied plans (object metadata names one); never triggers the pipeline.
PLANS_PREFIX = "plans/"
# Everything the pipeline writes goes to the *outputs* bucket under these prefixes.
OUTPUT_PREFIXES = {
    "variants": "variants/",  # converted layouts (paged HDF5, Zarr v3)
    "runs": "runs/",  # per-dataset case lists and work-unit lists written by plan
    "map_runs": "map-runs/",  # Distributed Map ResultWriter output (see pipeline.asl.json)
    "summaries": "summaries/",  # JSON summary per dataset
    "reports": "reports/",  # HTML/PNG report
}
# Names fixed by the contract in stepfunctions/README.md.
TASK_CONTAINER_NAME = "layoutlab"
TASK_PAYLOAD_ENV = "LAYOUTLAB_TASK_PAYLOAD"
HANDLERS = ("ingest", "plan", "convert", "bench", "summarize", "record_failure")


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
    alarm_email: str | None

    @property
    def destroy_on_delete(self) -> bool:
        return self.removal_policy == "destroy"

    def stack_name(self, part: str) -> str:
        return f"layoutlab-{self.name}-{part}"

    @property
    def state_machine_name(self) -> str:
        return f"layoutlab-{self.name}-pipeline"

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

    def platforms(self) -> dict[str, dict[str, Any]]:
        """Platform profiles the plan may use (DESIGN.md §3), derived from the sizes deployed."""
        bench = self.functions["bench"]
        task = self.bench_task
        return {
            f"lambda-{bench.memory_mb}": {"kind": "lambda", "memory_mb": bench.memory_mb},
            f"fargate-{task.cpu // 1024}-{task.memory_mb}": {
                "kind": "fargate",
                "vcpu": task.cpu / 1024,
                "memory_mb": task.memory_mb,
            },
        }


def _require(mapping: dict[str, Any], key: str, where: str) -> Any:
    if key not in mapping:
        raise ConfigError(f"cdk.json: {where} has no {key!r}")
    return mapping[key]


def load(context: dict[str, Any], env_name: str | None) -> EnvConfig:
    """Build the EnvConfig of ``env_name`` from the app's context dictionary."""
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
    return EnvConfig(
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
    )
