"""Shared fixtures for the CDK tests: the app is synthesized once per session per environment.

The synthesis is real: the dependency layer is built by layers/build_layer.py (uv.lock's
wheels for the runtime, cached under layers/build/ and rebuilt only when the lock changes), cdk-nag's AwsSolutions pack runs as a validation plugin (an unacknowledged
finding makes synthesis fail), and the cloud assembly is written to a temporary dir.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CDK_DIR = REPO_ROOT / "cdk"
if str(CDK_DIR) not in sys.path:
    sys.path.insert(0, str(CDK_DIR))


def load_layer_builder():
    """layers/build_layer.py as a module (it is a script, not part of a package)."""
    spec = importlib.util.spec_from_file_location("layoutlab_layer_builder", REPO_ROOT / "layers" / "build_layer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Synthesized:
    env_name: str
    config: object  # layoutlab_cdk.config.EnvConfig
    stacks: object  # layoutlab_cdk.app_builder.LayoutlabStacks
    assembly: object  # aws_cdk.cx_api.CloudAssembly
    outdir: Path

    def template(self, part: str) -> dict:
        return self.assembly.get_stack_by_name(self.config.stack_name(part)).template

    def resources(self, part: str, cfn_type: str) -> dict[str, dict]:
        return {k: v for k, v in self.template(part)["Resources"].items() if v["Type"] == cfn_type}

    def all_resources(self) -> dict[str, dict]:
        merged = {}
        for part in ("data", "compute", "pipeline", "observability"):
            for logical_id, resource in self.template(part)["Resources"].items():
                merged[f"{part}/{logical_id}"] = resource
        return merged


@pytest.fixture(scope="session")
def layer_dir() -> Path:
    return load_layer_builder().ensure_built(quiet=True)


def _synthesize(env_name: str, layer_dir: Path, tmp_path_factory) -> Synthesized:
    import aws_cdk  # noqa: F401  (imported here so collection stays fast)
    from layoutlab_cdk.app_builder import build_app

    outdir = tmp_path_factory.mktemp(f"cdk-out-{env_name}")
    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    app, stacks = build_app(env_name, outdir=str(outdir), layer_dir=layer_dir, context=context)
    assembly = app.synth()
    return Synthesized(env_name, stacks.config, stacks, assembly, outdir)


@pytest.fixture(scope="session")
def dev(layer_dir, tmp_path_factory) -> Synthesized:
    return _synthesize("dev", layer_dir, tmp_path_factory)


@pytest.fixture(scope="session")
def prod(layer_dir, tmp_path_factory) -> Synthesized:
    return _synthesize("prod", layer_dir, tmp_path_factory)
