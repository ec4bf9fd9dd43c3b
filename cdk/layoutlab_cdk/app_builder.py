"""Build the whole app for one environment; used by cdk/app.py and by tests/infra."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from .compute_stack import ComputeStack
from .config import REPO_ROOT, EnvConfig, load
from .data_stack import DataStack
from .observability_stack import ObservabilityStack
from .pipeline_stack import PipelineStack

DEFAULT_LAYER_DIR = REPO_ROOT / "layers" / "build" / "dependencies"


class LayoutlabStacks:
    """The four stacks of one environment, named layoutlab-<env>-<part>."""

    def __init__(self, app: cdk.App, config: EnvConfig, *, layer_dir: Path, env: cdk.Environment | None):
        common = dict(env=env, tags={"project": "layoutlab", "layoutlab:env": config.name})
        self.data = DataStack(app, config.stack_name("data"), config=config, **common)
        self.compute = ComputeStack(
            app, config.stack_name("compute"), config=config, layer_dir=layer_dir, **common
        )
        self.pipeline = PipelineStack(
            app, config.stack_name("pipeline"), config=config, compute=self.compute, **common
        )
        # Stacks refer to buckets and tables by their fixed names; deploy data first anyway.
        self.compute.add_stack_dependency(self.data)
        self.config = config
        self.observability = ObservabilityStack(
            app,
            config.stack_name("observability"),
            config=config,
            compute=self.compute,
            pipeline=self.pipeline,
            **common,
        )

    @property
    def all(self) -> list[cdk.Stack]:
        return [self.data, self.compute, self.pipeline, self.observability]


def build_app(
    env_name: str | None = None,
    *,
    outdir: str | None = None,
    layer_dir: Path = DEFAULT_LAYER_DIR,
    nag: bool = True,
    env: cdk.Environment | None = None,
    context: dict | None = None,
) -> tuple[cdk.App, LayoutlabStacks]:
    """The app for ``env_name`` (default: ``-c env=NAME``), with cdk-nag's AwsSolutions checks.

    cdk-nag runs as a CDK policy-validation plugin: ``app.synth()`` fails on any finding
    that is not acknowledged (each acknowledgement in the stacks carries its reason).
    """
    app = cdk.App(outdir=outdir, context=context) if outdir else cdk.App(context=context)
    environments = {"layoutlab:environments": app.node.try_get_context("layoutlab:environments")}
    config = load(environments, env_name or app.node.try_get_context("env"))
    stacks = LayoutlabStacks(app, config, layer_dir=layer_dir, env=env)
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app, stacks
