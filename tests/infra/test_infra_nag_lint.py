"""cdk-nag (AwsSolutions) has zero unacknowledged findings, every acknowledgement has a
reason, and cfn-lint finds nothing wrong in the synthesized templates."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# W3005 ("DependsOn already enforced by GetAtt"): CDK makes each function depend on its
# role's policy explicitly so the policy exists before the first invocation; harmless.
CFN_LINT_IGNORED = ["W3005"]


def acknowledgements(synth) -> dict[str, str]:
    """Acknowledged rules as CDK records them in each stack's metadata file."""
    found = {}
    for metadata_file in Path(synth.outdir).glob("*.metadata.json"):
        for path, entries in json.loads(metadata_file.read_text()).items():
            for entry in entries:
                if entry["type"] == "aws:cdk:acknowledged-rules":
                    for rule, reason in entry["data"].items():
                        if "AwsSolutions-" in rule:  # CDK acknowledges some of its own checks too
                            found[f"{path} {rule}"] = reason
    return found


@pytest.mark.parametrize("env_fixture", ["dev", "prod"])
def test_cdk_nag_passes_with_reasoned_acknowledgements_only(env_fixture, request):
    synth = request.getfixturevalue(env_fixture)  # synthesis itself fails on any open finding
    report = json.loads(Path(synth.outdir, "validation-report.json").read_text())
    violations = [v for plugin in report["pluginReports"] for v in plugin.get("violations", [])]
    assert violations == []
    acks = acknowledgements(synth)
    assert acks, "the stacks acknowledge findings (IAM5 for prefix-scoped S3 and more): none found"
    for where, reason in acks.items():
        assert len(reason.split()) >= 5, f"{where}: {reason!r} is not a reason"
    assert any("AwsSolutions-IAM5[Resource::*]" in where for where in acks)


def test_acknowledgements_go_through_the_helper_that_demands_a_reason():
    sources = (REPO_ROOT / "cdk" / "layoutlab_cdk").glob("*.py")
    direct = [p.name for p in sources if p.name != "nag.py" and re.search(r"\.acknowledge\(", p.read_text())]
    assert direct == []
    from layoutlab_cdk.nag import acknowledge

    with pytest.raises(ValueError, match="real reason"):
        acknowledge(None, "AwsSolutions-S1", "because")


@pytest.mark.slow
def test_cdk_nag_is_live_an_insecure_bucket_fails_synthesis(layer_dir, tmp_path):
    """The same wiring as the real app catches a finding: synthesis refuses a bucket without SSL/logging."""
    import aws_cdk as cdk
    from aws_cdk import aws_s3 as s3
    from layoutlab_cdk.app_builder import build_app

    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    app, stacks = build_app("dev", outdir=str(tmp_path), layer_dir=layer_dir, context=context)
    s3.Bucket(stacks.data, "Careless")
    with pytest.raises(Exception) as error:
        app.synth()
    message = str(error.value)
    assert "Careless" in message and "AwsSolutions-S10" in message, message[:2000]
    del cdk


@pytest.mark.slow
@pytest.mark.parametrize("env_fixture", ["dev", "prod"])
def test_cfn_lint_finds_nothing_in_the_templates(env_fixture, request):
    synth = request.getfixturevalue(env_fixture)
    from cfnlint.api import ManualArgs, lint_file

    templates = sorted(Path(synth.outdir).glob("*.template.json"))
    assert len(templates) == 4
    config = ManualArgs(regions=["us-east-1", "eu-west-1"], ignore_checks=CFN_LINT_IGNORED)
    findings = [f"{t.name}: {match}" for t in templates for match in lint_file(t, config=config)]
    assert findings == []


def test_cfn_lint_is_live_it_reports_a_broken_template(tmp_path):
    from cfnlint.api import ManualArgs, lint_file

    broken = tmp_path / "broken.template.json"
    broken.write_text(json.dumps({"Resources": {"Fn": {"Type": "AWS::Lambda::Function", "Properties": {
        "Runtime": "python3.11", "Handler": "x.handler", "MemorySize": 1, "Code": {"ZipFile": "x"}}}}}))
    matches = lint_file(broken, config=ManualArgs(regions=["us-east-1"], ignore_checks=CFN_LINT_IGNORED))
    assert any("Role" in str(m) for m in matches)  # Role is required
