"""Each Lambda function's code + layers stay under Lambda's 250 MB unzipped limit, and the
layer really holds what the code imports (Linux x86_64 wheels for the runtime's CPython,
config.PYTHON_RUNTIME, built by layers/build_layer.py from uv.lock; this machine is
the same platform, so the layer can be imported here with the venv's site-packages off)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LAMBDA_UNZIPPED_LIMIT = 262_144_000  # bytes: "250 MB" for code + all layers, unzipped (AWS quotas)
# What the handlers import at run time (pyproject's dependencies minus the ones the layer
# leaves out on purpose: layers/build_layer.py NOT_IN_LAYER).
RUNTIME_IMPORTS = [
    "numpy", "h5py", "h5netcdf", "xarray", "zarr", "numcodecs", "obstore", "fsspec", "s3fs", "boto3",
    "aws_lambda_powertools", "aws_lambda_powertools.utilities.idempotency", "aws_xray_sdk", "psutil", "tqdm",
]


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def staged_asset_dirs(synth) -> dict[str, Path]:
    """Asset hash → the directory CDK staged (and would zip and upload)."""
    manifest = json.loads(Path(synth.outdir, f"{synth.config.stack_name('compute')}.assets.json").read_text())
    return {
        asset_hash: Path(synth.outdir, asset["source"]["path"])
        for asset_hash, asset in manifest["files"].items()
        if asset["source"].get("packaging") == "zip"
    }


@pytest.mark.slow
def test_each_function_code_plus_layers_is_under_the_unzipped_limit(dev):
    assets = staged_asset_dirs(dev)
    template = dev.template("compute")
    layer_assets = {
        logical_id: r["Properties"]["Content"]["S3Key"].split(".")[0]
        for logical_id, r in template["Resources"].items()
        if r["Type"] == "AWS::Lambda::LayerVersion"
    }
    sizes = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Lambda::Function" or "Handler" not in resource["Properties"]:
            continue
        props = resource["Properties"]
        if not props["Handler"].startswith("layoutlab.handlers."):
            continue  # CDK's own helper functions (dev's bucket auto-delete) are not ours
        code = directory_bytes(assets[props["Code"]["S3Key"].split(".")[0]])
        layers = sum(directory_bytes(assets[layer_assets[ref["Ref"]]]) for ref in props["Layers"])
        sizes[props["Handler"]] = (code, layers)
        assert code + layers < LAMBDA_UNZIPPED_LIMIT, f"{props['Handler']}: {code + layers:,} bytes"
    assert len(sizes) == 7  # ingest, plan, convert, bench, summarize, record_failure, backfill
    code, layers = next(iter(sizes.values()))
    print(f"\nunzipped: code {code / 1e6:.2f} MB + layer {layers / 1e6:.1f} MB = {(code + layers) / 1e6:.1f} MB "
          f"of {LAMBDA_UNZIPPED_LIMIT / 1e6:.0f} MB")
    # The code asset is the installed package only (layers/build_layer.py installs it from its
    # wheel: the package and its dist-info): no tests, caches or sources of anything else.
    code_dir = assets[next(r["Properties"]["Code"]["S3Key"].split(".")[0] for r in template["Resources"].values()
                          if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Handler", "").startswith("layoutlab."))]
    names = sorted(p.name for p in code_dir.iterdir())
    assert names[0] == "layoutlab" and all(n.startswith("layoutlab-") and n.endswith(".dist-info") for n in names[1:])
    assert len(names) <= 2
    assert not list(code_dir.rglob("__pycache__")) and not list(code_dir.rglob("tests"))


def run_isolated(script: str, paths: list[Path], environment: dict[str, str]) -> subprocess.CompletedProcess:
    """python -S (no site-packages: nothing can come from the venv) with only ``paths`` importable."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONDONTWRITEBYTECODE": "1",  # never add __pycache__ to the layer being measured
        **environment,
    }
    prologue = f"import sys; sys.path[:0] = {[str(p) for p in paths]!r}\n"
    return subprocess.run(
        [sys.executable, "-S", "-c", prologue + script], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.slow
def test_every_handler_imports_from_code_and_layer_with_the_deployed_environment(dev):
    """Each function's handler module loads with only its code + layer and exactly the environment
    variables the template gives it (the handlers read their settings at cold start)."""
    from layoutlab_cdk.template_text import render

    assets = staged_asset_dirs(dev)
    template = dev.template("compute")
    layer_paths = {
        logical_id: assets[r["Properties"]["Content"]["S3Key"].split(".")[0]] / "python"
        for logical_id, r in template["Resources"].items()
        if r["Type"] == "AWS::Lambda::LayerVersion"
    }
    checked = []
    for resource in template["Resources"].values():
        props = resource["Properties"]
        if resource["Type"] != "AWS::Lambda::Function" or not props.get("Handler", "").startswith("layoutlab."):
            continue
        module, _, function = props["Handler"].rpartition(".")
        code = assets[props["Code"]["S3Key"].split(".")[0]]
        environment = {k: render(v) for k, v in props["Environment"]["Variables"].items()}
        environment.update(AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1")  # set by the Lambda runtime
        paths = [code] + [layer_paths[ref["Ref"]] for ref in props["Layers"]]
        result = run_isolated(f"import {module}\nassert callable({module}.{function})\n", paths, environment)
        assert result.returncode == 0, f"{props['Handler']}:\n{result.stderr[-3000:]}"
        checked.append(module)
    assert len(checked) == 7  # (every one of the seven handlers)


@pytest.mark.slow
def test_the_layer_alone_provides_every_runtime_import(layer_dir):
    functions = Path(__file__).resolve().parents[2] / "functions"
    script = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
        f"import importlib; [importlib.import_module(m) for m in {RUNTIME_IMPORTS!r}]\n"
        "import layoutlab.observability, numpy, h5py\n"
        "assert numpy.__file__.startswith(sys.argv[1]), numpy.__file__\n"
        "print(numpy.__version__, h5py.version.hdf5_version)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # never add __pycache__ to the layer being measured
    # -S: no site-packages, so nothing can come from the venv; only the layer and the code.
    result = subprocess.run(
        [sys.executable, "-S", "-c", script, str(layer_dir / "python"), str(functions)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
