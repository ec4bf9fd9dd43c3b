#!/usr/bin/env python3
"""CDK entry point: `cdk synth|deploy -c env=NAME` (cdk.json: "app": ".venv/bin/python cdk/app.py").

Environments are defined in cdk.json's context (``layoutlab:environments``). Without
credentials the stacks are environment-agnostic, so `make synth ENV=dev` works offline;
`cdk deploy` uses the account and region of the current AWS profile.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aws_cdk as cdk  # noqa: E402

from layoutlab_cdk.app_builder import build_app  # noqa: E402
from layoutlab_cdk.config import ConfigError  # noqa: E402


def main() -> None:
    account, region = os.environ.get("CDK_DEFAULT_ACCOUNT"), os.environ.get("CDK_DEFAULT_REGION")
    env = cdk.Environment(account=account, region=region) if account and region else None
    try:
        app, _stacks = build_app(env=env)
    except (ConfigError, FileNotFoundError) as error:
        sys.exit(f"layoutlab cdk: error: {error}")
    app.synth()


if __name__ == "__main__":
    main()
