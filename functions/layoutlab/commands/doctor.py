"""``layoutlab doctor``: can this AWS account run an environment of cdk.json? (``make preflight``)"""

from __future__ import annotations

import argparse
from pathlib import Path

DESCRIPTION = """\
Before a first 'make deploy ENV=...': read the quotas of the AWS account and region of
your credentials and list everything in cdk.json's environment --env that this account
cannot run, one line per check with what to do. Nothing is created or changed.

Checks (and the read-only calls they make):
  cdk.json          the environment's settings as 'make synth' validates them (no call)
  bootstrap         the CDK bootstrap stack of this account and region: SSM parameter
                    /cdk-bootstrap/<qualifier>/version (version >= 6), else the
                    CloudFormation stack CDKToolkit (ssm:GetParameter, cloudformation:DescribeStacks)
  lambda-memory     every function's memory_mb against the account's maximum. AWS exposes no
                    such maximum through an API today; when Service Quotas lists a Lambda
                    memory quota it is used, otherwise an account with the reduced quotas of
                    a new account (concurrency below the default 1,000) gets a warning for
                    functions above 3,008 MB, the cap such accounts often have
                    (servicequotas:ListServiceQuotas)
  lambda-concurrency  the largest max_concurrency (one upload's peak of Lambda invocations)
                    against the account's unreserved concurrent executions (lambda:GetAccountSettings)
  fargate-vcpu      task vCPU x max_concurrency of the Fargate stages (convert, bench) against
                    the Fargate On-Demand vCPU quota, L-3032A538 (servicequotas:GetServiceQuota)

Exit status: 0 all fits; 1 something cannot run (an ERROR line); 2 doctor cannot check
(no credentials or region, credentials refused, cdk.json unreadable, or a check it could
not make: an UNKNOWN line). WARN lines do not change the status."""

EPILOG = """\
examples:
  make preflight ENV=dev
  layoutlab doctor --env prod --profile my-admin --region us-west-2
  layoutlab doctor --env dev --json
"""

CONCURRENCY_QUOTA = ("lambda", "L-B99A9384")  # Concurrent executions
FARGATE_VCPU_QUOTA = ("fargate", "L-3032A538")  # Fargate On-Demand vCPU resource count
LAMBDA_MEMORY_MAX_MB = 10240  # the service's maximum
NEW_ACCOUNT_MEMORY_MB = 3008  # what accounts with reduced quotas are often held to
DEFAULT_CONCURRENCY = 1000  # Lambda's documented default; new accounts get less
MIN_BOOTSTRAP_VERSION = 6  # CDK v2 templates' CheckBootstrapVersion rule refuses 1..5
DEFAULT_QUALIFIER = "hnb659fds"
FARGATE_STAGES = {"convert": "convert_task", "bench": "bench_task"}  # Map stage -> task size in cdk.json
SEVERITIES = ("ERROR", "UNKNOWN", "WARN", "ok")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "doctor", help="preflight: what in cdk.json this AWS account cannot run (quotas, bootstrap)",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", required=True, help="environment of cdk.json's context 'layoutlab:environments' (dev, prod)")
    parser.add_argument("--cdk-json", type=Path, help="the CDK app's cdk.json (default: this checkout's)")
    parser.add_argument("--profile", help="AWS profile (default: AWS_PROFILE or the default credentials chain)")
    parser.add_argument("--region", help="AWS region (default: AWS_REGION / the profile's; 'cdk deploy' uses the same)")
    parser.add_argument("--json", action="store_true", help="print the account's figures and the findings as JSON")
    parser.set_defaults(func=run)


class Finding:
    """One line of the report: a check's outcome, what it found and what to do."""

    __slots__ = ("severity", "check", "message", "fix")

    def __init__(self, severity: str, check: str, message: str, fix: str | None = None):
        assert severity in SEVERITIES, severity
        self.severity, self.check, self.message, self.fix = severity, check, message, fix

    def to_dict(self) -> dict:
        return {"severity": self.severity, "check": self.check, "message": self.message, "fix": self.fix}

    def line(self) -> str:
        return f"{self.severity:<7} {self.check}: {self.message}" + (f" -> {self.fix}" if self.fix else "")

    def __repr__(self) -> str:
        return f"Finding({self.line()!r})"


def exit_status(findings: list[Finding]) -> int:
    severities = {f.severity for f in findings}
    return 1 if "ERROR" in severities else 2 if "UNKNOWN" in severities else 0


# ---- cdk.json ---------------------------------------------------------------------------

CHECKOUT = Path(__file__).resolve().parents[3]  # functions/layoutlab/commands/doctor.py


def default_cdk_json() -> Path:
    return CHECKOUT / "cdk.json" if (CHECKOUT / "cdk.json").exists() else Path.cwd() / "cdk.json"


def load_environment(env_name: str, cdk_json: Path | None = None):
    """The environment's EnvConfig and what ``environments.validate`` finds wrong with it.

    ``environments.load`` refuses an environment with problems; doctor still wants the sizes to
    check the account, so it reads them with ``check=False`` and lists the problems itself
    (the rules stay in layoutlab/environments.py alone, which the CDK app uses too).
    """
    import json

    from layoutlab.errors import UserError

    cdk_json = cdk_json or default_cdk_json()
    try:
        context = json.loads(cdk_json.read_text()).get("context", {})
    except FileNotFoundError:
        raise UserError(f"{cdk_json}: no such file (pass --cdk-json)") from None
    except json.JSONDecodeError as error:
        raise UserError(f"{cdk_json}: not JSON: {error}") from None
    from layoutlab import environments

    try:
        config = environments.load(context, env_name, check=False)
    except environments.ConfigError as error:  # not a size problem: a missing environment or setting
        raise UserError(str(error)) from None
    return config, environments.validate(config), context


# ---- the account --------------------------------------------------------------------------

class Account:
    """What doctor read from the account; None where it could not (``unread`` says why)."""

    def __init__(self, account_id: str, region: str):
        self.account_id, self.region = account_id, region
        self.concurrent_executions: int | None = None
        self.unreserved_concurrency: int | None = None
        self.lambda_memory_max_mb: int | None = None
        self.lambda_memory_source: str | None = None
        self.fargate_vcpu: float | None = None
        self.fargate_vcpu_source: str | None = None
        self.bootstrap_version: int | None = None
        self.bootstrap_stack_status: str | None = None
        self.unread: dict[str, str] = {}

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in (
            "account_id", "region", "concurrent_executions", "unreserved_concurrency", "lambda_memory_max_mb",
            "lambda_memory_source", "fargate_vcpu", "fargate_vcpu_source", "bootstrap_version",
            "bootstrap_stack_status", "unread")}

    @property
    def reduced_quotas(self) -> bool:
        """Lambda concurrency below the default: the quota profile AWS gives new accounts."""
        return self.concurrent_executions is not None and self.concurrent_executions < DEFAULT_CONCURRENCY


def _why(error: Exception, permission: str | None = None) -> str:
    from botocore.exceptions import ClientError

    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "?")
        text = f"{code}: {error.response.get('Error', {}).get('Message', '')}".rstrip(": ")
        return text + (f" (needs {permission})" if permission and "AccessDenied" in code else "")
    return f"{type(error).__name__}: {error}"


def open_session(profile: str | None = None, region: str | None = None):
    """A boto3 session with credentials and a region, and the account id; UserError when there are none."""
    import os

    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from layoutlab.errors import UserError

    # the region 'cdk deploy' would use: AWS_REGION first (botocore reads only AWS_DEFAULT_REGION)
    region = region or os.environ.get("AWS_REGION") or None
    try:
        session = boto3.Session(profile_name=profile, region_name=region)
        credentials = session.get_credentials()
    except BotoCoreError as error:
        raise UserError(f"cannot load AWS credentials: {error}") from None
    if credentials is None:
        raise UserError("no AWS credentials: doctor checks an account; set AWS_PROFILE (or --profile) or "
                        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run 'aws configure' / 'aws sso login' "
                        "('make synth' needs none)")
    if not session.region_name:
        raise UserError("no AWS region: set AWS_REGION or AWS_DEFAULT_REGION (or --region, or a region in the profile): "
                        "quotas and the CDK bootstrap are per region")
    try:
        identity = session.client("sts", config=_client_config()).get_caller_identity()
    except ClientError as error:
        raise UserError(f"AWS refused these credentials ({_why(error)}): renew or replace them") from None
    except BotoCoreError as error:
        raise UserError(f"cannot reach AWS to check the credentials: {error}") from None
    return session, identity["Account"]


def _client_config():
    from botocore.config import Config

    return Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=15)


def session_clients(session) -> dict:
    """The clients doctor reads the account with (tests replace this with moto and stubbed clients)."""
    config = _client_config()
    return {name: session.client(name, config=config)
            for name in ("lambda", "service-quotas", "ssm", "cloudformation")}


def read_account(clients: dict, account_id: str, region: str, qualifier: str = DEFAULT_QUALIFIER) -> Account:
    from botocore.exceptions import BotoCoreError, ClientError

    account = Account(account_id, region)
    quotas = clients["service-quotas"]
    try:
        limits = clients["lambda"].get_account_settings()["AccountLimit"]
        account.concurrent_executions = int(limits["ConcurrentExecutions"])
        account.unreserved_concurrency = int(limits["UnreservedConcurrentExecutions"])
    except (ClientError, BotoCoreError, KeyError) as error:
        account.unread["lambda-concurrency"] = _why(error, "lambda:GetAccountSettings")
    try:
        for page in quotas.get_paginator("list_service_quotas").paginate(ServiceCode="lambda"):
            for quota in page.get("Quotas", []):
                name = quota.get("QuotaName", "").lower()
                if "function" in name and "memory" in name and 128 <= quota.get("Value", 0) <= LAMBDA_MEMORY_MAX_MB:
                    account.lambda_memory_max_mb = int(quota["Value"])
                    account.lambda_memory_source = f"Service Quotas: {quota['QuotaName']} ({quota['QuotaCode']})"
    except (ClientError, BotoCoreError) as error:
        account.unread["lambda-memory"] = _why(error, "servicequotas:ListServiceQuotas")
    service, code = FARGATE_VCPU_QUOTA
    try:
        try:
            quota = quotas.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]
            account.fargate_vcpu_source = f"Service Quotas: {quota.get('QuotaName', code)} ({code}), applied"
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "NoSuchResourceException":
                raise
            quota = quotas.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]
            account.fargate_vcpu_source = f"Service Quotas: {quota.get('QuotaName', code)} ({code}), AWS default"
        account.fargate_vcpu = float(quota["Value"])
    except (ClientError, BotoCoreError, KeyError) as error:
        account.unread["fargate-vcpu"] = _why(error, "servicequotas:GetServiceQuota")
    try:
        value = clients["ssm"].get_parameter(Name=f"/cdk-bootstrap/{qualifier}/version")["Parameter"]["Value"]
        account.bootstrap_version = int(value)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ParameterNotFound":
            account.unread["bootstrap"] = _why(error, "ssm:GetParameter")
    except (BotoCoreError, ValueError) as error:
        account.unread["bootstrap"] = _why(error)
    if account.bootstrap_version is None and "bootstrap" not in account.unread:
        try:
            stacks = clients["cloudformation"].describe_stacks(StackName="CDKToolkit")["Stacks"]
            account.bootstrap_stack_status = stacks[0]["StackStatus"] if stacks else None
        except ClientError as error:
            if "does not exist" not in error.response.get("Error", {}).get("Message", ""):
                account.unread["bootstrap"] = _why(error, "cloudformation:DescribeStacks")
        except BotoCoreError as error:
            account.unread["bootstrap"] = _why(error)
    return account


# ---- what cannot run ------------------------------------------------------------------------

def assess(config, account: Account, config_problems: list[str] = (), qualifier: str = DEFAULT_QUALIFIER) -> list[Finding]:
    """Every check's finding for the environment ``config`` (an EnvConfig) on ``account``."""
    findings = [Finding("ERROR", "cdk.json", problem, "edit cdk.json ('make synth' refuses this too)")
                for problem in config_problems]
    findings += _bootstrap(account, qualifier)
    findings += _lambda_memory(config, account)
    findings += _lambda_concurrency(config, account)
    findings += _fargate_vcpu(config, account)
    return findings


def _bootstrap(account: Account, qualifier: str) -> list[Finding]:
    where = f"aws://{account.account_id}/{account.region}"
    fix = f"node_modules/.bin/cdk bootstrap {where} (after 'make cdk-cli')"
    if "bootstrap" in account.unread:
        return [Finding("UNKNOWN", "bootstrap", f"cannot read the CDK bootstrap state: {account.unread['bootstrap']}")]
    if account.bootstrap_version is not None:
        if account.bootstrap_version < MIN_BOOTSTRAP_VERSION:
            return [Finding("ERROR", "bootstrap", f"{where} is bootstrapped at version {account.bootstrap_version}; "
                            f"the templates require >= {MIN_BOOTSTRAP_VERSION}", fix + " to upgrade it")]
        return [Finding("ok", "bootstrap", f"{where} is bootstrapped (version {account.bootstrap_version}, "
                        f"qualifier {qualifier})")]
    if account.bootstrap_stack_status:
        return [Finding("ERROR", "bootstrap", f"stack CDKToolkit exists ({account.bootstrap_stack_status}) but "
                        f"/cdk-bootstrap/{qualifier}/version does not: a legacy bootstrap, another qualifier, or "
                        "a failed one", fix + " (delete a failed CDKToolkit stack first)")]
    return [Finding("ERROR", "bootstrap", f"{where} is not bootstrapped for the CDK (no /cdk-bootstrap/{qualifier}/"
                    "version parameter, no CDKToolkit stack): 'cdk deploy' has nowhere to put assets", fix)]


def _settings_above(severity: str, check: str, settings: dict[str, int], limit: int, consequence: str,
                    fix: str) -> list[Finding]:
    """One finding listing every cdk.json setting (dotted name -> value) above ``limit``, the names
    followed by ``consequence``; none when all are within it."""
    over = [f"{name}={value}" for name, value in settings.items() if value > limit]
    return [Finding(severity, check, ", ".join(over) + consequence, fix)] if over else []


def _lambda_memory(config, account: Account) -> list[Finding]:
    sizes = {name: size.memory_mb for name, size in config.functions.items()}
    limit = min(account.lambda_memory_max_mb or LAMBDA_MEMORY_MAX_MB, LAMBDA_MEMORY_MAX_MB)
    source = account.lambda_memory_source if limit == account.lambda_memory_max_mb else "Lambda's maximum"
    findings = [Finding("ERROR", "lambda-memory", f"functions.{name}.memory_mb={mb} is above {limit} MB ({source})",
                        f"lower it to <= {limit} in cdk.json"
                        + (", or request a higher quota (Service Quotas, Lambda)" if limit < LAMBDA_MEMORY_MAX_MB else ""))
                for name, mb in sizes.items() if mb > limit]
    if findings:
        return findings
    largest = max(sizes, key=sizes.get)
    if account.lambda_memory_max_mb is None and account.reduced_quotas:
        over = _settings_above(
            "WARN", "lambda-memory", {f"functions.{n}.memory_mb": mb for n, mb in sizes.items()}, NEW_ACCOUNT_MEMORY_MB,
            f" above {NEW_ACCOUNT_MEMORY_MB} MB, and this account has the reduced quotas of a new account "
            f"(concurrency {account.concurrent_executions}); such accounts are often held to "
            f"{NEW_ACCOUNT_MEMORY_MB} MB, which AWS exposes through no API: the deploy would then fail with "
            f"\"'MemorySize' value failed to satisfy constraint: Member must have value less than or equal to "
            f"{NEW_ACCOUNT_MEMORY_MB}\"",
            f"lower them to {NEW_ACCOUNT_MEMORY_MB} for a first deploy, or ask AWS Support to lift the account's "
            "Lambda memory limit")
        if over:
            return over
    if account.lambda_memory_max_mb is None and account.reduced_quotas:
        return [Finding("ok", "lambda-memory", f"largest function: {largest} {sizes[largest]} MB, within the "
                        f"{NEW_ACCOUNT_MEMORY_MB} MB that accounts with reduced quotas like this one are often held to")]
    where = account.lambda_memory_source or (
        f"no account limit exposed ({account.unread['lambda-memory']}); service maximum"
        if "lambda-memory" in account.unread else "no account limit exposed; service maximum")
    return [Finding("ok", "lambda-memory", f"largest function: {largest} {sizes[largest]} MB; "
                    f"{where} {account.lambda_memory_max_mb or LAMBDA_MEMORY_MAX_MB} MB")]


def _lambda_concurrency(config, account: Account) -> list[Finding]:
    if "lambda-concurrency" in account.unread:
        return [Finding("UNKNOWN", "lambda-concurrency",
                        f"cannot read Lambda's account settings: {account.unread['lambda-concurrency']}")]
    available = account.unreserved_concurrency
    stages = dict(sorted(config.max_concurrency.items(), key=lambda kv: -kv[1]))
    over = _settings_above(
        "ERROR", "lambda-concurrency", {f"max_concurrency.{s}": n for s, n in stages.items()}, available,
        ": one upload runs that many Lambda invocations at once, and this account has "
        f"{available} unreserved concurrent executions (of {account.concurrent_executions}); throttled "
        "invocations are retried for up to about two minutes, then the task fails",
        f"lower them to <= {available} in cdk.json, or request more 'Concurrent executions' "
        f"(Service Quotas, lambda {CONCURRENCY_QUOTA[1]})")
    if over:
        return over
    peak_stage = next(iter(stages))
    return [Finding("ok", "lambda-concurrency",
                    f"peak {stages[peak_stage]} invocations at once (max_concurrency.{peak_stage}) of {available} "
                    "unreserved; uploads processed at the same time add up")]


def _fargate_vcpu(config, account: Account) -> list[Finding]:
    if "fargate-vcpu" in account.unread:
        return [Finding("UNKNOWN", "fargate-vcpu", f"cannot read the Fargate vCPU quota: {account.unread['fargate-vcpu']}")]
    quota = account.fargate_vcpu
    needs = {}
    for stage, task_name in FARGATE_STAGES.items():
        vcpu = getattr(config, task_name).cpu / 1024
        tasks = config.max_concurrency.get(stage, 1)
        needs[stage] = (tasks, vcpu, tasks * vcpu)
    over = {s: n for s, n in needs.items() if n[2] > quota}
    if over:
        return [Finding(
            "ERROR", "fargate-vcpu",
            f"{stage} on Fargate: max_concurrency.{stage}={tasks} tasks x {vcpu:g} vCPU ({FARGATE_STAGES[stage]}.cpu) "
            f"= {total:g} vCPU at once, above this account's Fargate On-Demand vCPU quota of {quota:g}; tasks beyond "
            "it fail to start (\"You've reached the limit on the number of vCPUs you can run concurrently\")",
            (f"lower max_concurrency.{stage} to <= {int(quota // vcpu)} or {FARGATE_STAGES[stage]}.cpu in cdk.json, "
             if vcpu <= quota else f"one task alone is above the quota: lower {FARGATE_STAGES[stage]}.cpu in cdk.json, ")
            + f"or request more (Service Quotas, fargate {FARGATE_VCPU_QUOTA[1]})")
            for stage, (tasks, vcpu, total) in over.items()]
    peak = max(needs, key=lambda s: needs[s][2])
    return [Finding("ok", "fargate-vcpu", f"peak {needs[peak][2]:g} vCPU at once ({peak}) of a quota of {quota:g} "
                    f"({account.fargate_vcpu_source})")]


# ---- the command ----------------------------------------------------------------------------

def check(env_name: str, *, cdk_json: Path | None = None, profile: str | None = None, region: str | None = None,
          clients: dict | None = None) -> tuple[dict, list[Finding]]:
    """Read the account and assess the environment: (facts, findings). UserError when it cannot check."""
    config, problems, context = load_environment(env_name, cdk_json)
    qualifier = context.get("@aws-cdk/core:bootstrapQualifier", DEFAULT_QUALIFIER)
    session, account_id = open_session(profile, region)
    account = read_account(clients or session_clients(session), account_id, session.region_name, qualifier)
    return account.to_dict(), assess(config, account, problems, qualifier)


def run(args) -> int:
    facts, findings = check(args.env, cdk_json=args.cdk_json, profile=args.profile, region=args.region)
    status = exit_status(findings)
    if args.json:
        import json

        print(json.dumps({"environment": args.env, "account": facts, "findings": [f.to_dict() for f in findings],
                          "exit_status": status}, indent=2))
        return status
    print(f"layoutlab doctor: environment {args.env!r} of cdk.json on account {facts['account_id']}, "
          f"region {facts['region']}")
    for finding in sorted(findings, key=lambda f: SEVERITIES.index(f.severity)):
        print(finding.line())
    verdict = {0: f"everything in {args.env!r} fits this account",
               1: f"{args.env!r} cannot run on this account as configured (ERROR lines)",
               2: "some checks could not be made (UNKNOWN lines)"}[status]
    print(verdict)
    return status
