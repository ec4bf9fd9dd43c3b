"""Configuration of the deployed functions, read once from the environment at cold start.

Every function gets the same variables from the CDK app (and from the local
run). A missing one is reported by name, all at once, before any event is
handled — not as a KeyError deep inside a handler.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

from layoutlab.ceilings import ENV_VARIABLE as CEILINGS_VARIABLE
from layoutlab.ceilings import Ceilings
from layoutlab.errors import UserError


class MissingSettings(UserError):
    pass


@dataclass(frozen=True)
class Settings:
    results_table: str
    outputs_bucket: str
    ingest_bucket: str
    state_machine_arn: str = ""
    idempotency_table: str = ""
    max_input_bytes: int = 50 * 2**30
    environment: str = "local"
    # how much work one upload may ask for (cdk.json's ceilings, as JSON)
    ceilings: Ceilings = field(default_factory=Ceilings)
    # a plan in the ingest bucket's plans/ that an upload naming none runs; empty: the packaged default plan
    default_plan: str = ""

    ENV = {
        "results_table": "LAYOUTLAB_RESULTS_TABLE",
        "outputs_bucket": "LAYOUTLAB_OUTPUTS_BUCKET",
        "ingest_bucket": "LAYOUTLAB_INGEST_BUCKET",
        "state_machine_arn": "LAYOUTLAB_STATE_MACHINE_ARN",
        "idempotency_table": "LAYOUTLAB_IDEMPOTENCY_TABLE",
        "max_input_bytes": "LAYOUTLAB_MAX_INPUT_BYTES",
        "environment": "LAYOUTLAB_ENV",
        "ceilings": CEILINGS_VARIABLE,
        "default_plan": "LAYOUTLAB_DEFAULT_PLAN",
    }

    @classmethod
    def from_env(cls, required: tuple[str, ...] = ("results_table", "outputs_bucket", "ingest_bucket"),
                 environ=None) -> "Settings":
        environ = os.environ if environ is None else environ
        values, missing = {}, []
        for setting in fields(cls):
            name = cls.ENV[setting.name]
            if name in environ and environ[name] != "":
                raw = environ[name]
                if setting.name == "ceilings":
                    values[setting.name] = Ceilings.from_json(raw, where=name)
                else:
                    values[setting.name] = int(raw) if setting.type in (int, "int") else raw
            elif setting.name in required:
                missing.append(name)
        if missing:
            raise MissingSettings("missing environment variable(s): " + ", ".join(missing))
        return cls(**values)

    def as_environment(self) -> dict[str, str]:
        """The variables that reproduce these settings (used to start local tasks)."""
        def text(value) -> str:
            return value.to_json() if isinstance(value, Ceilings) else str(value)

        return {self.ENV[f.name]: text(getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) != ""}
