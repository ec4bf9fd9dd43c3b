"""Deploy rehearsal: the synthesized stacks, created in moto's CloudFormation on 127.0.0.1.

What `cdk deploy` does, done against a moto server: the bootstrap version parameter exists,
each stack's file assets are in the bootstrap bucket, and the stacks are created from their
template *URLs* (as the CDK CLI does: the compute template is over CreateStack's 51,200-byte
TemplateBody limit) in the assembly's dependency order, data → compute → pipeline →
observability, each waited for before the next — so every Fn::ImportValue must find its export.

What this proves: the templates parse, every Ref/GetAtt/ImportValue resolves, names and
parameters are accepted where moto models the resource (buckets, functions, layer, roles, VPC,
cluster, task definitions, state machine, queues, topic, key, log groups, EventBridge rule).
What it cannot: moto skips types it has no CloudFormation model for (it warns "No Moto
CloudFormation support for ...": in moto 5.2.5 among ours DynamoDB::GlobalTable, the bucket,
queue and topic policies, CloudWatch alarms, Lambda EventInvokeConfig), applies no IAM, runs no
code, enforces no quotas and does not refuse to update an export in use — tests/infra
checks those on the templates, and only a real account can prove the rest (README "Deploy to AWS").
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("moto.server")

REGION = "us-east-1"
BOOTSTRAP_VERSION_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
CUSTOM_RESOURCE_TYPES = ("Custom::", "AWS::CloudFormation::CustomResource")
# moto says which of our resource types it does not model (see the docstring): noise here
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse .* not supported by moto:UserWarning")


@pytest.fixture(scope="module")
def moto_server():
    """A moto server on a free port of 127.0.0.1 (STYLE.md 5), reset between tests."""
    import requests
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    try:
        yield url
    finally:
        requests.post(f"{url}/moto-api/reset", timeout=10)
        server.stop()


@pytest.fixture
def aws(moto_server):
    import boto3
    import requests

    requests.post(f"{moto_server}/moto-api/reset", timeout=10)
    options = dict(endpoint_url=moto_server, region_name=REGION, aws_access_key_id="testing",
                   aws_secret_access_key="testing")
    return lambda service: boto3.client(service, **options)


def deployment_order(outdir: Path) -> list[str]:
    """Stacks of the assembly, each after the stacks it depends on (what the CDK CLI deploys first)."""
    artifacts = json.loads((outdir / "manifest.json").read_text())["artifacts"]
    stacks = {name: [d for d in a.get("dependencies", []) if artifacts.get(d, {}).get("type") == a["type"]]
              for name, a in artifacts.items() if a["type"] == "aws:cloudformation:stack"}
    order: list[str] = []
    while len(order) < len(stacks):
        ready = sorted(n for n, deps in stacks.items() if n not in order and set(deps) <= set(order))
        assert ready, f"dependency cycle among {set(stacks) - set(order)}"
        order.append(ready[0])
    return order


def stand_in_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("index.py", "def handler(event, context):\n    return {}\n")
    return buffer.getvalue()


def bootstrap(aws, outdir: Path, account: str) -> None:
    """What `cdk bootstrap` + the asset publishing step of `cdk deploy` leave in the account.

    Templates go up as they are. Lambda code and layer zips are small stand-ins at the same
    keys: moto's Lambda needs the object to exist (CreateFunction/PublishLayerVersion fail with
    NoSuchBucket/NoSuchKey otherwise) but never runs it; the real layer is ~100+ MB to zip.
    The Fargate image (an ECR asset) is not needed: moto does not pull images.
    """
    aws("ssm").put_parameter(Name=BOOTSTRAP_VERSION_PARAMETER, Value="30", Type="String")
    s3 = aws("s3")
    buckets = set()
    zipped = stand_in_zip()
    for manifest in sorted(outdir.glob("*.assets.json")):
        for asset in json.loads(manifest.read_text())["files"].values():
            body = zipped if asset["source"].get("packaging") == "zip" else (outdir / asset["source"]["path"]).read_bytes()
            for destination in asset["destinations"].values():
                bucket = destination["bucketName"].replace("${AWS::AccountId}", account).replace("${AWS::Region}", REGION)
                if bucket not in buckets:
                    s3.create_bucket(Bucket=bucket)
                    buckets.add(bucket)
                s3.put_object(Bucket=bucket, Key=destination["objectKey"], Body=body)


def template_url(outdir: Path, stack: str, account: str) -> str:
    artifact = json.loads((outdir / "manifest.json").read_text())["artifacts"][stack]
    s3_url = artifact["properties"]["stackTemplateAssetObjectUrl"]
    bucket, key = s3_url.removeprefix("s3://").replace("${AWS::AccountId}", account).replace(
        "${AWS::Region}", REGION).split("/", 1)
    return f"https://s3.{REGION}.amazonaws.com/{bucket}/{key}"


def answer_custom_resources(endpoint: str, stack_id: str, logical_ids: list[str]) -> None:
    """Be the custom-resource provider: send CloudFormation the SUCCESS response the handler's
    cfn-response would PUT to the ResponseURL. moto cannot run the provider (no Docker) and
    the stack waits for the answer. Only CDK's S3 auto-delete provider (dev) is involved, and
    on Create it does nothing (it empties the bucket on Delete), so SUCCESS with no data is
    exactly its answer. moto's URL for the response: /cloudformation_<region>/cfnresponse."""
    import requests

    for logical_id in logical_ids:
        response = requests.put(
            f"{endpoint}/cloudformation_{REGION}/cfnresponse?stack={stack_id}",
            data=json.dumps({"Status": "SUCCESS", "StackId": stack_id, "RequestId": "rehearsal",
                             "LogicalResourceId": logical_id, "PhysicalResourceId": logical_id, "Data": {}}),
            timeout=10,
        )
        # 200 only for a custom resource moto has registered (and sent its request for)
        assert response.status_code == 200, (logical_id, response.status_code, response.text[:500])


def create_and_wait(aws, endpoint: str, outdir: Path, stack: str, account: str) -> dict:
    template = json.loads((outdir / f"{stack}.template.json").read_text())
    custom = [k for k, r in template["Resources"].items() if r["Type"].startswith(CUSTOM_RESOURCE_TYPES)]
    cfn = aws("cloudformation")
    stack_id = cfn.create_stack(StackName=stack, TemplateURL=template_url(outdir, stack, account),
                                Capabilities=CAPABILITIES)["StackId"]
    answered = False
    deadline = time.monotonic() + 30
    while True:
        described = cfn.describe_stacks(StackName=stack_id)["Stacks"][0]
        if not described["StackStatus"].endswith("_IN_PROGRESS") or time.monotonic() > deadline:
            break
        if custom and not answered:
            answer_custom_resources(endpoint, stack_id, custom)
            answered = True
        time.sleep(0.1)
    if described["StackStatus"] != "CREATE_COMPLETE":
        events = cfn.describe_stack_events(StackName=stack_id)["StackEvents"][:15]
        pytest.fail(f"{stack}: {described['StackStatus']} {described.get('StackStatusReason')}\n" + "\n".join(
            f"  {e['LogicalResourceId']} {e['ResourceStatus']} {e.get('ResourceStatusReason', '')}" for e in events))
    return described


@pytest.mark.slow
@pytest.mark.parametrize("env_fixture", ["dev", "prod"])
def test_every_stack_reaches_create_complete_in_dependency_order(env_fixture, request, aws, moto_server):
    synth = request.getfixturevalue(env_fixture)
    outdir = Path(synth.outdir)
    order = deployment_order(outdir)
    assert order == [synth.config.stack_name(p) for p in ("data", "compute", "pipeline", "observability")]
    account = aws("sts").get_caller_identity()["Account"]
    bootstrap(aws, outdir, account)

    for stack in order:
        create_and_wait(aws, moto_server, outdir, stack, account)

    # What the stacks made is there, named as the other stacks and the handlers expect.
    config = synth.config
    buckets = {b["Name"] for b in aws("s3").list_buckets()["Buckets"]}
    for kind in ("ingest", "outputs"):
        assert f"layoutlab-{config.name}-{kind}-{account}-{REGION}" in buckets
    functions = {f["FunctionName"]: f for f in aws("lambda").list_functions()["Functions"]}
    from layoutlab_cdk.config import HANDLERS, PYTHON_RUNTIME

    for handler in HANDLERS:
        function = functions[config.function_name(handler)]
        assert function["Runtime"] == f"python{PYTHON_RUNTIME}"  # (moto's model drops Layers)
    machines = {m["name"] for m in aws("stepfunctions").list_state_machines()["stateMachines"]}
    assert config.state_machine_name in machines
    families = set(aws("ecs").list_task_definition_families()["families"])
    assert {config.task_family("convert"), config.task_family("bench")} <= families
    exports = {e["Name"] for e in aws("cloudformation").list_exports()["Exports"]}
    assert exports and all(name.startswith(f"layoutlab-{config.name}-") for name in exports)
