"""S3 locations and endpoint selection shared by every S3 client."""

from __future__ import annotations

import pytest

from layoutlab import storage


def test_parse_s3_url_keeps_the_whole_key():
    location = storage.S3Location.parse("s3://bucket/incoming/a b/c+d.h5")
    assert (location.bucket, location.key) == ("bucket", "incoming/a b/c+d.h5")
    assert location.url == "s3://bucket/incoming/a b/c+d.h5"


@pytest.mark.parametrize("url", ["/tmp/x.h5", "s3:///nokey", "http://bucket/key"])
def test_parse_rejects_what_is_not_an_s3_url(url):
    with pytest.raises(ValueError):
        storage.S3Location.parse(url)


def test_endpoint_prefers_the_s3_specific_variable(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:2")
    assert storage.s3_endpoint_url() == "http://127.0.0.1:2"
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    assert storage.s3_endpoint_url() == "http://127.0.0.1:1"
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    assert storage.s3_endpoint_url() is None
