"""What makes the second deploy, a rolled-back first one and a quiet night safe, read off the
synthesized templates: cross-stack references that code changes cannot move, prod policies
that keep data but let a failed first create clean up, version-pinned datasets whose source
versions stay, and alarms that reach someone."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from layoutlab_cdk.template_text import render  # cdk/ is put on sys.path by conftest.py

REPO_ROOT = Path(__file__).resolve().parents[2]

# What one stack may export for another to import: (resource type, "Ref" or attribute) of a
# value that no code change alters. A Lambda function keeps its (fixed-name, unversioned) ARN
# when its code or layer changes; roles, subnets, security groups, queues, the cluster and the
# state machine are not replaced by a new asset. Not here, on purpose: AWS::ECS::TaskDefinition
# (Ref is the *revision* ARN: a new image makes a new revision), AWS::Lambda::Version and
# ::LayerVersion (a version per code change), anything carrying an asset hash.
STABLE_EXPORTS = {
    ("AWS::Lambda::Function", "Ref"),
    ("AWS::Lambda::Function", "Arn"),
    ("AWS::ECS::Cluster", "Ref"),
    ("AWS::ECS::Cluster", "Arn"),
    ("AWS::IAM::Role", "Arn"),
    ("AWS::EC2::Subnet", "Ref"),
    ("AWS::EC2::SecurityGroup", "GroupId"),
    ("AWS::SQS::Queue", "QueueName"),
    ("AWS::SQS::Queue", "Arn"),
    ("AWS::StepFunctions::StateMachine", "Ref"),
    ("AWS::StepFunctions::StateMachine", "Name"),
}
# Resources that hold data or carry a fixed physical name another deploy would collide with.
KEPT_IN_PROD = {
    "AWS::S3::Bucket", "AWS::DynamoDB::GlobalTable", "AWS::Logs::LogGroup", "AWS::StepFunctions::StateMachine",
    "AWS::SQS::Queue", "AWS::KMS::Key",
}


def stack_templates(synth) -> dict[str, dict]:
    return {stack.stack_name: stack.template for stack in synth.assembly.stacks}


def cross_stack_references(synth) -> list[tuple[str, str, str, dict]]:
    """(importing stack, exporting stack, export name, exporting resource's value) per import."""
    templates = stack_templates(synth)
    exports = {}
    for stack_name, template in templates.items():
        for output in template.get("Outputs", {}).values():
            if "Export" in output:
                exports[render(output["Export"]["Name"])] = (stack_name, output["Value"])
    references = []
    for stack_name, template in templates.items():
        for name in sorted(set(re.findall(r'"Fn::ImportValue": "([^"]+)"', json.dumps(template)))):
            assert name in exports, f"{stack_name} imports {name}, which no stack of the app exports"
            exporter, value = exports[name]
            references.append((stack_name, exporter, name, value))
    return references


@pytest.mark.parametrize("env_fixture", ["dev", "prod"])
def test_no_stack_imports_a_value_that_changes_with_code(env_fixture, request):
    """A strong cross-stack reference freezes the exported value: CloudFormation refuses to
    update an export that another stack imports ("Export ... cannot be updated as it is in use").
    Every exported value another stack imports must therefore be something a code or image
    change cannot alter (STABLE_EXPORTS), given as a plain Ref/GetAtt of one resource."""
    synth = request.getfixturevalue(env_fixture)
    templates = stack_templates(synth)
    references = cross_stack_references(synth)
    assert references, "the stacks share values (function ARNs, subnets, ...): none found"
    unstable = []
    for importer, exporter, name, value in references:
        if set(value) == {"Ref"}:
            logical_id, attribute = value["Ref"], "Ref"
        elif set(value) == {"Fn::GetAtt"}:
            logical_id, attribute = value["Fn::GetAtt"]
        else:
            unstable.append((importer, name, f"an expression, not one resource's attribute: {render(value)}"))
            continue
        resource_type = templates[exporter]["Resources"][logical_id]["Type"]
        if (resource_type, attribute) not in STABLE_EXPORTS:
            unstable.append((importer, name, f"{resource_type} {attribute}"))
    assert unstable == []


def test_the_state_machine_runs_task_families_and_may_run_any_of_their_revisions(prod):
    (machine,) = [m for m in prod.resources("pipeline", "AWS::StepFunctions::StateMachine").values()
                  if m["Properties"]["StateMachineName"] == prod.config.state_machine_name]
    substitutions = machine["Properties"]["DefinitionSubstitutions"]
    assert substitutions["ConvertTaskDefinitionArn"] == prod.config.task_family("convert")
    assert substitutions["BenchTaskDefinitionArn"] == prod.config.task_family("bench")
    families = {t["Properties"]["Family"] for t in prod.resources("compute", "AWS::ECS::TaskDefinition").values()}
    assert families == {prod.config.task_family("convert"), prod.config.task_family("bench")}
    run_task = [
        statement
        for policy in prod.resources("pipeline", "AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "ecs:RunTask"
    ]
    (statement,) = run_task
    resources = sorted(render(r) for r in statement["Resource"])
    assert resources == sorted(
        f"arn:${{AWS::Partition}}:ecs:${{AWS::Region}}:${{AWS::AccountId}}:task-definition/{family}:*"
        for family in families
    )
    assert "ecs:cluster" in json.dumps(statement["Condition"])


def test_prod_keeps_data_but_a_rolled_back_first_create_removes_it(prod):
    """RETAIN_ON_UPDATE_OR_DELETE: DeletionPolicy RetainExceptOnCreate, UpdateReplacePolicy Retain.
    A plain Retain would keep the fixed-name buckets, tables, log groups and state machine of a
    first create that rolled back, and the next attempt would fail with "already exists"."""
    kept = []
    for where, resource in prod.all_resources().items():
        assert resource.get("DeletionPolicy") != "Retain", f"{where}: plain Retain survives a failed first create"
        if resource["Type"] in KEPT_IN_PROD:
            assert resource.get("DeletionPolicy") == "RetainExceptOnCreate", where
            assert resource.get("UpdateReplacePolicy") == "Retain", where
            kept.append(resource["Type"])
    assert set(kept) == KEPT_IN_PROD
    # DeleteTable is refused under deletion protection, which would block exactly that rollback
    for table in prod.resources("data", "AWS::DynamoDB::GlobalTable").values():
        for replica in table["Properties"]["Replicas"]:
            assert replica.get("DeletionProtectionEnabled", False) is prod.config.table_deletion_protection


def test_dev_deletes_everything_with_the_stack(dev):
    for where, resource in dev.all_resources().items():
        if resource["Type"] in KEPT_IN_PROD:
            assert resource.get("DeletionPolicy") == "Delete", where


def ingest_lifecycle(synth) -> list[dict]:
    ingest = next(b for k, b in synth.resources("data", "AWS::S3::Bucket").items() if k.startswith("Ingest"))
    assert ingest["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    return ingest["Properties"].get("LifecycleConfiguration", {}).get("Rules", [])


def test_prod_never_expires_the_source_versions_datasets_point_at(prod):
    assert prod.config.variants_expire_days == 0  # prod keeps variants, results have no TTL
    for rule in ingest_lifecycle(prod):
        assert "NoncurrentVersionExpiration" not in rule and "NoncurrentVersionExpirationInDays" not in rule
        assert "ExpirationInDays" not in rule


def test_dev_expires_old_versions_only_after_the_variants_made_from_them(dev):
    (rule,) = [r for r in ingest_lifecycle(dev) if "NoncurrentVersionExpiration" in r]
    days = rule["NoncurrentVersionExpiration"]["NoncurrentDays"]
    assert days == dev.config.noncurrent_versions_expire_days >= dev.config.variants_expire_days > 0


def alarm_topic(synth) -> tuple[str, dict]:
    ((logical_id, topic),) = synth.resources("observability", "AWS::SNS::Topic").items()
    return logical_id, topic


@pytest.mark.parametrize("env_fixture", ["dev", "prod"])
def test_every_alarm_notifies_the_encrypted_ssl_only_alarm_topic(env_fixture, request):
    synth = request.getfixturevalue(env_fixture)
    topic_id, topic = alarm_topic(synth)
    alarms = synth.resources("observability", "AWS::CloudWatch::Alarm")
    assert len(alarms) >= 5
    for logical_id, alarm in alarms.items():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic_id}], logical_id
        assert alarm["Properties"]["AlarmName"].startswith(f"layoutlab-{synth.env_name}-")
    # encrypted with a key of its own: CloudWatch cannot use the AWS managed alias/aws/sns
    key_ref = topic["Properties"]["KmsMasterKeyId"]
    (key_id,) = [v[0] for k, v in key_ref.items() if k == "Fn::GetAtt"] or [key_ref.get("Ref")]
    key = synth.template("observability")["Resources"][key_id]
    assert key["Type"] == "AWS::KMS::Key" and key["Properties"]["EnableKeyRotation"] is True
    cloudwatch_key_grants = [
        s for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    (grant,) = cloudwatch_key_grants
    assert set(grant["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert f"alarm:layoutlab-{synth.env_name}-*" in render(grant["Condition"]["ArnLike"]["aws:SourceArn"])
    (policy,) = synth.resources("observability", "AWS::SNS::TopicPolicy").values()
    assert policy["Properties"]["Topics"] == [{"Ref": topic_id}]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert any(s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
               for s in statements)
    (publish,) = [s for s in statements if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
    assert publish["Effect"] == "Allow" and publish["Action"] == "sns:Publish"
    # the committed cdk.json sets no address: no subscription, the topic ARN is an output to subscribe to
    assert synth.config.alarm_email is None
    assert synth.resources("observability", "AWS::SNS::Subscription") == {}
    outputs = synth.template("observability")["Outputs"]
    assert any(o["Value"] == {"Ref": topic_id} for o in outputs.values())


@pytest.mark.slow
def test_alarm_email_in_cdk_json_subscribes_that_address(layer_dir, tmp_path):
    from layoutlab_cdk.app_builder import build_app

    context = copy.deepcopy(json.loads((REPO_ROOT / "cdk.json").read_text())["context"])
    context["layoutlab:environments"]["dev"]["alarm_email"] = "oncall@example.org"
    app, stacks = build_app("dev", outdir=str(tmp_path), layer_dir=layer_dir, context=context)
    template = app.synth().get_stack_by_name(stacks.observability.stack_name).template
    resources = template["Resources"]
    (topic_id,) = [k for k, r in resources.items() if r["Type"] == "AWS::SNS::Topic"]
    (subscription,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::SNS::Subscription"]
    assert subscription["Protocol"] == "email"
    assert subscription["Endpoint"] == "oncall@example.org"
    assert subscription["TopicArn"] == {"Ref": topic_id}
