"""Load (issue #8): many uploads at once on the local cloud -> as many complete pipelines,
no result item lost or duplicated.

10 uploads in the suite (about 30 s); ``make test-load`` runs the same test with 50
(LAYOUTLAB_LOAD_UPLOADS=50, a few minutes), and ``make bench-load`` the benchmark
(benchmarks/bench_load.py) that reports duration and peak memory.
"""

from __future__ import annotations

import os

import pytest

from layoutlab.local.load import ONE_CASE_PLAN, TreeMemory, run_load
from layoutlab.local.pipeline import LocalPipeline
from layoutlab.samples import geos

pytestmark = pytest.mark.slow

UPLOADS = int(os.environ.get("LAYOUTLAB_LOAD_UPLOADS", "10"))
PLAN = {**ONE_CASE_PLAN, "name": "load"}


def test_uploads_at_once_each_complete_one_pipeline_with_every_result_once(cloud, tmp_path):
    pipeline = LocalPipeline(cloud)
    pipeline.setup()
    pipeline.put_plan(PLAN["name"], PLAN)
    sample = geos.write_geos(tmp_path / "tiny.nc", shape=(4, 5, 6))
    report = run_load(pipeline, sample, UPLOADS, PLAN["name"], timeout=1200)
    print(report.to_dict())
    assert report.statuses == {"SUCCEEDED": UPLOADS}
    assert report.started == report.executions == report.summaries == UPLOADS
    assert report.results_found == report.results_expected == report.bench_runs == UPLOADS
    assert report.datasets_with_missing_results == report.datasets_with_extra_results == []
    assert report.complete
    # the memory sampler saw the local cloud and the concurrent ingest processes
    assert report.memory["local_cloud"]["root_rss_mb"] > 50
    assert report.memory["driver"]["tree_processes"] > UPLOADS // 2


def test_tree_memory_counts_a_child_process(tmp_path):
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 * 2**20); time.sleep(3)"])
    try:
        import psutil

        memory = TreeMemory({"me": psutil.Process().pid}, interval=0.05)
        memory.start()
        import time

        time.sleep(1.5)
        peak = memory.stop()["me"]
    finally:
        child.kill()
        child.wait()
    assert peak["tree_processes"] >= 2
    assert peak["tree_rss_mb"] >= peak["root_rss_mb"] + 60  # the child's 64 MiB buffer is counted
