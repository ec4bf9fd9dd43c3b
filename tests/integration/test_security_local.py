"""Security of the local run (issue #8): servers listen on 127.0.0.1 only, and credentials
never reach a log, an output, a result item or an execution's history."""

from __future__ import annotations

import json

import psutil
import pytest

from layoutlab.local import dispatch
from layoutlab.local.cloud import HOST, start_local_cloud
from layoutlab.local.pipeline import LocalPipeline
from layoutlab.samples import geos

# Recognisable fake credentials: if any of them shows up anywhere, it leaked.
CANARIES = {
    "AWS_ACCESS_KEY_ID": "AKIALAYOUTLABCANARY7",
    "AWS_SECRET_ACCESS_KEY": "layoutlab/Canary+Secret/0123456789abcdefCANARY",
    "AWS_SESSION_TOKEN": "LayoutlabCanarySessionToken//FwoGZXIvYXdzECANARY==",
}
ONE_CASE_PLAN = {
    "name": "one-case",
    "variants": [{"kind": "original"}, {"kind": "repack-paged", "page_size": "64KiB"}],
    "patterns": {"grid": ["timeseries-point"], "granule": []},
    "readers": {"hdf5": ["h5py-s3fs-aligned"], "zarr": []},
    "platforms": ["local-lambda"],
    "repetitions": 1,
    "max_concurrency": 1,
}


def listening(pid: int) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket of ``pid`` and its descendants."""
    root = psutil.Process(pid)
    found = []
    for process in [root, *root.children(recursive=True)]:
        for conn in process.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                found.append((process.pid, conn.laddr.ip, conn.laddr.port))
    return found


def test_every_local_server_listens_on_127_0_0_1_only(local_cloud):
    client = local_cloud.new_client(latency_ms=5, name="listen-check")  # a proxy port of its own too
    try:
        sockets = listening(local_cloud.pid)
    finally:
        local_cloud.close_client(client["id"])
    ports = {port for _, _, port in sockets}
    assert {local_cloud.moto_port, local_cloud.proxy_port, client["port"]} <= ports
    assert {address for _, address, _ in sockets} == {HOST}, sockets


def scan(text: str, where: str) -> list[str]:
    return [f"{name} in {where}" for name, value in CANARIES.items() if value in text]


@pytest.fixture
def canary_cloud(tmp_path, monkeypatch):
    """A local cloud started with the canary credentials in its environment (anything that passed the
    user's credentials on would leak them), keeping every task's output in a log file."""
    for name, value in CANARIES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(dispatch.TASK_LOG_ENV, str(tmp_path / "tasks.log"))
    cloud = start_local_cloud(tmp_path / "cloud.json", latency_ms=0, bandwidth_mbps=0,
                              log_path=tmp_path / "cloud.log")
    try:
        yield cloud
    finally:
        cloud.stop()


@pytest.mark.slow
def test_credentials_never_appear_in_logs_outputs_or_results(canary_cloud, tmp_path, capfd):
    pipeline = LocalPipeline(canary_cloud)
    pipeline.setup()
    pipeline.put_plan("one-case", ONE_CASE_PLAN)
    good = geos.write_geos(tmp_path / "good.nc", shape=(4, 5, 6))
    empty = tmp_path / "empty.nc"
    empty.write_bytes(b"")
    text = tmp_path / "notes.nc"
    text.write_text("not a NetCDF file\n" * 20)
    outcomes = []
    for path in (good, empty, text):
        event = pipeline.upload(path, plan="one-case")
        outcomes += pipeline.deliver(event) + pipeline.deliver(event)  # a duplicate too
    final = pipeline.wait([o for o in outcomes if o["status"] == "started"], timeout=600)
    assert list(final.values()) == ["SUCCEEDED"]
    assert sorted(o["status"] for o in outcomes) == ["duplicate", "rejected", "rejected", "rejected",
                                                     "rejected", "started"]

    tasks_log = (tmp_path / "tasks.log").read_text(errors="replace")
    # the tasks' own logs were captured (ingest, plan, convert, bench, summarize all log)
    assert tasks_log.count('"level"') >= 5, tasks_log[:2000]
    places = {
        "task logs": tasks_log,
        "local cloud log": (tmp_path / "cloud.log").read_text(errors="replace"),
        "ingest outcomes": json.dumps(outcomes),
        "results table": json.dumps(pipeline.store.items(), default=str),
    }
    for key in [o["Key"] for o in pipeline.s3.list_objects_v2(Bucket=dispatch.OUTPUTS_BUCKET).get("Contents", [])]:
        places[f"s3://{dispatch.OUTPUTS_BUCKET}/{key}"] = (
            pipeline.s3.get_object(Bucket=dispatch.OUTPUTS_BUCKET, Key=key)["Body"].read().decode("latin-1"))
    for execution in pipeline.sfn.list_executions(stateMachineArn=dispatch.state_machine_arn())["executions"]:
        history = pipeline.sfn.get_execution_history(executionArn=execution["executionArn"])["events"]
        places[f"history of {execution['name']}"] = json.dumps(history, default=str)
    captured = capfd.readouterr()
    places["test stdout"], places["test stderr"] = captured.out, captured.err
    assert any(o.startswith("s3://") for o in places)  # outputs were written and read back
    leaks = [leak for where, content in places.items() for leak in scan(content, where)]
    assert leaks == []
    # stronger than not leaking them: the local run never hands the user's credentials to a task
    assert not scan(json.dumps(dispatch.task_environment("http://x", None)), "task environment")
    # and the scan can fail
    assert scan(f"... {CANARIES['AWS_SECRET_ACCESS_KEY']} ...", "probe")
