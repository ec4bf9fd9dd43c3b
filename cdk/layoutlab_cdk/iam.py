"""Least-privilege statements, written out: every action named, every resource scoped.

The CDK ``grant_*`` helpers for S3 hand out wildcard actions (``s3:GetObject*``,
``s3:List*``); the pipeline's rule is that nothing it deploys may write under the
ingest bucket's ``incoming/`` prefix, and that is easiest to see (and to test) when
each statement lists its actions.

A resource may end in ``*`` only where AWS names things at run time (object keys
under a prefix, ECS task ids, execution names); ``allow`` then acknowledges cdk-nag's
AwsSolutions-IAM5 finding for exactly that resource, with the reason given.
"""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_iam as iam

from .nag import acknowledge

S3_READ = ["s3:GetObject", "s3:GetObjectVersion"]
S3_WRITE = ["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"]
S3_DELETE = ["s3:DeleteObject"]
DYNAMODB_WRITE = ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:BatchWriteItem"]
DYNAMODB_READ = ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchGetItem", "dynamodb:DescribeTable"]
# Powertools' DynamoDBPersistenceLayer: conditional put, get, update, delete on failure.
DYNAMODB_IDEMPOTENCY = ["dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"]

_PSEUDO = {Aws.PARTITION: "<AWS::Partition>", Aws.REGION: "<AWS::Region>", Aws.ACCOUNT_ID: "<AWS::AccountId>"}


def nag_rendering(resource: str) -> str:
    """How cdk-nag prints a resource built from pseudo parameters (its finding id)."""
    for token, shown in _PSEUDO.items():
        resource = resource.replace(token, shown)
    return resource


def bucket_arn(bucket_name: str) -> str:
    return f"arn:{Aws.PARTITION}:s3:::{bucket_name}"


def objects_arn(bucket_name: str, prefix: str) -> str:
    return f"{bucket_arn(bucket_name)}/{prefix}*"


def table_arn(table_name: str) -> str:
    return f"arn:{Aws.PARTITION}:dynamodb:{Aws.REGION}:{Aws.ACCOUNT_ID}:table/{table_name}"


def allow(
    role: iam.IRole,
    actions: list[str],
    resources: list[str],
    *,
    wildcard_reason: str | None = None,
    conditions: dict | None = None,
) -> iam.PolicyStatement:
    """Add one statement to ``role``; resources ending in ``*`` need ``wildcard_reason``."""
    if any("*" in action for action in actions):
        raise ValueError(f"wildcard action in {actions}: name each action")
    statement = iam.PolicyStatement(actions=actions, resources=resources, conditions=conditions)
    role.add_to_principal_policy(statement)
    for resource in resources:
        if "*" in resource:
            if not wildcard_reason:
                raise ValueError(f"{resource}: a wildcard resource needs a reason")
            acknowledge(role, f"AwsSolutions-IAM5[Resource::{nag_rendering(resource)}]", wildcard_reason)
    return statement


def allow_objects(role: iam.IRole, bucket_name: str, prefixes: list[str], actions: list[str]) -> None:
    allow(
        role,
        actions,
        [objects_arn(bucket_name, p) for p in prefixes],
        wildcard_reason="Objects under one prefix of one bucket: keys are created at run time, so S3 "
        f"object permissions are scoped by prefix ({', '.join(prefixes)}).",
    )


def allow_list(role: iam.IRole, bucket_name: str, prefixes: list[str]) -> None:
    """ListBucket limited to some prefixes (without it a missing key reads as 403, not 404)."""
    allow(
        role,
        ["s3:ListBucket"],
        [bucket_arn(bucket_name)],
        conditions={"StringLike": {"s3:prefix": [f"{p}*" for p in prefixes]}},
    )
