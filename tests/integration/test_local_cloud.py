"""The local cloud: moto + S3 proxy on 127.0.0.1, latency, bandwidth, per-client counts, up/down."""

from __future__ import annotations

import json
import os
import time

import boto3
import pytest

from layoutlab.cli import main
from layoutlab.local.cloud import LocalCloud, pid_running


def _s3(endpoint):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


@pytest.fixture
def bucket(cloud):
    s3 = _s3(cloud.moto_endpoint)
    s3.create_bucket(Bucket="cloud-test")
    s3.put_object(Bucket="cloud-test", Key="obj", Body=os.urandom(2**20))
    return "cloud-test"


def test_services_answer_on_loopback(cloud):
    assert cloud.moto_endpoint.startswith("http://127.0.0.1:") and cloud.s3_endpoint.startswith("http://127.0.0.1:")
    assert os.environ["MOTO_PORT"] == str(cloud.moto_port)
    boto3.client("dynamodb", region_name="us-east-1").list_tables()  # AWS_ENDPOINT_URL -> moto
    boto3.client("stepfunctions", region_name="us-east-1").list_state_machines()
    boto3.client("cloudwatch", region_name="us-east-1").list_metrics()


@pytest.mark.timing
def test_proxy_counts_per_client_and_adds_latency(cloud, bucket):
    slow = cloud.new_client(latency_ms=40, bandwidth_mbps=0, name="slow")
    fast = cloud.new_client(latency_ms=0, bandwidth_mbps=0, name="fast")
    s_slow, s_fast = _s3(slow["endpoint"]), _s3(fast["endpoint"])
    s_slow.head_object(Bucket=bucket, Key="obj")
    s_fast.head_object(Bucket=bucket, Key="obj")  # warm both connections
    timings = {}
    for name, s3 in (("slow", s_slow), ("fast", s_fast)):
        each = []
        for i in range(5):
            t = time.perf_counter()
            s3.get_object(Bucket=bucket, Key="obj", Range=f"bytes={i * 1000}-{i * 1000 + 999}")["Body"].read()
            each.append(time.perf_counter() - t)
        # the fastest of five: a busy machine only ever adds time, the emulated latency is a floor
        timings[name] = min(each)
    assert timings["slow"] >= 0.040
    assert timings["slow"] - timings["fast"] == pytest.approx(0.040, abs=0.015)
    stats = cloud.client_stats(slow["id"])
    assert (stats["requests"], stats["get_requests"], stats["head_requests"], stats["bytes_out"]) == (6, 5, 1, 5000)
    assert cloud.client_stats(fast["id"])["requests"] == 6  # the other client's counters are its own
    cloud.close_client(slow["id"])
    with pytest.raises(Exception):
        cloud.client_stats(slow["id"])


@pytest.mark.timing
def test_bandwidth_cap(cloud, bucket):
    client = cloud.new_client(latency_ms=0, bandwidth_mbps=40)  # 5 MB/s
    s3 = _s3(client["endpoint"])
    t = time.perf_counter()
    body = s3.get_object(Bucket=bucket, Key="obj")["Body"].read()
    elapsed = time.perf_counter() - t
    assert len(body) == 2**20 and elapsed == pytest.approx(2**20 / 5e6, rel=0.3)


def test_reset_empties_moto_between_tests(cloud):
    assert _s3(cloud.moto_endpoint).list_buckets()["Buckets"] == []  # 'bucket' of earlier tests is gone


def test_up_status_down_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LAYOUTLAB_STATE_DIR", str(tmp_path))
    assert main(["local", "up", "--latency-ms", "5", "--bandwidth-mbps", "0"]) == 0
    cloud = LocalCloud.from_state(tmp_path / "local-cloud.json")
    try:
        assert cloud is not None and cloud.latency_ms == 5
        assert main(["local", "up"]) == 0
        assert "already running" in capsys.readouterr().out
        assert main(["local", "status", "--json"]) == 0
        status = json.loads(capsys.readouterr().out)
        assert status["proxy"]["defaults"] == {"latency_ms": 5.0, "bandwidth_mbps": 0.0}
        assert main(["local", "env"]) == 0
        assert f"AWS_ENDPOINT_URL_S3={cloud.s3_endpoint}" in capsys.readouterr().out
        # the servers are kept off the measured core
        assert cloud.server_cpus == sorted(os.sched_getaffinity(cloud.pid))
    finally:
        assert main(["local", "down"]) == 0
    assert not pid_running(cloud.pid)
    assert not (tmp_path / "local-cloud.json").exists()
    assert main(["local", "status"]) == 2
