"""Integration tests run the local cloud, whose tasks execute the deployment artifacts
(functions/layoutlab/local/artifact_runtime.py): build them first when they are missing or
older than the code (layers/build_layer.py; `make test` has already done it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session", autouse=True)
def layer_dir() -> Path:
    spec = importlib.util.spec_from_file_location("layoutlab_layer_builder", REPO_ROOT / "layers" / "build_layer.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    return builder.ensure_built(quiet=True)


@pytest.fixture(scope="module")
def cloud_env(local_cloud):
    """The local cloud's environment for the whole module (``cloud`` would empty moto after every test)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in local_cloud.env().items():
            patch.setenv(key, value)
        try:
            yield local_cloud
        finally:
            local_cloud.reset()
