"""Request accounting without sockets: the counter, the botocore hook on a real boto3 client
(answers made up in ``before-send``), object_store's range merging, and how run_case turns
client and proxy counts into record fields."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from layoutlab.bench import accounting
from layoutlab.bench.readers import READERS, make_reader
from layoutlab.bench.runner import _Counts
from layoutlab.results.record import derive_rates, new_record, validate_record


def test_counter_kinds_bytes_and_difference():
    counter = accounting.RequestCounter()
    before = counter.snapshot()
    counter.add("HeadObject")
    counter.add("GetObject", 1000)
    counter.add("GetObject", 0, missing=True)
    counter.add("ListObjectsV2", 512, requests=2)
    counter.add("GetBucketLocation", 100)
    counter.add("GetObject", 0, error=True)
    after = counter.snapshot()
    assert after == {"requests": 7, "get_requests": 3, "head_requests": 1, "list_requests": 2, "other_requests": 1,
                     "bytes_transferred": 1612, "errors": 1, "not_found": 1,
                     "by_operation": {"HeadObject": 1, "GetObject": 3, "ListObjectsV2": 2, "GetBucketLocation": 1}}
    assert accounting.difference(after, before) == after
    counter.add("GetObject", 10)
    assert accounting.difference(counter.snapshot(), after) == {
        "requests": 1, "get_requests": 1, "head_requests": 0, "list_requests": 0, "other_requests": 0,
        "bytes_transferred": 10, "errors": 0, "not_found": 0, "by_operation": {"GetObject": 1}}


@pytest.mark.parametrize("ranges, merged", [
    ([], []),
    ([(5, 10)], [(5, 10)]),
    ([(100, 200), (0, 50)], [(0, 200)]),  # sorted first; a 50-byte gap is merged
    ([(0, 10), (10 + 2**20, 20 + 2**20)], [(0, 20 + 2**20)]),  # a gap of exactly 1 MiB is merged
    ([(0, 10), (11 + 2**20, 20 + 2**20)], [(0, 10), (11 + 2**20, 20 + 2**20)]),  # one byte more is not
    ([(0, 100), (20, 30), (50, 200)], [(0, 200)]),  # contained and overlapping ranges
])
def test_merged_ranges_follow_object_store(ranges, merged):
    assert accounting.merged_ranges(ranges) == merged


def _fake_s3(counter):
    """A boto3 S3 client whose requests are answered in ``before-send`` (no socket); counted by ``count_botocore``."""
    import boto3
    from botocore.awsrequest import AWSResponse
    from botocore.config import Config

    class Raw(io.BytesIO):
        def stream(self, *args, **kwargs):
            yield self.read()

    answers = []

    def answer(request, **_):
        status, headers, body = answers.pop(0)
        if isinstance(status, Exception):
            raise status
        return AWSResponse(request.url, status, headers, Raw(body))

    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
                      aws_access_key_id="k", aws_secret_access_key="s",
                      config=Config(retries={"total_max_attempts": 2, "mode": "standard"}))
    s3.meta.events.register("before-send.s3", answer)
    accounting.count_botocore(s3, counter)
    return s3, answers


def test_botocore_hook_counts_every_attempt_and_body():
    from botocore.exceptions import ClientError, EndpointConnectionError

    counter = accounting.RequestCounter()
    s3, answers = _fake_s3(counter)
    answers.append((200, {"Content-Length": "1234", "ETag": '"x"'}, b""))  # HEAD: the length is the object's
    s3.head_object(Bucket="b", Key="k")
    answers.append((206, {"Content-Length": "5", "Content-Range": "bytes 0-4/10"}, b"hello"))
    assert s3.get_object(Bucket="b", Key="k", Range="bytes=0-4")["Body"].read() == b"hello"
    listing = (b'<?xml version="1.0"?><ListBucketResult><Name>b</Name><KeyCount>0</KeyCount>'
               b'<IsTruncated>false</IsTruncated></ListBucketResult>')
    answers.append((200, {}, listing))  # no Content-Length: the body read is what counts
    s3.list_objects_v2(Bucket="b")
    error = b"<Error><Code>SlowDown</Code><Message>slow</Message></Error>"
    answers += [(503, {"Content-Length": str(len(error))}, error),
                (200, {"Content-Length": "3"}, b"abc")]  # a 503, then the retry
    assert s3.get_object(Bucket="b", Key="k")["Body"].read() == b"abc"
    missing = b"<Error><Code>NoSuchKey</Code><Message>none</Message></Error>"
    answers.append((404, {"Content-Length": str(len(missing))}, missing))
    with pytest.raises(ClientError):
        s3.get_object(Bucket="b", Key="absent")
    answers += [(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), None, None)] * 2
    with pytest.raises(EndpointConnectionError):
        s3.head_object(Bucket="b", Key="k")
    assert counter.snapshot() == {
        "requests": 8, "get_requests": 4, "head_requests": 3, "list_requests": 1, "other_requests": 0,
        "bytes_transferred": 5 + len(listing) + len(error) + 3 + len(missing), "errors": 3, "not_found": 1,
        "by_operation": {"HeadObject": 3, "GetObject": 4, "ListObjectsV2": 1}}
    assert counter.method == accounting.BOTOCORE_METHOD


def test_every_reader_counts_at_its_client_but_ros3():
    for name in READERS:
        reader = make_reader(name)
        assert isinstance(reader.requests, accounting.RequestCounter)
        # libhdf5's ros3 (libcurl) and Icechunk (Rust, also under xarray) send requests with no hook to count them
        assert reader.counts_requests is (name not in ("h5py-ros3", "icechunk", "xarray-icechunk"))


def test_cloud_code_does_not_import_the_local_cloud():
    code = ("import sys, layoutlab.bench.accounting, layoutlab.bench.readers, layoutlab.bench.runner; "
            "print(sorted(m for m in sys.modules if m.startswith('layoutlab.local')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


class _Reader:
    def __init__(self, counts: bool):
        self.counts_requests = counts
        self.requests = accounting.RequestCounter("fake", ("nothing",))


class _Proxy:
    """Stands in for ``ProxyCounter``: counts by HTTP method, a LIST is a GET."""

    def __init__(self):
        self.stats = {"requests": 0, "get_requests": 0, "head_requests": 0, "bytes_transferred": 0,
                      "by_method": {}, "faults": {"slowdown": 0, "reset": 0, "slow": 0}}

    def request(self, method, nbytes=0):
        self.stats["requests"] += 1
        self.stats["get_requests" if method == "GET" else "head_requests"] += 1
        self.stats["by_method"][method] = self.stats["by_method"].get(method, 0) + 1
        self.stats["bytes_transferred"] += nbytes

    def snapshot(self):
        return {k: dict(v) if isinstance(v, dict) else v for k, v in self.stats.items()}


def _run(counts: _Counts, reader, proxy):
    """Three phases: open = HEAD + GET 100; select = LIST 50; load = 2 GETs of 1000."""
    def send(operation, method, nbytes):
        if reader.counts_requests:
            reader.requests.add(operation, nbytes)
        if proxy is not None:
            proxy.request(method, nbytes)

    counts.snapshot()
    send("HeadObject", "HEAD", 0)
    send("GetObject", "GET", 100)
    counts.snapshot()
    send("ListObjectsV2", "GET", 50)
    counts.snapshot()
    send("GetObject", "GET", 1000)
    send("GetObject", "GET", 1000)
    counts.snapshot()
    return counts.fields((0.5, 0.25, 1.0))


@pytest.mark.parametrize("client, proxy, counting, source", [
    (True, True, "client+proxy", "client"), (True, False, "client", "client"),
    (False, True, "proxy", "proxy"), (False, False, "none", None)])
def test_record_fields_say_who_counted(client, proxy, counting, source):
    reader, fake_proxy = _Reader(client), _Proxy() if proxy else None
    fields = _run(_Counts(reader, fake_proxy), reader, fake_proxy)
    record = derive_rates(new_record(dataset="d", variant="v", target="s3://b/k", pattern="p", reader="r",
                                     platform="local-lambda", wall_s=1.75, open_s=0.5, select_s=0.25, load_s=1.0,
                                     bytes_needed=1075, points=10, **fields))
    assert validate_record(record) == []
    assert (record["request_counting"], record["counts_source"]) == (counting, source)
    if source is None:
        assert record["requests"] is None and record["overread_ratio"] is None
        assert record["phases"]["open"] == {"s": 0.5, "requests": None, "bytes": None}
        return
    assert (record["requests"], record["head_requests"], record["bytes_transferred"]) == (5, 1, 2150)
    assert record["overread_ratio"] == 2.0
    assert record["phases"] == {"open": {"s": 0.5, "requests": 2, "bytes": 100},
                                "select": {"s": 0.25, "requests": 1, "bytes": 50},
                                "load": {"s": 1.0, "requests": 2, "bytes": 2000}}
    if source == "client":  # GetObject and LIST apart
        assert (record["get_requests"], record["list_requests"]) == (3, 1)
        assert record["client_counts"]["method"] == "fake" and record["client_counts"]["limits"] == ["nothing"]
    else:  # the proxy counts HTTP methods
        assert (record["get_requests"], record["list_requests"]) == (4, None)
    if proxy:
        assert record["proxy_counts"]["by_method"] == {"HEAD": 1, "GET": 4} and record["retries"] == 0
        assert record["faults_seen"] == {"slowdown": 0, "reset": 0, "slow": 0}
    else:
        assert record["proxy_counts"] is None and record["retries"] == (0 if client else None)


def test_on_real_s3_retries_are_unknown_when_the_client_cannot_see_them():
    reader = _Reader(True)
    reader.requests.sees_retries = False  # as for obstore, which retries inside Rust
    fields = _run(_Counts(reader, None), reader, None)
    assert fields["request_counting"] == "client" and fields["retries"] is None and fields["requests"] == 5
