"""A product's executions at once are bounded (plan field products.max_concurrent_executions): a slot taken at
ingest, given back at the execution's end; ingest answers an SQS batch with the records over the bound as
batch item failures (issue 35). Also: the study prefers granules of different sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from moto import mock_aws

from layoutlab.products import concurrency, flow, state
from layoutlab.pipeline.payloads import FailureInput
from layoutlab.results.store import ResultsStore


def test_slots_up_to_the_bound_then_busy_and_a_repeated_take_counts_once(store):
    assert not concurrency.acquire(store, "P", "d1", 2).again
    assert not concurrency.acquire(store, "P", "d2", 2).again
    assert concurrency.acquire(store, "P", "d1", 2).again  # the same upload again: its slot, nothing more
    with pytest.raises(concurrency.ProductBusy, match="'P' runs 2 execution"):
        concurrency.acquire(store, "P", "d3", 2)
    assert concurrency.running(store, "P") == 2
    assert concurrency.acquire(store, "Q", "e1", 1)  # another product has its own bound
    assert concurrency.release(store, "P", "d1") is True
    assert concurrency.release(store, "P", "d1") is False  # given back once only
    assert concurrency.release(store, "P", "never") is False
    assert concurrency.running(store, "P") == 1
    assert not concurrency.acquire(store, "P", "d3", 2).again
    assert concurrency.running(store, "P") == 2
    held = {e["dataset"]: e for e in concurrency.executions(store, "P")}
    assert set(held) == {"d1", "d2", "d3"} and "released" in held["d1"] and "released" not in held["d2"]


def test_the_execution_end_gives_the_slot_back_from_summarize_and_from_record_failure_not_from_a_case(store):
    for dataset in ("ok", "bad"):
        concurrency.acquire(store, "P", dataset, 5)
        store.create_run(dataset, status="RUNNING", execution_product="P")
    # a failed benchmark case does not end its execution
    flow.record_granule_failure(FailureInput(stage="bench", dataset_id="bad", error={"Error": "E", "Cause": "c"},
                                             case={"variant": "v"}), store=store)
    assert concurrency.running(store, "P") == 2
    flow.record_granule_failure(FailureInput(stage="convert", dataset_id="bad", error={"Error": "E", "Cause": "c"}),
                                store=store)
    assert concurrency.running(store, "P") == 1
    assert concurrency.release_for_dataset(store, "ok") is True
    assert concurrency.running(store, "P") == 0
    flow.record_granule_failure(FailureInput(stage="convert", dataset_id="bad", error={"Error": "E", "Cause": "c"}),
                                store=store)
    assert concurrency.running(store, "P") == 0  # a repeated record_failure gives back nothing more


def test_an_upload_waits_in_the_queue_holding_no_slot_while_its_products_study_is_full(store):
    """Its execution would wait in the plan step's retry for the decision, holding a slot the study or a
    production granule could use; now ingest refuses it (a longer delay than a busy bound's) and takes nothing."""
    plan = {"products": {"study_granules": 1, "max_concurrent_executions": 3}}
    settings = state.ProductSettings.from_plan(plan)
    assert concurrency.take_upload_slot(store, "incoming/P/a.h5", {}, plan, "a") == "P"  # (no PRODUCT item yet)
    assert state.admit(store, "P", "a", size=1000, signature=None, named_by="uploader", settings=settings).role == "study"
    with pytest.raises(concurrency.ProductBusy, match="study granules \\(a\\) are not decided yet") as busy:
        concurrency.take_upload_slot(store, "incoming/P/b.h5", {}, plan, "b")
    assert busy.value.retry_after_s == concurrency.STUDYING_RETRY_S > concurrency.BUSY_RETRY_S
    assert concurrency.running(store, "P") == 1  # a's slot alone
    assert concurrency.take_upload_slot(store, "incoming/P/a.h5", {}, plan, "a") == "P"  # the study granule again
    state.set_decision(store, "P", {"variant": "paged-1MiB"}, event="decided", by="test", reason="test")
    assert concurrency.take_upload_slot(store, "incoming/P/b.h5", {}, plan, "b") == "P"
    assert concurrency.running(store, "P") == 2


def test_peak_concurrency_counts_open_intervals():
    assert concurrency.peak_concurrency([]) == 0
    assert concurrency.peak_concurrency([(0, 2), (1, 3), (2, 4)]) == 2  # a slot given back as another is taken
    assert concurrency.peak_concurrency([(0, 10), (1, 2), (1.5, None)]) == 3


def test_the_study_prefers_granules_of_another_size_until_the_window_closes(store):
    settings = state.ProductSettings(study_granules=3, study_size_tolerance=0.1, study_window_s=300)
    assert state.admit(store, "P", "a", size=1000, signature=None, named_by="uploader", settings=settings).role == "study"
    with pytest.raises(state.ProductStudying, match="within 10% of study granule a"):
        state.admit(store, "P", "b", size=1050, signature=None, named_by="uploader", settings=settings)
    assert state.admit(store, "P", "c", size=2000, signature=None, named_by="uploader", settings=settings).number == 2
    import time

    later = lambda: time.time() + 301  # noqa: E731 (no other size came within the window: b is studied)
    assert state.admit(store, "P", "b", size=1050, signature=None, named_by="uploader", settings=settings,
                       clock=later).number == 3
    assert state.ProductSettings.from_plan({}).study_size_tolerance == 0.1
    assert state.ProductSettings.from_plan({"products": {"max_concurrent_executions": 4}}).max_concurrent_executions == 4


HANDLER_RUN = textwrap.dedent('''
    import json, sys
    import boto3, h5py, numpy as np
    from moto import mock_aws

    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        for bucket in ("ingest", "outputs"):
            s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket="ingest", VersioningConfiguration={"Status": "Enabled"})
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(TableName="idem", BillingMode="PAY_PER_REQUEST",
                         AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                         KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}])
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        sfn.create_state_machine(name="pipeline", roleArn="arn:aws:iam::123456789012:role/r",
                                 definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}))
        from layoutlab.results.store import ResultsStore
        store = ResultsStore("results")
        store.create_table()
        s3.put_object(Bucket="ingest", Key="plans/two.json",
                      Body=json.dumps({"products": {"max_concurrent_executions": 2}}).encode())
        with h5py.File(sys.argv[1], "w") as f:
            f["v"] = np.arange(100, dtype="f4")
        body = open(sys.argv[1], "rb").read()
        from layoutlab.pipeline.events import eventbridge_object_created
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = sqs.create_queue(QueueName="ingest", Attributes={"VisibilityTimeout": "600"})["QueueUrl"]
        records = []
        for i in range(3):
            key = f"incoming/P/g{i}.h5"
            r = s3.put_object(Bucket="ingest", Key=key, Body=body, Metadata={"layoutlab-plan": "two"})
            event = eventbridge_object_created("ingest", key, version_id=r["VersionId"], etag=r["ETag"].strip('"'),
                                               size=len(body), sequencer=f"{i:020X}")
            sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(event))
            [message] = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=1)["Messages"]
            records.append({"messageId": f"m{i}", "receiptHandle": message["ReceiptHandle"], "body": json.dumps(event),
                            "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
                            "md5OfBody": "", "eventSource": "aws:sqs", "awsRegion": "us-east-1",
                            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:ingest"})

        class Context:
            function_name, memory_limit_in_mb, aws_request_id = "ingest", 512, "req"
            invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:ingest"
            def get_remaining_time_in_millis(self):
                return 60000

        from layoutlab.handlers import ingest
        from layoutlab.products import concurrency
        concurrency.BUSY_RETRY_S = 2  # (the refused record's delay, instead of the queue's 600 s)
        out = {"first": ingest.handler({"Records": records}, Context())}
        out["running"] = concurrency.running(store, "P")
        # the refused record (only) is delivered again after about that delay (jittered: 1 to 3 s)
        import time
        waited, again = time.monotonic(), []
        while not again and time.monotonic() - waited < 8:
            again = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        out["redelivered"] = [json.loads(m["Body"])["detail"]["object"]["key"] for m in again]
        out["redelivered_after_s"] = time.monotonic() - waited
        try:
            ingest.handler({"Records": records[2:]}, Context())  # still busy: the whole batch fails
            out["all_failed"] = None
        except Exception as error:
            out["all_failed"] = type(error).__name__
        started = [i["dataset"] for i in store.items(kind="RUN")]
        concurrency.release_for_dataset(store, started[0])
        out["again"] = ingest.handler({"Records": records}, Context())  # two duplicates, one started
        arn = sfn.list_state_machines()["stateMachines"][0]["stateMachineArn"]
        out["executions"] = len(sfn.list_executions(stateMachineArn=arn)["executions"])
        out["running_after"] = concurrency.running(store, "P")
        print("RESULT " + json.dumps(out))
''')


def test_ingest_answers_an_sqs_batch_with_the_records_over_the_products_bound(tmp_path):
    # (a subprocess: importing a handler makes its process non-dumpable and hides its environment)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "POWERTOOLS_TRACE_DISABLED": "true",
           "POWERTOOLS_METRICS_NAMESPACE": "layoutlab-test", "LAYOUTLAB_RESULTS_TABLE": "results",
           "LAYOUTLAB_OUTPUTS_BUCKET": "outputs", "LAYOUTLAB_INGEST_BUCKET": "ingest",
           "LAYOUTLAB_IDEMPOTENCY_TABLE": "idem",
           "LAYOUTLAB_STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:pipeline"}
    done = subprocess.run([sys.executable, "-c", HANDLER_RUN, str(tmp_path / "g.h5")], env=env, capture_output=True,
                          text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stderr[-3000:]
    out = json.loads(lines[-1].removeprefix("RESULT "))
    assert out["first"] == {"batchItemFailures": [{"itemIdentifier": "m2"}]}
    assert out["running"] == 2
    assert out["redelivered"] == ["incoming/P/g2.h5"] and out["redelivered_after_s"] < 8  # not after 600 s
    assert out["all_failed"] == "BatchProcessingError"  # Lambda retries the whole batch
    assert out["again"] == {"batchItemFailures": []}
    assert out["executions"] == 3 and out["running_after"] == 2
