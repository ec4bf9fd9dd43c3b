"""Where bytes live: local paths and ``s3://`` URLs, one set of helpers.

Every S3 client in layoutlab (boto3, s3fs, obstore) is configured here, so the
same code talks to AWS or to the local cloud. The local cloud is selected by
the standard ``AWS_ENDPOINT_URL`` variable (honoured by boto3 itself); s3fs and
obstore are given the same endpoint explicitly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlparse


def is_s3_url(location: str) -> bool:
    return str(location).startswith("s3://")


@dataclass(frozen=True)
class S3Location:
    bucket: str
    key: str

    @classmethod
    def parse(cls, url: str) -> "S3Location":
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError(f"not an s3:// URL: {url!r}")
        return cls(bucket=parsed.netloc, key=parsed.path.lstrip("/"))

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def s3_endpoint_url() -> str | None:
    """The S3 endpoint to use: ``AWS_ENDPOINT_URL_S3``, then ``AWS_ENDPOINT_URL``, else AWS."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def aws_region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def boto3_s3_client(**config):
    import boto3

    return boto3.client("s3", endpoint_url=s3_endpoint_url(), region_name=aws_region(), **config)


def s3fs_filesystem(**options):
    """An ``s3fs.S3FileSystem`` for the configured endpoint; ``options`` pass through."""
    import s3fs

    client_kwargs = dict(options.pop("client_kwargs", {}))
    endpoint = s3_endpoint_url()
    if endpoint:
        client_kwargs.setdefault("endpoint_url", endpoint)
    client_kwargs.setdefault("region_name", aws_region())
    return s3fs.S3FileSystem(client_kwargs=client_kwargs, **options)


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
