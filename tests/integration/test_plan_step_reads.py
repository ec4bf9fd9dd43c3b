"""The plan step reads metadata and coordinates only: its requests and bytes, on the RUN item (issue 34).

A generated ATL03-like granule of ~240 MB (each beam's object headers written before its photons, the
next beam's after them, as the sample writer and the mission files lay them out) is uploaded to the local
S3 and planned with the default plan through a client of the local proxy of its own: the RUN item's
``plan_io`` must be what the proxy saw, and far less than the file (under 2 % of this one's bytes). The figure on
the ~1 GB sample is in docs/pipeline-and-plans.md (benchmarks/bench_plan_io.py).
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from layoutlab.local import dispatch
from layoutlab.local.pipeline import LocalPipeline
from layoutlab.pipeline import planning
from layoutlab.pipeline.payloads import ExecutionInput

pytestmark = pytest.mark.slow

BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")
PHOTONS = 2_000_000


def _granule(path):
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f.attrs["short_name"] = "ATL03"
        for beam in BEAMS:
            heights = f.create_group(f"{beam}/heights")
            heights.attrs["description"] = "photon heights"
            for name, dtype in (("delta_time", "f8"), ("lat_ph", "f8"), ("lon_ph", "f8"), ("h_ph", "f4")):
                values = rng.random(PHOTONS).astype(dtype)
                dataset = heights.create_dataset(name, data=values, chunks=(10_000,))
                dataset.attrs["units"] = "m"
    return path


def test_the_run_item_carries_the_plan_steps_requests_and_bytes_far_less_than_the_file(cloud, tmp_path, monkeypatch):
    path = _granule(tmp_path / "granule.h5")
    size = path.stat().st_size
    pipeline = LocalPipeline(cloud)
    pipeline.setup()
    pipeline.store.create_run("plan-io", status="RUNNING")  # (ingest's item, which the plan step updates)
    event = pipeline.upload(path)
    detail = event["detail"]
    client = cloud.new_client(latency_ms=0, bandwidth_mbps=0, name="plan-step")
    try:
        # the plan step's reads go through this client only (the task's one S3 endpoint)
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", client["endpoint"])
        monkeypatch.setenv("AWS_ENDPOINT_URL", client["endpoint"])
        execution = ExecutionInput.from_event({"dataset_id": "plan-io", "source": {
            "bucket": detail["bucket"]["name"], "key": detail["object"]["key"],
            "version_id": detail["object"].get("version-id"), "size": size}})
        planned = planning.plan_dataset(execution, s3=pipeline.s3, store=pipeline.store,
                                        settings=planning.PlanSettings(outputs_bucket=dispatch.OUTPUTS_BUCKET))
    finally:
        proxy = cloud.close_client(client["id"])
    assert planned.cases.count > 0
    [run] = pipeline.store.items(dataset="plan-io", kind="RUN")
    plan_io = run["plan_io"]
    # counted at the plan step's own client, and the same at the proxy: nothing read around it
    assert (plan_io["requests"], plan_io["bytes"]) == (proxy["requests"], proxy["bytes_out"]), (plan_io, proxy)
    assert plan_io["requests"] >= 2 and plan_io["file_bytes"] == size
    # metadata and coordinates only: far less than the file. Its share falls as the photons grow (the headers
    # read do not): 1.4 % of this 0.34 GB granule, 0.59 % of the 0.93 GB sample (docs/pipeline-and-plans.md);
    # in 4 MiB blocks, as before, the plan read ~22 % of this one
    assert plan_io["bytes"] < 0.02 * size, (plan_io["bytes"], size)
    # h5coro reads this granule; never a paged copy, and the run says why
    not_planned = {(e["reader"], e["variant"]) for e in run["readers_not_planned"]}
    assert not_planned and all(reader == "h5coro" and variant != "original" for reader, variant in not_planned)
