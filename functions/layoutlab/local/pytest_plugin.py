"""pytest fixtures for the local cloud (load with ``pytest_plugins = ["layoutlab.local.pytest_plugin"]``).

- ``local_cloud`` (session): one moto server + S3 proxy on free 127.0.0.1 ports,
  with no emulated latency or bandwidth cap (tests that want them open their own
  proxy client: ``local_cloud.new_client(latency_ms=..)``). Stopped at the end.
- ``cloud`` (function): the same, with the environment pointing boto3, s3fs and
  obstore at it (``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_S3``, ...), and every
  moto backend reset after the test through ``/moto-api/reset`` (as zarr-python's
  tests do), so tests never see each other's buckets, tables or executions.
  ``LAYOUTLAB_STATE_DIR`` points at it too, so CLI commands run in the test use it.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def local_cloud(tmp_path_factory):
    from layoutlab.local.cloud import start_local_cloud

    from layoutlab.local.cloud import STATE_FILE

    state = tmp_path_factory.mktemp("local-cloud") / STATE_FILE
    cloud = start_local_cloud(state, latency_ms=0, bandwidth_mbps=0,
                              log_path=state.with_suffix(".log"))
    try:
        yield cloud
    finally:
        cloud.stop()


@pytest.fixture
def cloud(local_cloud, monkeypatch):
    for key, value in local_cloud.env().items():
        monkeypatch.setenv(key, value)
    # `layoutlab local status` and `layoutlab bench` run inside the test attach to this cloud
    monkeypatch.setenv("LAYOUTLAB_STATE_DIR", str(Path(local_cloud.state_path).parent))
    try:
        yield local_cloud
    finally:
        local_cloud.reset()
