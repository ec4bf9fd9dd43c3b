"""Least privilege and bucket policies, asserted on the synthesized templates (issue #8).

Complements test_infra_stacks.py (no wildcard actions, nothing may write to the
ingest bucket, the data stack's buckets private and SSL-only): here every bucket of
every stack, statements that grant to everyone, NotAction/NotResource, and the
few actions allowed on ``Resource: "*"`` because AWS offers no resource-level
permission for them.
"""

from __future__ import annotations

import pytest
from layoutlab_cdk.template_text import render  # cdk/ is put on sys.path by conftest.py



def _stacks_helpers():
    """test_infra_stacks.py's statement helpers (pytest's importlib mode cannot import a test module by name)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("layoutlab_infra_stacks_tests",
                                                  Path(__file__).with_name("test_infra_stacks.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_helpers = _stacks_helpers()
as_list, auto_delete_statement, policy_statements = (
    _helpers.as_list, _helpers.auto_delete_statement, _helpers.policy_statements)

# Actions that AWS documents as supporting no resource-level permissions: "*" is the only
# resource they accept (Service Authorization Reference, "Resource types" column empty).
ACTIONS_WITHOUT_RESOURCE_LEVEL = {
    "cloudwatch:PutMetricData",
    "ecr:GetAuthorizationToken",
    "xray:PutTraceSegments", "xray:PutTelemetryRecords", "xray:GetSamplingRules", "xray:GetSamplingTargets",
    "logs:CreateLogDelivery", "logs:GetLogDelivery", "logs:UpdateLogDelivery", "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries", "logs:PutResourcePolicy", "logs:DescribeResourcePolicies", "logs:DescribeLogGroups",
}


def everyone(principal) -> bool:
    return principal == "*" or (isinstance(principal, dict) and "*" in as_list(principal.get("AWS", [])))


@pytest.mark.parametrize("env_fixture", ["dev", "prod"])
def test_no_statement_allows_everyone_or_uses_not_action(env_fixture, request):
    synth = request.getfixturevalue(env_fixture)
    offenders = []
    for where, statement in policy_statements(synth):
        if statement["Effect"] != "Allow":
            continue
        if everyone(statement.get("Principal")):
            offenders.append((where, "Allow to everyone", statement))
        if "NotAction" in statement or "NotResource" in statement or "NotPrincipal" in statement:
            offenders.append((where, "NotAction/NotResource/NotPrincipal in an Allow", statement))
    assert offenders == []


@pytest.mark.parametrize("env_fixture", ["dev", "prod"])
def test_resource_star_only_for_actions_that_take_no_resource(env_fixture, request):
    synth = request.getfixturevalue(env_fixture)
    offenders = []
    seen = 0
    for where, statement in policy_statements(synth):
        if statement["Effect"] != "Allow" or auto_delete_statement(synth, statement):
            continue
        if "*" not in as_list(statement.get("Resource", [])):
            continue
        seen += 1
        offenders += [(where, a) for a in as_list(statement["Action"])
                      if a not in ACTIONS_WITHOUT_RESOURCE_LEVEL]
    assert offenders == [], offenders
    assert seen >= 1  # the check is live: some statements do need "*" (X-Ray, metrics, ECR login)


def test_every_bucket_of_every_stack_is_private_and_refuses_plain_http(dev):
    resources = dev.all_resources()
    buckets = {where: r for where, r in resources.items() if r["Type"] == "AWS::S3::Bucket"}
    assert len(buckets) >= 3  # ingest, outputs, access logs
    denied: dict[str, set[str]] = {}
    for where, resource in resources.items():
        if resource["Type"] != "AWS::S3::BucketPolicy":
            continue
        bucket = where.split("/")[0] + "/" + resource["Properties"]["Bucket"]["Ref"]
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            if (statement["Effect"] == "Deny" and everyone(statement.get("Principal"))
                    and statement.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
                    and "s3:*" in as_list(statement["Action"])):
                denied.setdefault(bucket, set()).update(render(r) for r in as_list(statement["Resource"]))
    for where, bucket in buckets.items():
        assert bucket["Properties"]["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True}, where
        covered = denied.get(where, set())
        # both the bucket (ListBucket, ...) and its objects (GetObject, ...) refuse plain HTTP
        assert any(not r.endswith("/*") for r in covered) and any(r.endswith("/*") for r in covered), (where, covered)


def test_the_ingest_bucket_policy_grants_nothing(dev):
    """Writes and reads of uploads come only from the roles test_infra_stacks.py checks; the
    bucket's own policy adds no Allow (in prod; dev's auto-delete helper is the one exception)."""
    ingest_buckets = [where for where, r in dev.all_resources().items()
                      if r["Type"] == "AWS::S3::Bucket" and "-ingest-" in render(r["Properties"].get("BucketName", ""))]
    assert len(ingest_buckets) == 1
    [ingest] = ingest_buckets
    for where, resource in dev.all_resources().items():
        if resource["Type"] != "AWS::S3::BucketPolicy":
            continue
        if where.split("/")[0] + "/" + resource["Properties"]["Bucket"]["Ref"] != ingest:
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Allow":
                assert auto_delete_statement(dev, statement), statement
