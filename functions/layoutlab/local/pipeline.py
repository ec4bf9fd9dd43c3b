"""The embedded default: the whole pipeline on the local cloud.

``LocalPipeline(cloud)`` creates what the CDK data and pipeline stacks create
in AWS — the ingest bucket (versioned), the outputs bucket, the results and
idempotency tables, and the state machine from ``stepfunctions/pipeline.asl.json``
with local values for its ``${...}`` placeholders — then uploads files under
``incoming/``, and follows the executions. With ``setup(s3_events=True)`` (``layoutlab local up``,
``layoutlab demo``) it also deploys the route the CDK app deploys, S3 → EventBridge rule → ingest
(``local/s3_events.py`` makes moto deliver it), so an object created under ``incoming/`` by any S3
client starts the pipeline by itself; without it, callers deliver events themselves (``deliver``),
as tests of delivery order and duplicates do.

Results persist between runs in ``<state dir>/results.json`` (see
``layoutlab.local.cloud.state_dir``): written when a run ends, loaded into the
table when the next one starts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import boto3

from layoutlab.local import dispatch
from layoutlab.local.cloud import LocalCloud, state_dir
from layoutlab.pipeline.events import eventbridge_object_created, object_created_pattern
from layoutlab.pipeline.plan import PLAN_METADATA_KEY, PLANS_PREFIX
from layoutlab.results.store import ResultsStore, from_dynamo, to_dynamo

ASL_PATH = Path(__file__).resolve().parents[3] / "stepfunctions" / "pipeline.asl.json"
SNAPSHOT_NAME = "results.json"
ROLE_ARN = f"arn:aws:iam::{dispatch.ACCOUNT}:role/{dispatch.PREFIX}-pipeline"
INGEST_RULE = f"{dispatch.PREFIX}-ingest-trigger"


def asl_path() -> Path:
    if ASL_PATH.exists():
        return ASL_PATH
    raise FileNotFoundError(f"{ASL_PATH}: the state machine definition is missing (run from a checkout)")


def local_definition(text: str | None = None) -> str:
    """The ASL with every ``${Name}`` replaced by its local value; refuses leftovers."""
    import re

    text = asl_path().read_text() if text is None else text
    values = dispatch.substitutions()
    text = re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)] if m.group(1) in values else m.group(0), text)
    left = re.findall(r"\$\{(\w+)\}", text)
    if left:
        raise ValueError(f"no local value for ASL placeholder(s): {', '.join(sorted(set(left)))}")
    return text


def snapshot_path() -> Path:
    return state_dir() / SNAPSHOT_NAME


class LocalPipeline:
    def __init__(self, cloud: LocalCloud):
        import os

        self.cloud = cloud
        # moto accepts any credentials; real ones are never needed (nor sent anywhere but 127.0.0.1).
        from layoutlab.local.cloud import use_local_credentials

        use_local_credentials()
        kwargs = {"endpoint_url": cloud.moto_endpoint, "region_name": dispatch.REGION}
        self.s3 = boto3.client("s3", **kwargs)
        self.sfn = boto3.client("stepfunctions", **kwargs)
        self.dynamodb = boto3.client("dynamodb", **kwargs)
        self.events = boto3.client("events", **kwargs)
        self.sqs = boto3.client("sqs", **kwargs)
        self.store = ResultsStore(dispatch.RESULTS_TABLE, endpoint_url=cloud.moto_endpoint)
        # Ingest (the only task started from here) runs off the measured core: it is not measured.
        self.dispatcher = dispatch.Dispatcher(cloud.moto_endpoint, cloud.control_url, None)

    # -- resources ----------------------------------------------------------------
    def setup(self, s3_events: bool = False) -> None:
        """Create what the CDK data and pipeline stacks create; ``s3_events``: and the S3 → EventBridge →
        ingest route (see the module's docstring)."""
        for bucket in (dispatch.INGEST_BUCKET, dispatch.OUTPUTS_BUCKET):
            try:
                self.s3.create_bucket(Bucket=bucket)
            except self.s3.exceptions.BucketAlreadyOwnedByYou:
                pass
        self.s3.put_bucket_versioning(Bucket=dispatch.INGEST_BUCKET, VersioningConfiguration={"Status": "Enabled"})
        self.store.create_table()
        if dispatch.IDEMPOTENCY_TABLE not in self.dynamodb.list_tables()["TableNames"]:
            self.dynamodb.create_table(
                TableName=dispatch.IDEMPOTENCY_TABLE, BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            )
        definition = local_definition()
        try:
            self.sfn.create_state_machine(name=dispatch.STATE_MACHINE, definition=definition, roleArn=ROLE_ARN)
        except self.sfn.exceptions.StateMachineAlreadyExists:
            self.sfn.update_state_machine(stateMachineArn=dispatch.state_machine_arn(), definition=definition)
        self.put_local_default_plan()
        if s3_events:
            self.route_s3_events()

    def route_s3_events(self) -> None:
        """S3 → EventBridge → SQS → ingest, as deployed: the data stack turns the ingest bucket's EventBridge
        notifications on, the pipeline stack's rule (the same pattern) targets the ingest queue (with its
        dead-letter queue), whose event source — here ``local/sqs_source.py`` in the local cloud — invokes ingest
        with batches."""
        self.s3.put_bucket_notification_configuration(
            Bucket=dispatch.INGEST_BUCKET, NotificationConfiguration={"EventBridgeConfiguration": {}})
        dead_letters = self.sqs.create_queue(QueueName=dispatch.INGEST_DEAD_LETTERS)["QueueUrl"]
        dead_letters_arn = self.sqs.get_queue_attributes(QueueUrl=dead_letters,
                                                         AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        queue = self.sqs.create_queue(QueueName=dispatch.INGEST_QUEUE, Attributes={
            "VisibilityTimeout": str(dispatch.INGEST_QUEUE_VISIBILITY_S),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dead_letters_arn,
                                         "maxReceiveCount": dispatch.INGEST_QUEUE_MAX_RECEIVES})})["QueueUrl"]
        queue_arn = self.sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.events.put_rule(Name=INGEST_RULE, State="ENABLED",
                             EventPattern=json.dumps(object_created_pattern(dispatch.INGEST_BUCKET)),
                             Description="Object Created under s3://<ingest>/incoming/ queues layoutlab ingest")
        self.events.put_targets(Rule=INGEST_RULE, Targets=[{"Id": "ingest-queue", "Arn": queue_arn}])

    def queued(self) -> dict[str, int]:
        """Messages in the ingest queue (waiting, in flight) and its dead-letter queue."""
        counts = {}
        for name, label in ((dispatch.INGEST_QUEUE, "queue"), (dispatch.INGEST_DEAD_LETTERS, "dead_letters")):
            try:
                url = self.sqs.get_queue_url(QueueName=name)["QueueUrl"]
            except self.sqs.exceptions.QueueDoesNotExist:
                continue
            attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
                "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
            counts[label] = int(attributes["ApproximateNumberOfMessages"])
            counts[f"{label}_in_flight"] = int(attributes["ApproximateNumberOfMessagesNotVisible"])
        return counts

    def put_local_default_plan(self) -> None:
        """The plan an upload naming none runs locally (``plans/<LOCAL_DEFAULT_PLAN>.json``, the tasks'
        LAYOUTLAB_DEFAULT_PLAN): the demo's, unless one is there already (a user's own, put with any S3 client).
        The packaged default plan measures Lambda and Fargate up to nine times: hours on one local core."""
        key = f"{PLANS_PREFIX}{dispatch.LOCAL_DEFAULT_PLAN}.json"
        try:
            self.s3.head_object(Bucket=dispatch.INGEST_BUCKET, Key=key)
            return
        except self.s3.exceptions.ClientError:
            pass
        from importlib import resources

        plan = json.loads(resources.files("layoutlab.pipeline").joinpath("demo_plan.json").read_text())
        self.put_plan(dispatch.LOCAL_DEFAULT_PLAN, {**plan, "name": dispatch.LOCAL_DEFAULT_PLAN})

    # -- uploads ------------------------------------------------------------------
    def put_plan(self, name: str, plan: dict) -> str:
        key = f"{PLANS_PREFIX}{name}.json"
        self.s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key=key, Body=json.dumps(plan).encode())
        return key

    def upload(self, path: str | Path, key: str | None = None, plan: str | None = None) -> dict:
        """Upload a file under incoming/ and return the EventBridge event AWS would send."""
        path = Path(path)
        key = key or f"incoming/{path.name}"
        extra = {"Metadata": {PLAN_METADATA_KEY: plan}} if plan else {}
        with open(path, "rb") as body:
            response = self.s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key=key, Body=body, **extra)
        return eventbridge_object_created(
            dispatch.INGEST_BUCKET, key, version_id=response.get("VersionId"),
            etag=response["ETag"].strip('"'), size=path.stat().st_size, sequencer=f"{time.time_ns():020X}",
            time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )

    def deliver(self, event: dict) -> list[dict]:
        """Invoke the ingest function with ``event``, as the EventBridge rule does."""
        return self.dispatcher.invoke_lambda(dispatch.function_name("ingest"), event)["outcomes"]

    def ingested(self, event: dict, timeout: float = 120) -> dict:
        """Ingest's outcome for the upload ``event`` names, once the S3 event has reached it: ``started``
        (its RUN item), ``rejected`` (its ingest FAILURE item, with the reason) or ``ignored``."""
        from layoutlab.pipeline import identity
        from layoutlab.pipeline.events import is_incoming, objects_in_event

        [ref] = objects_in_event(event)
        dataset_id = identity.dataset_id(ref)
        if not is_incoming(ref.key):
            return {"key": ref.key, "status": "ignored", "dataset_id": None, "reason": "not under incoming/"}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for item in self.store.items(dataset=dataset_id):
                if item["kind"] == "RUN":
                    return {"key": ref.key, "status": "started", "dataset_id": dataset_id,
                            "execution_name": identity.execution_name(ref)}
                if item["kind"] == "FAILURE" and item.get("stage") == "ingest":
                    return {"key": ref.key, "status": "rejected", "dataset_id": dataset_id, "reason": item["reason"]}
            time.sleep(0.2)
        return {"key": ref.key, "status": "rejected", "dataset_id": dataset_id,
                "reason": f"ingest did not answer the S3 event within {timeout:.0f} s (see the local cloud's log)"}

    def executions(self) -> list[dict]:
        """Every execution of the pipeline, newest first: name, status, start and stop."""
        found = []
        paginator = self.sfn.get_paginator("list_executions")
        for page in paginator.paginate(stateMachineArn=dispatch.state_machine_arn()):
            found += page["executions"]
        return sorted(found, key=lambda e: e["startDate"], reverse=True)

    # -- following ----------------------------------------------------------------
    def execution_arn(self, name: str) -> str:
        return f"arn:aws:states:{dispatch.REGION}:{dispatch.ACCOUNT}:execution:{dispatch.STATE_MACHINE}:{name}"

    def status(self, execution_name: str) -> str:
        return self.sfn.describe_execution(executionArn=self.execution_arn(execution_name))["status"]

    def progress(self, dataset_ids: list[str]) -> tuple[int, int]:
        """(cases done or failed, cases planned) over ``dataset_ids``."""
        done = planned = 0
        for dataset_id in dataset_ids:
            items = self.store.items(dataset=dataset_id)
            for item in items:
                if item["kind"] == "RUN":
                    planned += int(item.get("cases") or 0)
                elif item["kind"] == "RESULT" or (item["kind"] == "FAILURE" and item.get("stage") == "bench"):
                    done += 1
        return done, planned

    def wait(self, outcomes: list[dict], timeout: float = 3600, on_progress=None) -> dict[str, str]:
        """Wait for the executions ``outcomes`` started; returns dataset id -> final status."""
        pending = {o["dataset_id"]: o["execution_name"] for o in outcomes if o.get("execution_name")}
        final: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for dataset_id, name in list(pending.items()):
                status = self.status(name)
                if status != "RUNNING":
                    final[dataset_id] = status
                    del pending[dataset_id]
            if on_progress:
                on_progress(*self.progress(list(final) + list(pending)))
            if pending:
                time.sleep(0.5)
        for dataset_id in pending:
            final[dataset_id] = "TIMED_OUT (still running)"
        return final

    # -- persistence --------------------------------------------------------------
    def save_snapshot(self, path: Path | None = None) -> Path:
        path = path or snapshot_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        items = self.store.items()
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(items, default=str))
        partial.replace(path)
        return path

    def load_snapshot(self, path: Path | None = None) -> int:
        path = path or snapshot_path()
        if not path.exists():
            return 0
        items = json.loads(path.read_text())
        with self.store.table.batch_writer() as batch:
            for item in items:
                batch.put_item(Item=to_dynamo(item))
        return len(items)


def load_snapshot_items(path: Path | None = None) -> list[dict]:
    path = path or snapshot_path()
    return [from_dynamo(i) for i in json.loads(path.read_text())] if path.exists() else []
