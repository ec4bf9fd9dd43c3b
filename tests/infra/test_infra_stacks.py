"""What `cdk deploy -c env=NAME` would create, checked on the synthesized templates.

The app is synthesized once per session per environment (tests/infra/conftest.py);
each test reads templates from that cloud assembly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from layoutlab_cdk.template_text import render  # cdk/ is put on sys.path by conftest.py

from layoutlab import observability

REPO_ROOT = Path(__file__).resolve().parents[2]
ASL_TEXT = (REPO_ROOT / "stepfunctions" / "pipeline.asl.json").read_text()
BACKFILL_ASL_TEXT = (REPO_ROOT / "stepfunctions" / "backfill.asl.json").read_text()


def state_machine(synthesized, name: str) -> dict:
    """The pipeline stack's state machine called ``name`` (the pipeline's, or the backfill's)."""
    machines = [m for m in synthesized.resources("pipeline", "AWS::StepFunctions::StateMachine").values()
                if m["Properties"]["StateMachineName"] == name]
    assert len(machines) == 1, name
    return machines[0]
S3_WRITE_ACTIONS = {"s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:AbortMultipartUpload",
                    "s3:PutObjectAcl", "s3:PutObjectTagging", "s3:RestoreObject", "s3:ReplicateObject"}


def policy_statements(synth):
    """(where, statement) for every IAM statement: identity policies, inline role policies,
    bucket and queue policies, topic policies."""
    for where, resource in synth.all_resources().items():
        properties = resource.get("Properties", {})
        documents = []
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            documents.append(properties["PolicyDocument"])
        if resource["Type"] == "AWS::IAM::Role":
            documents += [p["PolicyDocument"] for p in properties.get("Policies", [])]
        if resource["Type"] in ("AWS::S3::BucketPolicy", "AWS::SQS::QueuePolicy", "AWS::SNS::TopicPolicy"):
            documents.append(properties["PolicyDocument"])
        for document in documents:
            for statement in document["Statement"]:
                yield where, statement


def as_list(value):
    return value if isinstance(value, list) else [value]


def auto_delete_statement(synth, statement) -> bool:
    """CDK's own bucket-emptying custom resource (dev only): allowed its wildcard actions."""
    principal = render(statement.get("Principal", {}))
    return synth.config.destroy_on_delete and "CustomS3AutoDeleteObjectsCustomResourceProviderRole" in principal


def test_four_stacks_named_by_environment(dev, prod):
    for synth in (dev, prod):
        names = sorted(s.stack_name for s in synth.assembly.stacks)
        assert names == sorted(f"layoutlab-{synth.env_name}-{p}" for p in ("compute", "data", "observability", "pipeline"))


def test_buckets_are_private_encrypted_ssl_only_and_ingest_is_versioned(dev):
    buckets = dev.resources("data", "AWS::S3::Bucket")
    assert len(buckets) == 3  # ingest, outputs, access logs
    for logical_id, bucket in buckets.items():
        props = bucket["Properties"]
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True
        }, logical_id
        rules = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rules[0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms"), logical_id
    policies = dev.resources("data", "AWS::S3::BucketPolicy")
    ssl_denied = set()
    for policy in policies.values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny" and statement.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}:
                ssl_denied.add(policy["Properties"]["Bucket"]["Ref"])
    assert ssl_denied == set(buckets)
    ingest = next(b for k, b in buckets.items() if k.startswith("Ingest"))
    assert ingest["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    assert ingest["Properties"]["NotificationConfiguration"] == {"EventBridgeConfiguration": {"EventBridgeEnabled": True}}
    outputs = next(b for k, b in buckets.items() if k.startswith("Outputs"))
    assert render(outputs["Properties"]["BucketName"]) != render(ingest["Properties"]["BucketName"])


def test_results_table_is_single_table_with_pattern_index_and_tables_have_pitr(dev):
    tables = {k: t["Properties"] for k, t in dev.resources("data", "AWS::DynamoDB::GlobalTable").items()}
    assert len(tables) == 2
    results = next(t for k, t in tables.items() if k.startswith("Results"))
    assert results["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
    (index,) = results["GlobalSecondaryIndexes"]
    assert index["IndexName"] == "by-pattern"
    assert [k["AttributeName"] for k in index["KeySchema"]] == ["pattern_pk", "pattern_sk"]
    idempotency = next(t for k, t in tables.items() if k.startswith("Idempotency"))
    assert idempotency["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}
    for table in tables.values():
        for replica in table["Replicas"]:
            assert replica["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True


@pytest.mark.parametrize("env_fixture", ["dev", "prod"])
def test_functions_have_explicit_handler_runtime_arch_memory_timeout(env_fixture, request):
    from layoutlab_cdk.config import PYTHON_RUNTIME

    # Amazon Linux 2023 runtimes (glibc 2.34): python3.11 runs on Amazon Linux 2 (glibc 2.26),
    # where the layer's numpy and h5py cannot load (DESIGN.md §7).
    assert tuple(map(int, PYTHON_RUNTIME.split("."))) >= (3, 12)
    synth = request.getfixturevalue(env_fixture)
    functions = {
        f["Properties"]["Handler"]: f["Properties"] for f in synth.resources("compute", "AWS::Lambda::Function").values()
    }
    expected = {f"layoutlab.handlers.{name}.handler" for name in synth.config.functions}
    assert expected <= set(functions)
    for name, size in synth.config.functions.items():
        props = functions[f"layoutlab.handlers.{name}.handler"]
        assert props["Runtime"] == f"python{PYTHON_RUNTIME}"
        assert props["Architectures"] == ["x86_64"]
        assert props["MemorySize"] == size.memory_mb
        assert props["Timeout"] == size.timeout_seconds
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert len(props["Layers"]) == 1
        env = props["Environment"]["Variables"]
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == observability.NAMESPACE
        assert env["POWERTOOLS_SERVICE_NAME"] == observability.SERVICE
    plan_env = functions["layoutlab.handlers.plan.handler"]["Environment"]["Variables"]
    platforms = json.loads(plan_env["LAYOUTLAB_PLATFORMS"])
    assert {p["kind"] for p in platforms.values()} == {"lambda", "fargate"}
    bench_env = functions["layoutlab.handlers.bench.handler"]["Environment"]["Variables"]
    assert bench_env["LAYOUTLAB_PLATFORM"] in platforms
    (layer,) = synth.resources("compute", "AWS::Lambda::LayerVersion").values()
    assert layer["Properties"]["CompatibleRuntimes"] == [f"python{PYTHON_RUNTIME}"]


@pytest.mark.parametrize("env_fixture", ["dev", "prod"])
def test_converters_run_as_the_convert_platforms_not_the_bench_ones(env_fixture, request):
    """A conversion's memory bound (rechunk max_mem) and the platform its VARIANT item and
    metrics name come from LAYOUTLAB_PLATFORM: the convert function's memory and the convert
    task's size, each a name layoutlab.platforms accepts."""
    from layoutlab.platforms import platform_profile

    synth = request.getfixturevalue(env_fixture)
    config = synth.config
    functions = {f["Properties"]["Handler"]: f["Properties"]
                 for f in synth.resources("compute", "AWS::Lambda::Function").values() if "Handler" in f["Properties"]}
    convert_env = functions["layoutlab.handlers.convert.handler"]["Environment"]["Variables"]
    lambda_profile = platform_profile(convert_env["LAYOUTLAB_PLATFORM"])
    assert (lambda_profile.kind, lambda_profile.memory_mb) == ("lambda", config.functions["convert"].memory_mb)
    tasks = {t["Properties"]["Family"]: t["Properties"] for t in synth.resources("compute", "AWS::ECS::TaskDefinition").values()}
    for command, size in (("convert", config.convert_task), ("bench", config.bench_task)):
        task = tasks[config.task_family(command)]
        (container,) = task["ContainerDefinitions"]
        platform = {e["Name"]: e["Value"] for e in container["Environment"]}["LAYOUTLAB_PLATFORM"]
        profile = platform_profile(platform)
        assert (profile.kind, profile.vcpu, profile.memory_mb) == ("fargate", size.cpu / 1024, size.memory_mb)
        assert (profile.vcpu * 1024, profile.memory_mb) == (int(task["Cpu"]), int(task["Memory"]))


def test_fargate_task_definitions_run_the_same_entry_points(dev):
    tasks = {t["Properties"]["Family"]: t["Properties"] for t in dev.resources("compute", "AWS::ECS::TaskDefinition").values()}
    assert set(tasks) == {"layoutlab-dev-convert", "layoutlab-dev-bench"}
    for command, size in (("convert", dev.config.convert_task), ("bench", dev.config.bench_task)):
        task = tasks[f"layoutlab-dev-{command}"]
        assert task["RequiresCompatibilities"] == ["FARGATE"]
        assert (int(task["Cpu"]), int(task["Memory"])) == (size.cpu, size.memory_mb)
        (container,) = task["ContainerDefinitions"]
        assert container["Name"] == "layoutlab"
        assert container["Command"] == ["python", "-m", "layoutlab.handlers.task", command]
        assert container["LogConfiguration"]["LogDriver"] == "awslogs"
    (cluster,) = dev.resources("compute", "AWS::ECS::Cluster").values()
    assert {"Name": "containerInsights", "Value": "enhanced"} in cluster["Properties"]["ClusterSettings"] or {
        "Name": "containerInsights", "Value": "enabled"} in cluster["Properties"]["ClusterSettings"]
    # what the image holds (the two deployment artifacts on Lambda's base image): tests/infra/test_artifacts.py


def test_deployed_definition_is_the_asl_file_with_every_placeholder_substituted(dev):
    machine = state_machine(dev, "layoutlab-dev-pipeline")
    props = machine["Properties"]
    assert props["DefinitionString"] == ASL_TEXT  # verbatim: substitution happens in CloudFormation
    placeholders = set(re.findall(r"\$\{([A-Za-z0-9_]+)\}", ASL_TEXT))
    substitutions = props["DefinitionSubstitutions"]
    assert set(substitutions) == placeholders
    rendered = {k: render(v) for k, v in substitutions.items()}
    for name in ("PlanFunctionArn", "ConvertFunctionArn", "BenchFunctionArn", "SummarizeFunctionArn",
                 "RecordFailureFunctionArn", "ClusterArn", "TaskSubnet1", "TaskSubnet2", "TaskSecurityGroup"):
        assert rendered[name].startswith("${Import:layoutlab-dev-compute:"), (name, rendered[name])
    # task definitions by family (RunTask takes the latest ACTIVE revision): no revision ARN crosses stacks
    assert rendered["ConvertTaskDefinitionArn"] == "layoutlab-dev-convert"
    assert rendered["BenchTaskDefinitionArn"] == "layoutlab-dev-bench"
    assert rendered["OutputsBucketName"] == "layoutlab-dev-outputs-${AWS::AccountId}-${AWS::Region}"
    assert rendered["TaskContainerName"] == "layoutlab"
    assert props["StateMachineName"] == "layoutlab-dev-pipeline"
    assert props["LoggingConfiguration"]["Level"] == "ALL"
    assert props["LoggingConfiguration"]["IncludeExecutionData"] is True
    assert props["TracingConfiguration"] == {"Enabled": True}


def test_the_backfill_state_machine_is_its_asl_file_and_may_list_uploads_and_invoke_only_the_backfill_function(dev):
    machine = state_machine(dev, "layoutlab-dev-backfill")
    props = machine["Properties"]
    assert props["DefinitionString"] == BACKFILL_ASL_TEXT
    rendered = {k: render(v) for k, v in props["DefinitionSubstitutions"].items()}
    assert set(rendered) == set(re.findall(r"\$\{([A-Za-z0-9_]+)\}", BACKFILL_ASL_TEXT)) == {
        "BackfillFunctionArn", "OutputsBucketName"}
    assert rendered["BackfillFunctionArn"].startswith("${Import:layoutlab-dev-compute:")
    role_id = props["RoleArn"]["Fn::GetAtt"][0]
    statements = [st for policy in dev.resources("pipeline", "AWS::IAM::Policy").values()
                  if {"Ref": role_id} in policy["Properties"]["Roles"]
                  for st in policy["Properties"]["PolicyDocument"]["Statement"]]
    actions = {a for st in statements for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])}
    assert "lambda:InvokeFunction" in actions and "s3:ListBucket" in actions
    assert not {a for a in actions if a.startswith("s3:Put")} - {"s3:PutObject"}
    listed = [st for st in statements if st["Action"] == "s3:ListBucket" or "s3:ListBucket" in st["Action"]]
    assert any(st.get("Condition", {}).get("StringLike", {}).get("s3:prefix") == ["incoming/*"] for st in listed)


def test_trigger_watches_incoming_only_and_is_disjoint_from_every_output(dev):
    from layoutlab_cdk.config import INGEST_PREFIX, OUTPUT_PREFIXES

    (rule,) = dev.resources("pipeline", "AWS::Events::Rule").values()
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["source"] == ["aws.s3"] and pattern["detail-type"] == ["Object Created"]
    assert [render(n) for n in pattern["detail"]["bucket"]["name"]] == [
        "layoutlab-dev-ingest-${AWS::AccountId}-${AWS::Region}"
    ]
    assert pattern["detail"]["object"]["key"] == [{"prefix": INGEST_PREFIX}]
    (target,) = rule["Properties"]["Targets"]
    assert "IngestQueue" in render(target["Arn"])  # the rule queues; the queue's event source invokes ingest
    assert "DeadLetterConfig" in target and target["RetryPolicy"]["MaximumRetryAttempts"] >= 1
    for prefix in OUTPUT_PREFIXES.values():
        assert not prefix.startswith(INGEST_PREFIX) and not INGEST_PREFIX.startswith(prefix)
    # Ingest's own failures (after Lambda's async retries) go to a queue.
    (invoke_config,) = dev.resources("compute", "AWS::Lambda::EventInvokeConfig").values()
    assert "IngestFailures" in render(invoke_config["Properties"]["DestinationConfig"]["OnFailure"]["Destination"])


def test_uploads_reach_ingest_through_a_queue_with_a_dead_letter_queue_and_partial_batch_failures(dev):
    """S3 → EventBridge rule → SQS (+ DLQ, visibility timeout over ingest's timeout) → ingest, in batches, the
    records ingest could not start reported back one by one (issue 35: arrivals smoothed)."""
    queues = dev.resources("pipeline", "AWS::SQS::Queue")
    [(queue_id, queue)] = [(k, q) for k, q in queues.items() if k.startswith("IngestQueue")]
    [dlq_id] = [k for k in queues if k.startswith("TriggerFailures")]
    redrive = queue["Properties"]["RedrivePolicy"]
    assert dlq_id in render(redrive["deadLetterTargetArn"]) and redrive["maxReceiveCount"] >= 10
    ingest_timeout = dev.config.functions["ingest"].timeout_seconds
    assert queue["Properties"]["VisibilityTimeout"] >= 6 * ingest_timeout
    (rule,) = dev.resources("pipeline", "AWS::Events::Rule").values()
    assert [queue_id] == [t["Arn"]["Fn::GetAtt"][0] for t in rule["Properties"]["Targets"]]
    (mapping,) = dev.resources("pipeline", "AWS::Lambda::EventSourceMapping").values()
    props = mapping["Properties"]
    assert queue_id in render(props["EventSourceArn"]) and "IngestFunction" in render(props["FunctionName"])
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["BatchSize"] > 1 and props["MaximumBatchingWindowInSeconds"] >= 1
    assert props["ScalingConfig"]["MaximumConcurrency"] >= 2
    # EventBridge may send to the queue (its rule only), ingest's role may consume it
    statements = [st for _, st in policy_statements(dev)]
    sends = [st for st in statements if "sqs:SendMessage" in as_list(st["Action"]) and st["Effect"] == "Allow"
             and queue_id in render(st["Resource"])]
    assert sends and all(render(st["Principal"]) == render({"Service": "events.amazonaws.com"}) for st in sends)
    consumes = [st for st in statements if "sqs:ReceiveMessage" in as_list(st["Action"])
                and render(queue["Properties"]["QueueName"]) in render(st["Resource"])]
    assert consumes and {"sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl",
                         "sqs:ChangeMessageVisibility"} <= set(as_list(consumes[0]["Action"]))  # (a refused upload's delay)


@pytest.mark.parametrize("env_fixture", ["dev", "prod"])
def test_no_wildcard_actions_in_any_allow_statement(env_fixture, request):
    synth = request.getfixturevalue(env_fixture)
    offenders = []
    for where, statement in policy_statements(synth):
        if statement["Effect"] != "Allow" or auto_delete_statement(synth, statement):
            continue  # Deny s3:* / sqs:* without TLS is the SSL enforcement, not a grant
        offenders += [(where, a) for a in as_list(statement.get("Action", [])) if "*" in a]
    assert offenders == []
    if not synth.config.destroy_on_delete:  # prod: no exception at all
        assert not any("AutoDelete" in where for where, _ in policy_statements(synth))


@pytest.mark.parametrize("env_fixture", ["dev", "prod"])
def test_nothing_deployed_may_write_to_the_ingest_bucket(env_fixture, request):
    """Outputs never go under incoming/: no role is even allowed to write to the ingest bucket."""
    from layoutlab_cdk.config import OUTPUT_PREFIXES

    synth = request.getfixturevalue(env_fixture)
    ingest = f"layoutlab-{synth.env_name}-ingest-"
    outputs = f"arn:${{AWS::Partition}}:s3:::layoutlab-{synth.env_name}-outputs-${{AWS::AccountId}}-${{AWS::Region}}/"
    writes = 0
    for where, statement in policy_statements(synth):
        if statement["Effect"] != "Allow" or auto_delete_statement(synth, statement):
            continue
        if not S3_WRITE_ACTIONS & set(as_list(statement["Action"])):
            continue
        principal = render(statement.get("Principal", {}))
        if "logging.s3.amazonaws.com" in principal:  # server access logs into the log bucket
            continue
        for resource in map(render, as_list(statement["Resource"])):
            writes += 1
            assert ingest not in resource, f"{where} may write {resource}"
            assert resource.startswith(outputs), f"{where} writes outside the outputs bucket: {resource}"
            assert any(resource == f"{outputs}{prefix}*" for prefix in OUTPUT_PREFIXES.values()), resource
    assert writes >= 5  # plan, convert (Lambda + task), summarize, state machine


def test_dashboard_and_alarms_use_the_shared_metric_names(dev):
    (dashboard,) = dev.resources("observability", "AWS::CloudWatch::Dashboard").values()
    body = render(dashboard["Properties"]["DashboardBody"])
    for spec in observability.ALL_METRICS:
        assert f'"{spec.name}"' in body or f'\\"{spec.name}\\"' in body, spec.name
    assert observability.BENCH_WALL_TIME.search_expression("Average", 300).replace('"', '\\"') in body
    for word in ("ExecutionsFailed", "Duration", "Errors", "Throttles", "TaskCount"):
        assert word in body
    alarms = dev.resources("observability", "AWS::CloudWatch::Alarm")
    assert len(alarms) >= 5
    failures_alarm = next(a for k, a in alarms.items() if k.startswith("PipelineFailuresRecorded"))
    stages = {
        d["Value"]
        for m in failures_alarm["Properties"]["Metrics"]
        if "MetricStat" in m
        for d in m["MetricStat"]["Metric"]["Dimensions"]
        if d["Name"] == observability.Dimension.STAGE
    }
    assert stages == set(observability.STAGES)
    for alarm in alarms.values():
        assert alarm["Properties"]["AlarmActions"], "every alarm notifies the alarm topic"


def test_dev_and_prod_differ_in_sizes_retention_and_removal(dev, prod):
    def retention(synth):
        groups = synth.resources("compute", "AWS::Logs::LogGroup")
        return {g["Properties"]["RetentionInDays"] for g in groups.values()}

    assert retention(dev) == {dev.config.log_retention_days}
    assert retention(prod) == {prod.config.log_retention_days}
    assert dev.config.log_retention_days < prod.config.log_retention_days

    def deletion_policies(synth, cfn_type):
        return {r.get("DeletionPolicy") for r in synth.resources("data", cfn_type).values()}

    assert deletion_policies(dev, "AWS::S3::Bucket") == {"Delete"}
    assert deletion_policies(prod, "AWS::S3::Bucket") == {"RetainExceptOnCreate"}
    assert deletion_policies(prod, "AWS::DynamoDB::GlobalTable") == {"RetainExceptOnCreate"}
    assert dev.config.functions["convert"].memory_mb < prod.config.functions["convert"].memory_mb
    assert dev.config.convert_task.cpu < prod.config.convert_task.cpu


def test_asset_staging_keeps_the_image_context_small(dev):
    """The Fargate image's build context is the repo root: only what the Dockerfile copies goes in
    (the two built artifacts and the Dockerfile's directory), never .venv, sources or cdk.out."""
    manifest = json.loads(Path(dev.outdir, "layoutlab-dev-compute.assets.json").read_text())
    (image,) = manifest["dockerImages"].values()
    context = Path(dev.outdir, image["source"]["directory"])
    assert sorted(p.name for p in context.iterdir()) == ["cdk", "layers"]
    assert sorted(p.name for p in (context / "cdk").iterdir()) == ["container"]
    assert sorted(p.name for p in (context / "layers").iterdir()) == ["build"]
    assert sorted(p.name for p in (context / "layers" / "build").iterdir()) == ["dependencies", "function"]
    assert sorted(p.name for p in (context / "layers" / "build" / "dependencies").iterdir()) == ["python"]
    assert not list(context.rglob("__pycache__"))


@pytest.mark.parametrize("env_fixture", ["dev", "prod"])
def test_every_function_and_task_that_estimates_work_gets_the_environments_ceilings(env_fixture, request):
    """cdk.json's ceilings reach ingest (plans), plan (objects per variant) and convert, function and task
    (declared shapes), as the JSON layoutlab.ceilings reads; dev and prod differ."""
    from layoutlab.ceilings import Ceilings

    synth = request.getfixturevalue(env_fixture)
    functions = {f["Properties"]["Handler"]: f["Properties"]
                 for f in synth.resources("compute", "AWS::Lambda::Function").values() if "Handler" in f["Properties"]}
    raw = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]["layoutlab:environments"][synth.config.name]
    expected = Ceilings.from_mapping(raw["ceilings"])
    assert synth.config.ceilings == expected
    for name in ("ingest", "plan", "convert"):
        env = functions[f"layoutlab.handlers.{name}.handler"]["Environment"]["Variables"]
        assert Ceilings.from_json(env["LAYOUTLAB_CEILINGS"]) == expected, name
    tasks = {t["Properties"]["Family"]: t["Properties"] for t in synth.resources("compute", "AWS::ECS::TaskDefinition").values()}
    (container,) = tasks[synth.config.task_family("convert")]["ContainerDefinitions"]
    assert Ceilings.from_json({e["Name"]: e["Value"] for e in container["Environment"]}["LAYOUTLAB_CEILINGS"]) == expected
