"""Platform profiles: where a benchmark case runs and with what resources.

A profile name is what a result records in ``platform``:

- ``lambda-<MB>``: AWS Lambda with <MB> of memory (128..10240). Lambda gives CPU in
  proportion to memory: one full vCPU at 1769 MB, up to 6 vCPU at 10240 MB.
- ``fargate-<vcpu>-<MB>``: an ECS Fargate task (e.g. ``fargate-1-2048``,
  ``fargate-0.25-512``); only the CPU/memory pairs Fargate accepts.
- ``local-lambda`` / ``local-fargate``: the same tasks run locally as a fresh process
  pinned to one core with the memory limit of ``lambda-1769`` / ``fargate-1-2048``.

Benchmarks are single-core by design (one process, one CPU): ``vcpu`` is what the
platform would offer, the local runner always pins the measured process to one core.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from layoutlab.errors import UserError

LAMBDA_MB_PER_VCPU = 1769  # AWS: "at 1,769 MB, a function has the equivalent of one vCPU"
LAMBDA_MEMORY_RANGE = (128, 10240)

# Fargate task sizes (AWS ECS docs, "Task CPU and memory"): vCPU -> allowed memory in MB.
FARGATE_MEMORY_MB = {
    0.25: [512, 1024, 2048],
    0.5: list(range(1024, 4096 + 1, 1024)),
    1.0: list(range(2048, 8192 + 1, 1024)),
    2.0: list(range(4096, 16384 + 1, 1024)),
    4.0: list(range(8192, 30720 + 1, 1024)),
    8.0: list(range(16384, 61440 + 1, 4096)),
    16.0: list(range(32768, 122880 + 1, 8192)),
}

LOCAL_ALIASES = {"local-lambda": "lambda-1769", "local-fargate": "fargate-1-2048"}


@dataclass(frozen=True)
class Platform:
    name: str  # as given (local-lambda, lambda-3008, ...)
    kind: str  # "lambda" | "fargate"
    memory_mb: int
    vcpu: float
    local: bool  # run by the local runner (isolated process) rather than on AWS

    def to_dict(self) -> dict:
        return asdict(self)


def _lambda(name: str, memory_mb: int, local: bool) -> Platform:
    low, high = LAMBDA_MEMORY_RANGE
    if not low <= memory_mb <= high:
        raise UserError(f"platform {name!r}: Lambda memory must be {low}..{high} MB, got {memory_mb}")
    vcpu = round(min(6.0, memory_mb / LAMBDA_MB_PER_VCPU), 2)
    return Platform(name, "lambda", memory_mb, vcpu, local)


def _fargate(name: str, vcpu: float, memory_mb: int, local: bool) -> Platform:
    allowed = FARGATE_MEMORY_MB.get(vcpu)
    if allowed is None:
        raise UserError(f"platform {name!r}: Fargate vCPU must be one of {sorted(FARGATE_MEMORY_MB)}, got {vcpu:g}")
    if memory_mb not in allowed:
        raise UserError(
            f"platform {name!r}: Fargate with {vcpu:g} vCPU takes {allowed[0]}..{allowed[-1]} MB "
            f"in steps of {allowed[1] - allowed[0] if len(allowed) > 1 else 0} MB, got {memory_mb}"
        )
    return Platform(name, "fargate", memory_mb, vcpu, local)


def platform_profile(name: str) -> Platform:
    """The profile for ``name``; a ``UserError`` explains what names are accepted."""
    text = str(name).strip().lower()
    local = text in LOCAL_ALIASES
    spec = LOCAL_ALIASES.get(text, text)
    if m := re.fullmatch(r"lambda-(\d+)", spec):
        profile = _lambda(spec, int(m.group(1)), local)
    elif m := re.fullmatch(r"fargate-(\d+(?:\.\d+)?)-(\d+)", spec):
        profile = _fargate(spec, float(m.group(1)), int(m.group(2)), local)
    else:
        raise UserError(
            f"unknown platform {name!r}: use local-lambda, local-fargate, lambda-<MB> or fargate-<vcpu>-<MB>"
        )
    return Platform(text, profile.kind, profile.memory_mb, profile.vcpu, local)
