"""No AWS configuration is needed locally (README's promise), and where AWS is needed, one line says what is missing.

The suite sets dummy credentials for itself (tests/conftest.py), so it could not see a
local command that needs them. Here the CLI runs as a new user's shell would have it:
an environment with no AWS variable at all and ``HOME`` an empty directory (no ~/.aws).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture
def bare_env(tmp_path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("AWS_") and name not in ("HOME", "LAYOUTLAB_STATE_DIR")}
    env.update(HOME=str(home), LAYOUTLAB_STATE_DIR=str(tmp_path / "state"))
    return env


def layoutlab(env, *args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "layoutlab.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def assert_no_traceback(result):
    assert "Traceback" not in result.stderr and "NoCredentialsError" not in result.stderr, result.stderr[-2000:]


def test_local_commands_need_no_credentials_region_or_aws_config(bare_env, tmp_path):
    granule = tmp_path / "granule.h5"
    made = layoutlab(bare_env, "sample", "atl03", str(granule), "--photons", "2000")
    assert made.returncode == 0, made.stderr
    inspected = layoutlab(bare_env, "inspect", str(granule), "--json")
    assert inspected.returncode == 0 and json.loads(inspected.stdout)
    # the command a new user tried: it starts the local cloud, uploads the file and measures one case
    measured = layoutlab(bare_env, "bench", str(granule), "--pattern", "granule-open-list",
                         "--reader", "h5py-s3fs-default", "--json")
    assert_no_traceback(measured)
    assert measured.returncode == 0, measured.stderr[-2000:]
    [record] = json.loads(measured.stdout) if measured.stdout.lstrip().startswith("[") else [json.loads(measured.stdout)]
    assert record["status"] == "ok" and record["requests"] > 0
    # a local cloud left running serves the next commands, with no credentials either
    up = layoutlab(bare_env, "local", "up")
    try:
        assert up.returncode == 0, up.stderr
        status = layoutlab(bare_env, "local", "status", "--json")
        assert status.returncode == 0 and json.loads(status.stdout)
        results = layoutlab(bare_env, "results", "--format", "json")
        assert_no_traceback(results)
        # a fresh local cloud holds no results table yet: said in one line, nothing about credentials
        endpoint = json.loads(status.stdout)["moto_endpoint"]
        assert results.returncode == 0 or results.stderr.strip().endswith(f"not found at {endpoint}"), results.stderr
        assert "credentials" not in results.stderr
    finally:
        down = layoutlab(bare_env, "local", "down")
    assert down.returncode == 0, down.stderr


def test_commands_that_need_aws_say_what_is_missing_in_one_line(bare_env):
    for args in (("results", "--env", "dev"), ("results", "--aws")):
        result = layoutlab(bare_env, *args, timeout=60)
        assert_no_traceback(result)
        assert result.returncode != 0
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "no credentials" in lines[0] and "local results need none" in lines[0], lines
    doctor = layoutlab(bare_env, "doctor", "--env", "dev", timeout=60)
    assert_no_traceback(doctor)
    assert doctor.returncode == 2 and "no AWS credentials" in doctor.stdout + doctor.stderr
