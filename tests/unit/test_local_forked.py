"""Tasks forked from the preloaded fork server: pinned, capped, their answers and failures reported."""

from __future__ import annotations

import os

from layoutlab.local.forked import run_forked


def test_a_forked_task_runs_pinned_with_its_environment_and_memory_cap():
    cpu = sorted(os.sched_getaffinity(0))[-1]
    result = run_forked("layoutlab.local.isolation:describe_process", None, memory_mb=1024, cpu=cpu,
                        env={"LAYOUTLAB_TEST_MARK": "x"})
    assert result.ok, result.error
    assert result.result["cpus"] == [cpu]
    assert result.result["rlimit_data"] == 1024 * 2**20
    assert result.result["pid"] != os.getpid()
    assert result.env_keys == ["LAYOUTLAB_TEST_MARK"]


def test_a_failing_task_reports_its_error_by_name():
    result = run_forked("layoutlab.pipeline.plan:parse_size", "eight megs", cpu=None)
    assert not result.ok
    assert result.error_type == "ValueError" and "not a size" in result.error

