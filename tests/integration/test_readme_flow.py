"""The README's first lines, run as a new user runs them: a shell with no AWS configuration (no AWS_*
variables, an empty HOME), `layoutlab local up`, `eval "$(layoutlab local env)"`, the AWS CLI copying a
file into the ingest bucket, `layoutlab results`. Nothing else starts the pipeline.

The file is over the AWS CLI's and boto3's multipart threshold (8 MiB both), so the copy is a
multipart upload. Before the copy the test puts a one-case plan where the local cloud looks for the
plan of uploads naming none (plans/local.json; the README's run gets the demo's plan there), so the
pipeline takes seconds rather than minutes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from boto3.s3.transfer import TransferConfig

from layoutlab.local import dispatch
from layoutlab.local.load import ONE_CASE_PLAN
from layoutlab.samples import atl03

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
AWS_CLI_MULTIPART_THRESHOLD = 8 * 2**20  # `aws configure set default.s3.multipart_threshold`'s default


def readme_local_lines() -> list[str]:
    """The README's shell block that starts with `layoutlab local up`, line by line."""
    blocks = re.findall(r"```sh\n(.*?)```", (REPO_ROOT / "README.md").read_text(), re.S)
    [block] = [b for b in blocks if b.startswith("layoutlab local up")]
    return [line for line in block.splitlines() if line.strip()]


def test_a_file_copied_with_the_aws_cli_produces_results_with_no_other_command(tmp_path):
    lines = readme_local_lines()
    assert [line.split()[0] for line in lines] == ["layoutlab", "eval", "aws", "layoutlab"]
    assert "my.h5" in lines[2]
    granule = atl03.write_atl03(tmp_path / "my.h5", photons=60_000)
    assert granule.stat().st_size > max(AWS_CLI_MULTIPART_THRESHOLD, TransferConfig().multipart_threshold)
    (tmp_path / "one-case.json").write_text(json.dumps(
        {**ONE_CASE_PLAN, "name": "one-case", "patterns": {"grid": [], "granule": ["granule-open-list"]}}))
    (tmp_path / "home").mkdir()
    venv_bin = Path(sys.executable).parent
    env = {"PATH": f"{venv_bin}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8",
           "LAYOUTLAB_STATE_DIR": str(tmp_path / "state"),
           "AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}
    if "LAYOUTLAB_TASK_TIMEOUT_S" in os.environ:
        env["LAYOUTLAB_TASK_TIMEOUT_S"] = os.environ["LAYOUTLAB_TASK_TIMEOUT_S"]
    all_done = ("import json, sys; e = json.load(sys.stdin)['executions']; "
                "sys.exit(0 if e and all(x['status'] != 'RUNNING' for x in e) else 1)")
    script = "\n".join([
        "set -eu",
        lines[0],
        lines[1],
        f"aws s3 cp one-case.json s3://{dispatch.INGEST_BUCKET}/plans/{dispatch.LOCAL_DEFAULT_PLAN}.json --only-show-errors",
        lines[2],
        f"for i in $(seq 600); do layoutlab local status --json | python -c \"{all_done}\" && break; sleep 1; done",
        "layoutlab local status",
        lines[3],
        f"echo ETag $(aws s3api head-object --bucket {dispatch.INGEST_BUCKET} --key incoming/my.h5 "
        "--query ETag --output text)",
    ])
    try:
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=900)
    finally:
        subprocess.run([str(venv_bin / "layoutlab"), "local", "down"], env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "executions: 0 running, 1 finished" in out and "SUCCEEDED" in out, out
    [etag] = re.findall(r"^ETag (\S+)$", out, re.M)
    assert etag.strip('"\\').endswith("-2"), etag  # the CLI's multipart upload: two parts
    results = out[out.index(lines[0]) if lines[0] in out else 0:]
    assert re.search(r"my-h5-[0-9a-f]{16}", results) and "granule-open-list" in results, out
