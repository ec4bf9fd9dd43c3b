"""cdk.json is checked at synth (layoutlab_cdk.config.load → validate): settings that deploy
fine but cannot work — scratch space an input can outgrow, source versions expiring under
version-pinned datasets, ECS timeouts shorter than the largest conversion — are refused with
a message naming the setting and the numbers. No synthesis here: these run in a second."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from layoutlab_cdk import config as cdk_config  # cdk/ is put on sys.path by conftest.py

REPO_ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30


@pytest.fixture
def context() -> dict:
    return copy.deepcopy(json.loads((REPO_ROOT / "cdk.json").read_text())["context"])


def environment(context: dict, name: str) -> dict:
    return context[cdk_config.ENVIRONMENTS_KEY][name]


def test_every_committed_environment_passes_its_checks(context):
    names = sorted(context[cdk_config.ENVIRONMENTS_KEY])
    assert {"dev", "prod"} <= set(names)
    for name in names:
        config = cdk_config.load(context, name)
        assert cdk_config.validate(config) == []
        # what the checks promise, spelled out once more on the numbers
        convert = config.functions["convert"]
        assert cdk_config.SCRATCH_FACTOR * config.fargate_convert_above_bytes <= convert.ephemeral_storage_mb * 2**20
        usable = (config.convert_task.ephemeral_storage_gib - cdk_config.FARGATE_IMAGE_RESERVE_GIB) * GIB
        assert cdk_config.SCRATCH_FACTOR * config.max_input_bytes <= usable


def test_lambda_scratch_an_input_below_the_fargate_threshold_could_outgrow_is_refused(context):
    dev = environment(context, "dev")
    dev["functions"]["convert"]["ephemeral_storage_mb"] = 4096  # the value before issue 14
    dev["fargate_convert_above_bytes"] = 2 * GIB
    with pytest.raises(cdk_config.ConfigError) as error:
        cdk_config.load(context, "dev")
    message = str(error.value)
    assert "fargate_convert_above_bytes=2147483648" in message
    assert "functions.convert.ephemeral_storage_mb=4096" in message
    assert f"{cdk_config.SCRATCH_FACTOR} x input = 4.60 GiB" in message and "gives 4.00 GiB" in message
    # the fix it suggests passes
    suggested = int(re.search(r"lower the threshold to <= (\d+) bytes", message).group(1))
    dev["fargate_convert_above_bytes"] = suggested
    cdk_config.load(context, "dev")


def test_fargate_scratch_the_largest_accepted_input_could_outgrow_is_refused(context):
    prod = environment(context, "prod")
    prod["convert_task"]["ephemeral_storage_gib"] = 100  # the values before issue 14
    prod["max_input_bytes"] = 100 * GIB
    with pytest.raises(cdk_config.ConfigError) as error:
        cdk_config.load(context, "prod")
    message = str(error.value)
    assert "max_input_bytes=107374182400" in message
    assert "convert_task.ephemeral_storage_gib=100" in message
    assert "230.00 GiB of scratch" in message and f"{cdk_config.FARGATE_IMAGE_RESERVE_GIB} GiB for the image" in message


@pytest.mark.parametrize(("setting", "value", "expected"), [
    ("lambda", 20480, "outside Lambda's 512..10240 MB"),
    ("fargate", 400, "outside Fargate's 21..200 GiB"),
])
def test_ephemeral_sizes_outside_what_aws_accepts_are_refused(context, setting, value, expected):
    dev = environment(context, "dev")
    if setting == "lambda":
        dev["functions"]["convert"]["ephemeral_storage_mb"] = value
    else:
        dev["convert_task"]["ephemeral_storage_gib"] = value
    with pytest.raises(cdk_config.ConfigError, match=re.escape(expected)):
        cdk_config.load(context, "dev")


def test_noncurrent_versions_outlive_the_datasets_that_pin_them(context):
    """prod keeps variants (variants_expire_days 0) and results, so it keeps every version;
    an environment that expires variants may expire old versions, but not before them."""
    assert cdk_config.load(context, "prod").noncurrent_versions_expire_days == 0
    prod = environment(context, "prod")
    prod["noncurrent_versions_expire_days"] = 30  # the rule before issue 14
    with pytest.raises(cdk_config.ConfigError, match=r"noncurrent_versions_expire_days=30 would expire source "
                       r"versions that datasets still point at \(variants_expire_days=0; 0 keeps\): use 0"):
        cdk_config.load(context, "prod")
    dev = environment(context, "dev")
    dev["variants_expire_days"], dev["noncurrent_versions_expire_days"] = 14, 7
    with pytest.raises(cdk_config.ConfigError, match=r"use 0 or >= 14"):
        cdk_config.load(context, "dev")
    dev["noncurrent_versions_expire_days"] = 14
    cdk_config.load(context, "dev")


def test_convert_and_bench_sizes_must_be_platforms_layoutlab_knows(context):
    dev = environment(context, "dev")
    dev["convert_task"]["cpu"], dev["convert_task"]["memory_mb"] = 2048, 2048  # not a Fargate size
    with pytest.raises(cdk_config.ConfigError, match=r"convert fargate platform: .*fargate-2-2048"):
        cdk_config.load(context, "dev")


def test_ecs_task_timeouts_in_the_asl_fit_the_environment(context):
    timeouts = cdk_config.ecs_task_timeouts()
    assert set(timeouts) == {"ConvertTaskDefinitionArn", "BenchTaskDefinitionArn"}
    assert all(isinstance(seconds, int) and seconds > 0 for seconds in timeouts.values())
    prod = cdk_config.load(context, "prod")
    needed = cdk_config.FARGATE_START_SECONDS + prod.max_input_bytes / cdk_config.FARGATE_CONVERT_MIN_BYTES_PER_S
    assert timeouts["ConvertTaskDefinitionArn"] >= needed
    assert timeouts["BenchTaskDefinitionArn"] >= prod.functions["bench"].timeout_seconds
    # a convert timeout too short for the largest input, a state without one: both refused
    definition = json.loads(cdk_config.ASL_PATH.read_text())
    convert_state = definition["States"]["ConvertVariants"]["ItemProcessor"]["States"]["ConvertOnFargate"]
    convert_state["TimeoutSeconds"] = 900
    bench_state = definition["States"]["BenchCases"]["ItemProcessor"]["States"]["BenchOnFargate"]
    del bench_state["TimeoutSeconds"]
    problems = cdk_config.task_timeout_problems(prod, definition)
    assert any("ConvertOnFargate TimeoutSeconds=900 is too short for max_input_bytes=85899345920" in p for p in problems)
    assert any("${BenchTaskDefinitionArn} has no TimeoutSeconds" in p for p in problems)


def test_deletion_protection_cannot_be_combined_with_a_stack_that_deletes_its_tables(context):
    environment(context, "dev")["table_deletion_protection"] = True
    with pytest.raises(cdk_config.ConfigError, match="table_deletion_protection=true with removal_policy 'destroy'"):
        cdk_config.load(context, "dev")


@pytest.mark.parametrize("ceilings, expected", [
    ({"max_cases": 5000, "max_casse": 10}, "dev.ceilings: unknown ceiling(s) max_casse"),
    ({"max_cases": -1}, "dev.ceilings: ceiling max_cases must be a positive integer, got -1"),
    ({"max_expansion": "lots"}, "dev.ceilings: ceiling max_expansion must be a positive number, got 'lots'"),
])
def test_a_ceiling_that_is_not_one_is_refused_at_synth_naming_it(context, ceilings, expected):
    environment(context, "dev")["ceilings"] = ceilings
    with pytest.raises(cdk_config.ConfigError, match=re.escape(expected)):
        cdk_config.load(context, "dev")


def test_an_environment_without_ceilings_gets_layoutlabs_defaults(context):
    from layoutlab.ceilings import Ceilings

    del environment(context, "dev")["ceilings"]
    assert cdk_config.load(context, "dev").ceilings == Ceilings()
