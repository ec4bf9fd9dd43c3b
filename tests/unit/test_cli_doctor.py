"""``layoutlab doctor`` / ``make preflight``: what in cdk.json an AWS account cannot run.

STS, SSM (the bootstrap version parameter) and CloudFormation (the CDKToolkit stack) are
moto's. moto 5.2.5 implements neither Lambda's GetAccountSettings nor Service Quotas for
``lambda`` or ``fargate`` (its Service Quotas knows only ``vpc``): those two clients are
real boto3 clients answered by botocore's Stubber, which checks every request and
response against the service model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from layoutlab import cli
from layoutlab.commands import doctor

REPO = Path(__file__).resolve().parents[2]
FARGATE_QUOTA = {"ServiceCode": "fargate", "QuotaCode": "L-3032A538"}


def write_cdk_json(tmp_path: Path, **changes) -> Path:
    """This checkout's cdk.json with the 'dev' environment changed: dotted keys, e.g. functions.convert.memory_mb."""
    app = json.loads((REPO / "cdk.json").read_text())
    env = app["context"]["layoutlab:environments"]["dev"]
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        target = env
        for part in path:
            target = target[part]
        target[last] = value
    out = tmp_path / "cdk.json"
    out.write_text(json.dumps(app))
    return out


class FakeAccount:
    """moto for STS/SSM/CloudFormation; Stubber-answered Lambda and Service Quotas clients."""

    def __init__(self):
        self.ssm = boto3.client("ssm", region_name="us-east-1")
        self.cloudformation = boto3.client("cloudformation", region_name="us-east-1")
        self.lambda_ = boto3.client("lambda", region_name="us-east-1")
        self.quotas = boto3.client("service-quotas", region_name="us-east-1")
        self.lambda_stub, self.quotas_stub = Stubber(self.lambda_), Stubber(self.quotas)

    def bootstrap(self, version: int = 21) -> None:
        self.ssm.put_parameter(Name="/cdk-bootstrap/hnb659fds/version", Value=str(version), Type="String")

    def lambda_settings(self, concurrency: int = 1000, unreserved: int | None = None) -> None:
        unreserved = concurrency if unreserved is None else unreserved
        self.lambda_stub.add_response("get_account_settings", {
            "AccountLimit": {"TotalCodeSize": 80530636800, "CodeSizeUnzipped": 262144000, "CodeSizeZipped": 52428800,
                             "ConcurrentExecutions": concurrency, "UnreservedConcurrentExecutions": unreserved},
            "AccountUsage": {"TotalCodeSize": 0, "FunctionCount": 0}}, {})

    def lambda_quotas(self, *extra: dict) -> None:
        quotas = [{"ServiceCode": "lambda", "QuotaCode": "L-B99A9384", "QuotaName": "Concurrent executions",
                   "Value": 1000.0, "Adjustable": True, "GlobalQuota": False},
                  {"ServiceCode": "lambda", "QuotaCode": "L-2ACBD22F", "QuotaName": "Function and layer storage",
                   "Value": 75.0, "Adjustable": True, "GlobalQuota": False}, *extra]
        self.quotas_stub.add_response("list_service_quotas", {"Quotas": quotas}, {"ServiceCode": "lambda"})

    def fargate_vcpu(self, value: float = 4000.0, applied: bool = True) -> None:
        quota = {**FARGATE_QUOTA, "QuotaName": "Fargate On-Demand vCPU resource count", "Value": value,
                 "Adjustable": True, "GlobalQuota": False}
        if applied:
            self.quotas_stub.add_response("get_service_quota", {"Quota": quota}, FARGATE_QUOTA)
        else:  # Service Quotas has no applied value for a quota never changed: its AWS default answers
            self.quotas_stub.add_client_error("get_service_quota", "NoSuchResourceException", "no applied value",
                                              400, expected_params=FARGATE_QUOTA)
            self.quotas_stub.add_response("get_aws_default_service_quota", {"Quota": quota}, FARGATE_QUOTA)

    def clients(self) -> dict:
        self.lambda_stub.activate()
        self.quotas_stub.activate()
        return {"lambda": self.lambda_, "service-quotas": self.quotas, "ssm": self.ssm,
                "cloudformation": self.cloudformation}


@pytest.fixture
def account(monkeypatch):
    with mock_aws():
        fake = FakeAccount()
        monkeypatch.setattr(doctor, "session_clients", lambda session: fake.clients())
        yield fake
        fake.lambda_stub.assert_no_pending_responses()
        fake.quotas_stub.assert_no_pending_responses()


def an_account(fake: FakeAccount, *, bootstrap_version: int | None = 21, answers_lambda_settings: bool = True,
               concurrency: int = 1000, unreserved: int | None = None, lambda_quotas: tuple[dict, ...] = (),
               fargate_vcpu: float = 4000.0, fargate_applied: bool = True) -> None:
    """The answers to every read doctor makes; by default a roomy account (bootstrapped, Lambda's default
    concurrency, a Fargate quota far above the stages' needs). ``bootstrap_version=None``: never bootstrapped;
    ``answers_lambda_settings=False``: the test answers GetAccountSettings itself."""
    if bootstrap_version is not None:
        fake.bootstrap(bootstrap_version)
    if answers_lambda_settings:
        fake.lambda_settings(concurrency, unreserved)
    fake.lambda_quotas(*lambda_quotas)
    fake.fargate_vcpu(fargate_vcpu, applied=fargate_applied)


def doctor_json(capsys, cdk_json: Path, env: str = "dev") -> tuple[int, dict]:
    status = cli.main(["doctor", "--env", env, "--cdk-json", str(cdk_json), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["exit_status"] == status
    return status, report


def by_check(report: dict) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for finding in report["findings"]:
        found.setdefault(finding["check"], []).append(finding)
    return found


def test_everything_fits_an_account(account, tmp_path, capsys):
    an_account(account)
    status, report = doctor_json(capsys, write_cdk_json(tmp_path))
    assert status == 0
    assert {f["severity"] for f in report["findings"]} == {"ok"}
    assert set(by_check(report)) == {"bootstrap", "lambda-memory", "lambda-concurrency", "fargate-vcpu"}
    assert report["account"]["account_id"] == "123456789012" and report["account"]["region"] == "us-east-1"
    assert report["account"]["bootstrap_version"] == 21 and report["account"]["fargate_vcpu"] == 4000


def test_the_text_report_is_one_line_per_check_and_a_verdict(account, tmp_path, capsys):
    an_account(account)
    assert cli.main(["doctor", "--env", "dev", "--cdk-json", str(write_cdk_json(tmp_path))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("layoutlab doctor: environment 'dev' of cdk.json on account 123456789012, region us-east-1")
    assert [line.split()[0] for line in lines[1:-1]] == ["ok"] * 4
    assert lines[-1] == "everything in 'dev' fits this account"


def test_a_function_above_the_accounts_memory_maximum(account, tmp_path, capsys):
    # (should Service Quotas ever list a Lambda memory quota, it is the account's maximum)
    an_account(account, lambda_quotas=({"ServiceCode": "lambda", "QuotaCode": "L-0000MEM0",
                                        "QuotaName": "Function memory maximum", "Value": 3008.0, "Adjustable": True,
                                        "GlobalQuota": False},))
    status, report = doctor_json(capsys, write_cdk_json(tmp_path, **{"functions.convert.memory_mb": 10240}))
    assert status == 1
    [memory] = by_check(report)["lambda-memory"]
    assert memory["severity"] == "ERROR"
    assert "functions.convert.memory_mb=10240 is above 3008 MB (Service Quotas: Function memory maximum" in memory["message"]
    assert "lower it to <= 3008" in memory["fix"]


def test_memory_above_the_service_maximum_is_an_error_on_any_account(account, tmp_path, capsys):
    an_account(account)
    status, report = doctor_json(capsys, write_cdk_json(tmp_path, **{"functions.bench.memory_mb": 12000}))
    assert status == 1
    [memory] = by_check(report)["lambda-memory"]
    assert memory["severity"] == "ERROR" and "functions.bench.memory_mb=12000 is above 10240 MB" in memory["message"]


def test_a_new_accounts_reduced_quotas_warn_of_the_3008_mb_cap(account, tmp_path, capsys):
    # concurrency below the default 1,000 (the new-account profile) but enough for dev's 20 at once
    an_account(account, concurrency=50)
    status, report = doctor_json(capsys, write_cdk_json(tmp_path, **{"functions.convert.memory_mb": 4096}))
    assert status == 0  # a warning: AWS exposes no memory cap to read
    [memory] = by_check(report)["lambda-memory"]
    assert memory["severity"] == "WARN"
    assert "functions.convert.memory_mb=4096" in memory["message"]
    assert "Member must have value less than or equal to 3008" in memory["message"]


def test_max_concurrency_above_the_unreserved_concurrency(account, tmp_path, capsys):
    an_account(account, concurrency=10)
    status, report = doctor_json(capsys, write_cdk_json(tmp_path, **{"functions.convert.memory_mb": 3008}))
    assert status == 1
    [concurrency] = by_check(report)["lambda-concurrency"]
    assert concurrency["severity"] == "ERROR"
    assert "max_concurrency.work_units=20, max_concurrency.bench=20" in concurrency["message"]
    assert "10 unreserved concurrent executions (of 10)" in concurrency["message"]
    assert "lower them to <= 10" in concurrency["fix"] and "L-B99A9384" in concurrency["fix"]
    # concurrency 10 is the new-account profile, but 3008 MB functions are within its usual cap
    assert by_check(report)["lambda-memory"][0]["severity"] == "ok"


def test_reserved_concurrency_elsewhere_leaves_less_for_the_pipeline(account, tmp_path, capsys):
    an_account(account, concurrency=1000, unreserved=15)
    status, report = doctor_json(capsys, write_cdk_json(tmp_path))
    assert status == 1
    assert "15 unreserved concurrent executions (of 1000)" in by_check(report)["lambda-concurrency"][0]["message"]


@pytest.mark.parametrize("applied", [True, False])
def test_fargate_tasks_above_the_vcpu_quota(account, tmp_path, capsys, applied):
    an_account(account, fargate_vcpu=6.0, fargate_applied=applied)
    status, report = doctor_json(capsys, write_cdk_json(tmp_path, **{
        "bench_task.cpu": 1024, "max_concurrency.bench": 20, "convert_task.cpu": 2048, "max_concurrency.convert": 4}))
    assert status == 1
    findings = by_check(report)["fargate-vcpu"]
    assert [f["severity"] for f in findings] == ["ERROR", "ERROR"]
    bench, convert = sorted(findings, key=lambda f: f["message"])  # "bench on ..." < "convert on ..."
    assert "max_concurrency.convert=4 tasks x 2 vCPU (convert_task.cpu) = 8 vCPU" in convert["message"]
    assert "max_concurrency.bench=20 tasks x 1 vCPU (bench_task.cpu) = 20 vCPU" in bench["message"]
    assert "quota of 6" in bench["message"] and "lower max_concurrency.bench to <= 6" in bench["fix"]
    assert "lower max_concurrency.convert to <= 3" in convert["fix"]
    assert report["account"]["fargate_vcpu_source"].endswith("applied" if applied else "AWS default")


def test_an_account_without_the_cdk_bootstrap(account, tmp_path, capsys):
    an_account(account, bootstrap_version=None)
    status, report = doctor_json(capsys, write_cdk_json(tmp_path))
    assert status == 1
    [bootstrap] = by_check(report)["bootstrap"]
    assert bootstrap["severity"] == "ERROR" and "is not bootstrapped" in bootstrap["message"]
    assert bootstrap["fix"].startswith("node_modules/.bin/cdk bootstrap aws://123456789012/us-east-1")


def test_a_cdktoolkit_stack_without_the_version_parameter(account, tmp_path, capsys):
    account.cloudformation.create_stack(StackName="CDKToolkit", TemplateBody=json.dumps(
        {"Resources": {"Bucket": {"Type": "AWS::S3::Bucket"}}}))
    an_account(account, bootstrap_version=None)
    status, report = doctor_json(capsys, write_cdk_json(tmp_path))
    assert status == 1
    [bootstrap] = by_check(report)["bootstrap"]
    assert bootstrap["severity"] == "ERROR" and "stack CDKToolkit exists (CREATE_COMPLETE)" in bootstrap["message"]


def test_a_bootstrap_too_old_for_the_templates(account, tmp_path, capsys):
    an_account(account, bootstrap_version=5)
    status, report = doctor_json(capsys, write_cdk_json(tmp_path))
    assert status == 1
    assert "bootstrapped at version 5; the templates require >= 6" in by_check(report)["bootstrap"][0]["message"]


def test_a_check_it_cannot_make_is_unknown_and_exits_2(account, tmp_path, capsys):
    an_account(account, answers_lambda_settings=False)
    account.lambda_stub.add_client_error("get_account_settings", "AccessDeniedException", "not authorized", 403)
    status, report = doctor_json(capsys, write_cdk_json(tmp_path))
    assert status == 2
    [concurrency] = by_check(report)["lambda-concurrency"]
    assert concurrency["severity"] == "UNKNOWN"
    assert "AccessDeniedException: not authorized (needs lambda:GetAccountSettings)" in concurrency["message"]


def test_settings_cdk_json_refuses_are_listed_and_the_account_still_checked(account, tmp_path, capsys):
    an_account(account)
    status, report = doctor_json(capsys, write_cdk_json(tmp_path, **{"bench_task.ephemeral_storage_gib": 500}))
    assert status == 1
    problems = by_check(report)["cdk.json"]
    assert any("bench_task.ephemeral_storage_gib=500" in p["message"] for p in problems)
    assert {f["severity"] for c, fs in by_check(report).items() if c != "cdk.json" for f in fs} == {"ok"}


def test_an_unknown_environment_is_a_one_line_error(tmp_path, capsys):
    assert cli.main(["doctor", "--env", "staging", "--cdk-json", str(write_cdk_json(tmp_path))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("layoutlab doctor: error: unknown environment 'staging'")


def test_an_unknown_profile_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    assert cli.main(["doctor", "--env", "dev", "--profile", "nobody"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["layoutlab doctor: error: cannot load AWS credentials: The config profile (nobody) could not be found"]


def test_no_credentials_exits_2_with_a_message_not_a_traceback(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_CONFIG_FILE="/nonexistent",
               AWS_EC2_METADATA_DISABLED="true", AWS_REGION="us-east-1")
    done = subprocess.run([sys.executable, "-m", "layoutlab.cli", "doctor", "--env", "dev"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("layoutlab doctor: error: no AWS credentials: doctor checks an account; "
                                  "set AWS_PROFILE")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_reading_cdk_json_does_not_import_aws_cdk():
    code = ("import sys; from layoutlab.commands.doctor import load_environment; load_environment('dev'); "
            "print('aws_cdk' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_help_explains_checks_and_exit_status(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["doctor", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for words in ("L-3032A538", "lambda:GetAccountSettings", "/cdk-bootstrap/", "Exit status: 0", "make preflight"):
        assert words in text


def test_a_task_larger_than_the_whole_vcpu_quota(account, tmp_path, capsys):
    an_account(account, fargate_vcpu=1.0)
    status, report = doctor_json(capsys, write_cdk_json(tmp_path, **{"convert_task.cpu": 2048}))
    assert status == 1
    convert = next(f for f in by_check(report)["fargate-vcpu"] if f["message"].startswith("convert"))
    assert convert["fix"].startswith("one task alone is above the quota: lower convert_task.cpu")
