"""Configuration of the deployed functions, read once from the environment at cold start.

Every function gets the same variables from the CDK app (and from the local
run). A missing one is reported by name, all at once, before any event is
handled — not as a KeyError deep inside a handler.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

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

    ENV = {
        "results_table": "LAYOUTLAB_RESULTS_TABLE",
        "outputs_bucket": "LAYOUTLAB_OUTPUTS_BUCKET",
        "ingest_bucket": "LAYOUTLAB_INGEST_BUCKET",
        "state_machine_arn": "LAYOUTLAB_STATE_MACHINE_ARN",
        "idempotency_table": "LAYOUTLAB_IDEMPOTENCY_TABLE",
        "max_input_bytes": "LAYOUTLAB_MAX_INPUT_BYTES",
        "environment": "LAYOUTLAB_ENV",
    }

    @classmethod
    def from_env(cls, required: tuple[str, ...] = ("results_table", "outputs_bucket", "ingest_bucket"),
                 environ=None) -> "Settings":
        environ = os.environ if environ is None else environ
        values, missing = {}, []
        for field in fields(cls):
            name = cls.ENV[field.name]
            if name in environ and environ[name] != "":
                raw = environ[name]
                values[field.name] = int(raw) if field.type in (int, "int") else raw
            elif field.name in required:
                missing.append(name)
        if missing:
            raise MissingSettings("missing environment variable(s): " + ", ".join(missing))
        return cls(**values)

    def as_environment(self) -> dict[str, str]:
        """The variables that reproduce these settings (used to start local tasks)."""
        return {self.ENV[f.name]: str(getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) != ""}
