"""Where bytes live: local paths and ``s3://`` URLs, one set of helpers.

Every S3 client in layoutlab (boto3, s3fs, obstore) is configured here, so the
same code talks to AWS or to the local cloud. The local cloud is selected by
the standard ``AWS_ENDPOINT_URL`` variable (honoured by boto3 itself); s3fs and
obstore are given the same endpoint explicitly.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from urllib.parse import urlparse


def is_s3_url(location: str) -> bool:
    return str(location).startswith("s3://")


# s3fs's spelling of one object version in a URL (``s3fs.S3FileSystem.split_path``);
# every reader of an uploaded original uses it, so a pipeline measures the version
# its event named even after the key was overwritten.
VERSION_QUERY = "?versionId="


@dataclass(frozen=True)
class S3Location:
    bucket: str
    key: str
    version_id: str | None = None

    @classmethod
    def parse(cls, url: str) -> "S3Location":
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"not an s3:// URL: {url!r}")
        # Keys may hold '?' and '#': take the key from the raw text, not urlparse's path. The version
        # query is the one ``versioned_url`` appends, so the last one (a key may hold the same text).
        key = str(url)[len("s3://") + len(parsed.netloc):].lstrip("/")
        key, version_id = _split_version(key)
        return cls(bucket=parsed.netloc, key=key, version_id=version_id)

    @property
    def url(self) -> str:
        return versioned_url(self.bucket, self.key, self.version_id)


def versioned_url(bucket: str, key: str, version_id: str | None = None) -> str:
    """``s3://bucket/key``, pinned to one object version when ``version_id`` is given."""
    return f"s3://{bucket}/{key}" + (f"{VERSION_QUERY}{version_id}" if version_id else "")


def _split_version(text: str) -> tuple[str, str | None]:
    """``(text, None)``, or the text before the last ``?versionId=`` and the version after it."""
    head, found, version_id = str(text).rpartition(VERSION_QUERY)
    if not found or not version_id:
        return str(text), None
    return head, version_id


def unversioned_url(url: str) -> str:
    return _split_version(url)[0]


def s3_endpoint_url() -> str | None:
    """The S3 endpoint to use: ``AWS_ENDPOINT_URL_S3``, then ``AWS_ENDPOINT_URL``, else AWS."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def aws_region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def require_aws(what: str) -> None:
    """A ``UserError`` of one line naming what is missing when ``what`` needs an AWS account: credentials
    or a region. (Local commands never call this: the local cloud needs neither.)"""
    import boto3

    from layoutlab.errors import UserError

    session = boto3.Session()
    missing = []
    try:
        if session.get_credentials() is None:
            missing.append("credentials")
    except Exception as error:  # botocore's profile/config errors: say which, in one line
        raise UserError(f"{what} needs AWS credentials, and reading them failed: {error}") from None
    if not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or session.region_name):
        missing.append("a region")
    if missing:
        raise UserError(f"{what} needs an AWS account, and this environment has no {' and no '.join(missing)}: "
                        "configure them (aws configure, AWS_PROFILE, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                        "and AWS_REGION); local results need none of this")


def boto3_s3_client(**config):
    import boto3

    return boto3.client("s3", endpoint_url=s3_endpoint_url(), region_name=aws_region(), **config)


def s3fs_filesystem(*, for_url: str | None = None, **options):
    """An ``s3fs.S3FileSystem`` for the configured endpoint; ``options`` pass through.

    Version-aware only for a URL naming a version: a version-aware s3fs lists with
    ListObjectVersions, which would change what the benchmarks count elsewhere.
    """
    import s3fs

    if for_url is not None and VERSION_QUERY in str(for_url):
        options.setdefault("version_aware", True)

    client_kwargs = dict(options.pop("client_kwargs", {}))
    endpoint = s3_endpoint_url()
    if endpoint:
        client_kwargs.setdefault("endpoint_url", endpoint)
    client_kwargs.setdefault("region_name", aws_region())
    return s3fs.S3FileSystem(client_kwargs=client_kwargs, **options)


@functools.cache
def botocore_data_loader():
    """botocore's data loader for this process, S3's models already parsed (its service model, endpoint
    rules, endpoints, partitions). A session given it (``aio_session``) creates an S3 client without parsing
    them again: ~0.09 s of every new session's first client otherwise, measured in the forked workers that
    read an uploaded file (layoutlab/guard.py), each of which made its own. Parsed in the parent (handlers
    call it at init), a fork inherits it parsed."""
    from botocore.loaders import create_loader

    loader = create_loader()
    for type_name in ("service-2", "endpoint-rule-set-1"):
        loader.load_service_model("s3", type_name)
    for name in ("endpoints", "partitions", "sdk-default-configuration"):
        loader.load_data(name)
    return loader


def aio_session(session=None):
    """An aiobotocore session (``session``, or a new one) that reads botocore's models from the process's
    ``botocore_data_loader``; for ``s3fs.S3FileSystem(session=...)``."""
    if session is None:
        from aiobotocore.session import AioSession

        session = AioSession()
    session.register_component("data_loader", botocore_data_loader())
    return session


def obstore_s3_store(bucket: str, prefix: str | None = None, **options):
    """An ``obstore.store.S3Store`` for the configured endpoint (path-style, http allowed locally)."""
    from obstore.store import S3Store

    endpoint = s3_endpoint_url()
    kwargs: dict = {"region": aws_region()}
    if endpoint:
        kwargs["endpoint"] = endpoint
        kwargs["virtual_hosted_style_request"] = False
        client_options = dict(options.pop("client_options", {}))
        client_options.setdefault("allow_http", True)
        kwargs["client_options"] = client_options
    kwargs.update(options)
    return S3Store(bucket, prefix=prefix, **kwargs)
