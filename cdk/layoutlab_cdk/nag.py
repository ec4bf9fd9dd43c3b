"""Acknowledging a cdk-nag finding always takes a reason: this is the one way to do it."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule_id: str, reason: str) -> None:
    """Acknowledge ``rule_id`` (e.g. ``AwsSolutions-IAM5[Resource::*]``) on ``scope`` and below."""
    if len(reason.split()) < 5:
        raise ValueError(f"acknowledging {rule_id} needs a real reason, not {reason!r}")
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=rule_id, reason=reason))
