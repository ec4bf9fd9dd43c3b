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


def test_a_version_pinned_url_round_trips_and_keys_keep_question_marks_and_hashes():
    loc = storage.S3Location.parse("s3://b/incoming/what?#now.h5?versionId=3HL4kqtJ")
    assert (loc.bucket, loc.key, loc.version_id) == ("b", "incoming/what?#now.h5", "3HL4kqtJ")
    assert storage.S3Location.parse(loc.url) == loc
    assert storage.unversioned_url(loc.url) == "s3://b/incoming/what?#now.h5"
    assert storage.versioned_url("b", "k", None) == "s3://b/k"


def test_s3fs_is_version_aware_only_for_a_version_pinned_url():
    pinned = storage.s3fs_filesystem(for_url="s3://b/k?versionId=v1", skip_instance_cache=True)
    plain = storage.s3fs_filesystem(for_url="s3://b/k", skip_instance_cache=True)
    assert pinned.version_aware and not plain.version_aware
    assert pinned.split_path("s3://b/k?versionId=v1") == ("b", "k", "v1")
