#!/usr/bin/env python3
"""CDK entry point: `cdk synth|deploy -c env=NAME` (cdk.json: "app": ".venv/bin/python cdk/app.py").

Environments are defined in cdk.json's context (``layoutlab:environments``). The stacks
are environment-agnostic on purpose: nothing is looked up at synthesis (no
cdk.context.json, no credentials needed for `make synth`), and `cdk deploy` deploys
into the account and region of the current AWS profile.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from layoutlab_cdk.app_builder import build_app  # noqa: E402
from layoutlab_cdk.config import ConfigError  # noqa: E402


def main() -> None:
    try:
        app, _stacks = build_app()
    except (ConfigError, FileNotFoundError) as error:
        sys.exit(f"layoutlab cdk: error: {error}")
    app.synth()


if __name__ == "__main__":
    main()
