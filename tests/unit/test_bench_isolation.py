"""The isolated runner: a fresh pinned process with a memory limit, failures reported, never raised."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from layoutlab.bench.isolation import run_forked, run_isolated

# targets the child imports: functions of this test module would need the tests on the path,
# so the children call small library functions with known behaviour instead.


def test_result_cpu_pin_and_fresh_process():
    result = run_isolated("os:sched_getaffinity", 0, memory_mb=1769)
    assert not result.ok and "not JSON" in result.error  # a set is not JSON: said, not stringified
    measured = max(os.sched_getaffinity(0))
    result = run_isolated("layoutlab.bench.isolation:describe_process", None, memory_mb=1769, cpu=measured)
    assert result.ok, result.error
    seen = result.result
    assert seen["cpus"] == [result.cpu] == [measured]  # pinned to the core asked for
    assert seen["rlimit_data"] == 1769 * 2**20
    assert seen["ppid"] == os.getpid() and seen["pid"] != os.getpid()  # a fresh child of ours
    assert seen["modules"] < 200  # cold: nothing of the parent's imports
    assert 5 < result.peak_rss_mb < 100 and result.process_wall_s > 0
    again = run_isolated("layoutlab.bench.isolation:describe_process", None, cpu=None)
    assert again.result["pid"] != seen["pid"] and again.result["cpus"] == sorted(os.sched_getaffinity(0))


def test_memory_limit_is_enforced():
    # numpy.ones(2**28) is 2 GiB of float64: over a 1024 MB limit, fine without one
    limited = run_isolated("numpy:ones", 2**28, memory_mb=1024)
    assert not limited.ok and limited.error_type == "MemoryError"
    assert "memory limit of 1024 MB exceeded" in limited.error


def test_hundreds_of_threads_at_once_fit_the_memory_limit_as_on_lambda():
    # 300 threads of glibc's 8 MiB stacks reserve 2.4 GB: RLIMIT_DATA counted them all and refused the thread
    # ("can't start new thread", h5coro's listing in the default-plan study), Lambda counts pages touched
    for run in (run_isolated, run_forked):
        result = run("layoutlab.bench.isolation:start_threads", 300, memory_mb=1769)
        assert result.ok and result.result == 300, (run.__name__, result.error)


def test_exceptions_become_errors_not_tracebacks():
    result = run_isolated("json:loads", "{not json")
    assert not result.ok and result.error_type == "JSONDecodeError"
    assert "Expecting property name" in result.error and "Traceback" in result.traceback
    missing = run_isolated("layoutlab.nothing_here:run", {})
    assert not missing.ok and missing.error_type == "ModuleNotFoundError"


def test_timeout_kills_the_child():
    result = run_isolated("time:sleep", 30, timeout=1.5)
    assert not result.ok and result.timed_out and "timed out after 1.5 s" in result.error
    assert result.process_wall_s < 10


def test_peak_rss_is_the_childs_own():
    import numpy  # noqa: F401  (the parent is big; the small child must not inherit its figure)

    small = run_isolated("os:getpid", None)
    big = run_isolated("numpy:ones", 2**26)  # 512 MiB touched
    # ones returns an array, which is not JSON: the call ran and its memory was still measured
    assert not big.ok and big.peak_rss_mb > small.peak_rss_mb + 400
    assert small.peak_rss_mb < 100


def test_child_imports_what_the_parent_put_on_sys_path(tmp_path, monkeypatch):
    """Lambda's bootstrap adds the layer (/opt/python) to sys.path in-process while the environment
    says PYTHONPATH=/var/runtime: a child given the environment alone could not import the layer's
    packages (every bench case failed with "No module named numpy"). The child sees sys.path."""
    layer = tmp_path / "opt-python"
    layer.mkdir()
    (layer / "only_in_the_layer.py").write_text("def answer(_payload):\n    return 42\n")
    monkeypatch.syspath_prepend(str(layer))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "var-runtime"))
    result = run_isolated("only_in_the_layer:answer", None)
    assert result.ok, result.error
    assert result.result == 42


def test_forked_child_has_limits_timeout_and_its_own_failures():
    """A bench case's child forked from its parent: pinned, capped, killed at its timeout, failures reported."""
    measured = max(os.sched_getaffinity(0))
    result = run_forked("layoutlab.bench.isolation:describe_process", None, memory_mb=1769, cpu=measured,
                        env={"LAYOUTLAB_SEEN_BY_CHILD": "1"})
    assert result.ok, result.error
    assert result.result["cpus"] == [measured] and result.result["rlimit_data"] == 1769 * 2**20
    assert result.result["ppid"] == os.getpid() and result.result["pid"] != os.getpid()
    assert os.sched_getaffinity(0) != {measured} or len(os.sched_getaffinity(0)) == 1  # the parent is not pinned
    assert "LAYOUTLAB_SEEN_BY_CHILD" not in os.environ
    limited = run_forked("numpy:ones", 2**28, memory_mb=1024)
    assert not limited.ok and limited.error_type == "MemoryError"
    slow = run_forked("time:sleep", 30, timeout=1.0)
    assert not slow.ok and slow.timed_out and "timed out after 1 s" in slow.error and slow.process_wall_s < 10
    broken = run_forked("json:loads", "{not json")
    assert not broken.ok and broken.error_type == "JSONDecodeError"


def test_what_a_forked_child_prints_reaches_its_output(monkeypatch):
    """The forked child ends with os._exit, which flushes nothing: its buffered prints must still be read."""
    import io
    import sys

    # sys.stdout as Python makes it for a file or pipe without PYTHONUNBUFFERED: block-buffered, over fd 1
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False))))
    result = run_forked("builtins:print", "printed by the forked child")
    assert result.ok, result.error
    assert "printed by the forked child" in result.output_tail


def _runtime_bootstrap():
    """local/runtime_bootstrap.py as the local runtime loads it: a script, not a module of the package."""
    import importlib.util
    from pathlib import Path

    import layoutlab.local

    path = Path(layoutlab.local.__file__).with_name("runtime_bootstrap.py")
    spec = importlib.util.spec_from_file_location("runtime_bootstrap_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_local_runtime_reports_its_tasks_through_the_same_steps(tmp_path, monkeypatch):
    """The bootstrap's tasks share the isolated child's outcome file; what differs is the runtime's own:
    a Fargate command's non-zero exit is Step Functions' States.TaskFailed (no traceback), a result JSON
    cannot hold is made a string, and any other failure is reported by its type with its traceback."""
    import datetime
    import json

    bootstrap = _runtime_bootstrap()
    request = {"target": "task:convert", "payload": None, "result_path": str(tmp_path / "outcome.json")}

    def outcome(call):
        monkeypatch.setattr(bootstrap, "call", call)
        status = bootstrap.run_request(request)
        return status, json.loads((tmp_path / "outcome.json").read_text())

    def container_exits(_request):
        raise bootstrap.TaskExit("essential container exited with code 3")

    status, failed = outcome(container_exits)
    assert status == 1 and failed["error_type"] == "States.TaskFailed" and failed["traceback"] is None
    assert failed["error"] == "essential container exited with code 3" and failed["peak_rss_mb"] > 0
    status, done = outcome(lambda _request: {"day": datetime.date(2024, 1, 2)})
    assert status == 0 and done["result"] == {"day": "2024-01-02"}
    status, broken = outcome(lambda _request: json.loads("{not json"))
    assert status == 1 and broken["error_type"] == "JSONDecodeError" and "Traceback" in broken["traceback"]


def _probe_library(tmp_path, monkeypatch, name: str, body: str = "") -> Path:
    """A module ``name`` on sys.path that appends a line to its log each time a process imports it."""
    log = tmp_path / f"{name}.log"
    (tmp_path / f"{name}.py").write_text(
        "import os\n"
        "try:\n"  # a case's child is confined to its task folder (sandbox): it cannot write the log
        f"    with open({str(log)!r}, 'a') as fh:\n"
        "        fh.write(f'{os.getpid()}\\n')\n"
        "except PermissionError:\n"
        "    pass\n"
        f"{body}\n"
        "def imported_by(_payload=None):\n"
        "    return os.getpid()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return log


def test_a_readers_libraries_are_imported_once_for_every_case_and_never_by_the_parent(tmp_path, monkeypatch):
    """xarray's ~1.5 s import once per bench task, not once per case: the children of a zygote that imported it.
    The parent never imports it, so a case of another reader does not carry it in its peak memory."""
    import sys

    log = _probe_library(tmp_path, monkeypatch, "probe_reader_library")
    children = []
    for _ in range(3):
        result = run_forked("probe_reader_library:imported_by", None, libraries=("probe_reader_library",))
        assert result.ok, result.error
        assert "probe_reader_library" in result.peak_rss_source
        children.append(result.result)
    assert len(set(children)) == 3 and os.getpid() not in children
    assert len(log.read_text().splitlines()) == 1  # one import, in the zygote
    assert "probe_reader_library" not in sys.modules
    slow = run_forked("time:sleep", 30, timeout=1.0, libraries=("probe_reader_library",))
    assert not slow.ok and slow.timed_out and slow.process_wall_s < 10
    limited = run_forked("numpy:ones", 2**28, memory_mb=1024, libraries=("probe_reader_library",))
    assert not limited.ok and limited.error_type == "MemoryError"
    assert len(log.read_text().splitlines()) == 1


def test_a_library_that_starts_a_thread_on_import_is_imported_by_each_child(tmp_path, monkeypatch):
    """A fork keeps only the forking thread (icechunk starts tokio workers when imported): such a library is
    not imported in a zygote, each case's child imports it and finds its threads running."""
    import sys

    log = _probe_library(tmp_path, monkeypatch, "probe_threaded_library",
                         "import threading, time\n"
                         "threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
                         "def threads(_payload=None):\n"
                         "    return threading.active_count()\n")
    for _ in range(2):
        result = run_forked("probe_threaded_library:threads", None, libraries=("probe_threaded_library",))
        assert result.ok, result.error
        assert result.result == 2  # its own thread runs in the case's child: the child imported it itself
    assert len(log.read_text().splitlines()) == 1  # the zygote's import, refused once and not tried again
    assert "probe_threaded_library" not in sys.modules
