"""The local run executes the deployment artifacts the way Lambda and Fargate do, not the dev venv.

Each test starts the runtime the local dispatcher uses (``artifact_runtime.TaskHost``) and
asks a task what it sees: the runtime's Python with nothing installed, the function asset
and the layer on ``sys.path`` in Lambda's order (or the image's), an environment made from
scratch, and no package that only the development venv has.
"""

from __future__ import annotations

import os
import sys

import pytest

from layoutlab.local import artifact_runtime, dispatch
from layoutlab.local.artifact_runtime import Artifacts, TaskHost

ONLY_IN_THE_VENV = ["moto", "pytest", "hypothesis"]  # dev/local extras, not in the layer (jsonschema is: plans)


@pytest.fixture(scope="module")
def artifacts(layer_dir) -> Artifacts:  # layer_dir (tests/infra conftest style) builds them when stale
    return Artifacts.locate()


@pytest.fixture(scope="module", params=["lambda", "fargate"])
def host(request, artifacts):
    task_host = TaskHost(artifacts, request.param, dispatch.task_environment("http://127.0.0.1:9", None))
    task_host.start()
    yield task_host
    task_host.stop()


def probe(host: TaskHost, **payload):
    outcome = host.run("probe:", payload, memory_mb=1769, cpu=None, timeout=60, scratch_limit_mb=64,
                       env={"LAYOUTLAB_PLATFORM": "local-lambda"})
    return outcome


def test_a_task_imports_the_artifacts_and_nothing_of_the_venv(host, artifacts):
    outcome = probe(host, modules=["layoutlab", "numpy", "h5py", "zarr", *ONLY_IN_THE_VENV])
    assert outcome.ok, outcome.error
    seen = outcome.result
    for name in ONLY_IN_THE_VENV:
        assert seen["modules"][name].startswith("ImportError"), (name, seen["modules"][name])
    assert seen["modules"]["layoutlab"].startswith(str(artifacts.function))
    for name in ("numpy", "h5py", "zarr"):
        assert seen["modules"][name].startswith(str(artifacts.layer / "python")), seen["modules"][name]
    # the runtime's Python: this Python's version, a prefix with no packages of its own
    assert seen["version"][:2] == list(sys.version_info[:2])
    assert seen["prefix"] == str(artifacts.lang) and sys.prefix not in seen["sys_path"]
    assert not any(".venv" in entry or "site-packages" in entry and str(artifacts.root) not in entry
                   for entry in seen["sys_path"]), seen["sys_path"]
    assert "VIRTUAL_ENV" not in seen["environ"] and ".venv" not in seen["environ"]["PATH"]


def test_sys_path_and_environment_are_the_platforms(host, artifacts):
    seen = probe(host).result
    if host.kind == "lambda":
        # Lambda: PYTHONPATH is the runtime directory only; the bootstrap adds task root and layer in-process
        assert seen["environ"]["PYTHONPATH"] == str(artifacts.var_runtime)
        assert seen["environ"]["LAMBDA_TASK_ROOT"] == str(artifacts.function)
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        assert seen["sys_path"][:3] == [str(artifacts.function),
                                        str(artifacts.layer / "python" / "lib" / version / "site-packages"),
                                        str(artifacts.layer / "python")]
    else:
        # the image: PYTHONPATH=/var/task:/opt/python (cdk/container/Dockerfile), the working directory first
        assert seen["environ"]["PYTHONPATH"] == artifacts.image_pythonpath()
        assert seen["sys_path"][1:3] == [str(artifacts.function), str(artifacts.layer / "python")]


def test_a_bench_childs_imports_come_from_the_layer(host):
    """The bench handler measures each case in a child process; on Lambda the child was started with
    only PYTHONPATH=/var/runtime and could not import numpy. Here a case runs through the same call the
    handler makes, in a fresh interpreter (the stricter child), from the task the dispatcher started."""
    case = {"target": "s3://no-such-bucket-here/missing.h5", "pattern": "granule-open-list",
            "reader": "h5py-s3fs-default", "platform": "local-lambda"}
    outcome = host.run("layoutlab.bench.runner:run_case_isolated", case, memory_mb=1769, cpu=None, timeout=120,
                       scratch_limit_mb=64, env={"LAYOUTLAB_BENCH_CHILD": "interpreter",
                                                 "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9"})
    assert outcome.ok, outcome.error
    record = outcome.result
    assert record["isolation"]["child"] == "interpreter"
    # the child ran run_case: it imported layoutlab, the readers and s3fs, and reached the (absent) endpoint
    assert "ModuleNotFoundError" not in (record.get("error") or ""), record.get("error")
    assert record["status"] == "error" and "no-such-bucket-here" in record["error"]


def test_scratch_beyond_the_ephemeral_storage_fails_the_task(host):
    outcome = probe(host, write_scratch_bytes=100 * 2**20)  # the probe's limit is 64 MB
    assert not outcome.ok and outcome.error_type == "EphemeralStorageExceeded"
    assert "64 MB" in outcome.error and "No space left on device" in outcome.error


def test_repacks_c_code_loads_in_the_runtime(host):
    outcome = host.run("layoutlab.convert.fastcopy:unavailable_reason", None, memory_mb=1769, cpu=None,
                       timeout=60, scratch_limit_mb=64, env={})
    assert outcome.ok, outcome.error
    assert outcome.result is None  # None: built for this runtime and bound to the layer's libhdf5


def test_missing_artifacts_are_named_with_the_command_that_builds_them(tmp_path, monkeypatch):
    monkeypatch.setenv(artifact_runtime.ARTIFACTS_ENV, str(tmp_path))
    with pytest.raises(artifact_runtime.ArtifactsMissing, match="make artifacts"):
        Artifacts.locate()
    assert os.listdir(tmp_path) == []  # nothing made up in its place
