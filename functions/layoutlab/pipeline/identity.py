"""Identities: which dataset an uploaded object version is, and its execution's name.

A dataset is one object version (bucket, key, version id — or the ETag where
the bucket is not versioned). Its ``dataset_id`` is readable (from the file
name) and unique (a digest of the identity). The Step Functions execution name
is derived from it, so delivering the same event twice can never start two
executions: the second ``StartExecution`` fails with ExecutionAlreadyExists.
"""

from __future__ import annotations

import hashlib
import re
from posixpath import basename

from layoutlab.pipeline.events import ObjectRef

# Step Functions allows 1-80 characters in a name; CloudWatch Logs integration
# wants only ASCII letters, digits, '-' and '_'.
_MAX_NAME = 80
_DIGEST_CHARS = 16
_UNSAFE = re.compile(r"[^A-Za-z0-9]+")


def identity_string(ref: ObjectRef) -> str:
    version = ref.version_id or (f"etag:{ref.etag}" if ref.etag else "unversioned")
    return f"{ref.bucket}\x00{ref.key}\x00{version}"


def dataset_id(ref: ObjectRef) -> str:
    """``<file-name-slug>-<16 hex digest>``, at most 80 ASCII characters."""
    digest = hashlib.sha256(identity_string(ref).encode("utf-8")).hexdigest()[:_DIGEST_CHARS]
    slug = _UNSAFE.sub("-", basename(ref.key)).strip("-").lower() or "object"
    slug = slug[: _MAX_NAME - _DIGEST_CHARS - 1].rstrip("-")
    return f"{slug}-{digest}"


def execution_name(ref: ObjectRef) -> str:
    """The pipeline execution's name for this object version (a valid Step Functions name)."""
    return dataset_id(ref)
