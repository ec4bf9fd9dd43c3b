"""Request accounting at the client: what every reader asked of object storage.

A ``RequestCounter`` counts requests by kind (``get``: GetObject, ``head``:
HeadObject/HeadBucket, ``list``: ListObjects*, ``other``) and the bytes of the
response bodies, inside the reader's own S3 client, so a case measured on real
S3 has requests, bytes and over-read too. Each library is counted where it
sends requests:

- boto3 and s3fs (aiobotocore): botocore's ``response-received`` event, which
  fires once per HTTP attempt, retries included, with the response headers
  (``count_botocore``; ``aiobotocore_session`` makes a session whose clients
  all count, for ``s3fs.S3FileSystem(session=...)``). h5py and xarray read
  through an s3fs file object, so their S3 requests are counted here, not
  their Python ``read()`` calls. Bytes: ``Content-Length`` of a streamed
  GetObject body (s3fs reads every body it asks for), the read body of every
  other answer (LIST XML, error XML), 0 for HEAD. An attempt answered 5xx or
  by no answer at all (reset, timeout) also counts in ``errors``, one answered
  404 in ``not_found``. Not seen: a GET/HEAD that aiohttp (under aiobotocore)
  sends once more by itself when a connection breaks before any answer.
- obstore (Rust; no per-request hook): ``counting_object_store`` wraps zarr's
  ``ObjectStore`` and counts the obstore calls zarr makes. Each call maps onto
  requests as object_store sends them: get/get_range = 1 GET with the bytes
  returned, head = 1 HEAD, get_ranges = one GET per range after object_store's
  coalescing (gaps <= 1 MiB merged) with the merged lengths, a listing = 1 LIST
  per 1,000 entries (S3's page size). What obstore does not expose is not
  counted: its own retries, the XML of LIST answers, the error body of a 404
  (``limits`` says so).
- HDF5's ros3 driver (C, no hook): not counted at the client.

``ProxyCounter`` reads the local S3 proxy's per-client counters instead (only
when ``LAYOUTLAB_PROXY_CONTROL`` names one); the two are compared in
``tests/integration/test_bench_accounting.py``.

Cloud code: nothing here imports ``layoutlab.local``.
"""

from __future__ import annotations

import json
import threading

from layoutlab import settings

KINDS = ("get", "head", "list", "other")
_KIND_OF_OPERATION = {
    "GetObject": "get",
    "HeadObject": "head",
    "HeadBucket": "head",
    "ListObjectsV2": "list",
    "ListObjects": "list",
    "ListObjectVersions": "list",
}
S3_LIST_PAGE = 1000  # entries per ListObjectsV2 answer (S3's default and maximum MaxKeys)
OBJECT_STORE_COALESCE = 1024 * 1024  # object_store's OBJECT_STORE_COALESCE_DEFAULT, obstore's get_ranges default


class RequestCounter:
    """Counts of one reader's requests; ``add`` is called from whatever thread the library sends on."""

    def __init__(self, method: str = "", limits: tuple[str, ...] = (), sees_retries: bool = True):
        self.method = method  # how the requests were counted, for the record
        self.limits = list(limits)  # what this method cannot see
        self.sees_retries = sees_retries  # False: the library retries where we cannot count (obstore)
        self._lock = threading.Lock()
        self._by_operation: dict[str, int] = {}
        self._kinds = dict.fromkeys(KINDS, 0)
        self._bytes = 0
        self._errors = 0
        self._missing = 0

    def add(self, operation: str, nbytes: int = 0, requests: int = 1, error: bool = False,
            missing: bool = False) -> None:
        """``requests`` of ``operation`` with ``nbytes`` of response bodies; ``error``: answered 5xx or not at all;
        ``missing``: answered 404."""
        kind = _KIND_OF_OPERATION.get(operation, "other")
        with self._lock:
            self._by_operation[operation] = self._by_operation.get(operation, 0) + requests
            self._kinds[kind] += requests
            self._bytes += nbytes
            self._errors += error
            self._missing += missing

    def snapshot(self) -> dict:
        with self._lock:
            kinds, by_operation, nbytes = dict(self._kinds), dict(self._by_operation), self._bytes
            errors, missing = self._errors, self._missing
        return {"requests": sum(kinds.values()), "get_requests": kinds["get"], "head_requests": kinds["head"],
                "list_requests": kinds["list"], "other_requests": kinds["other"], "bytes_transferred": nbytes,
                "errors": errors, "not_found": missing, "by_operation": by_operation}


def difference(after: dict, before: dict) -> dict:
    """``after - before`` for two snapshots (numbers and the by-operation/by-method dicts)."""
    out = {}
    for key, value in after.items():
        if isinstance(value, dict):
            out[key] = {k: v - before.get(key, {}).get(k, 0) for k, v in value.items()
                        if v - before.get(key, {}).get(k, 0)}
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = value - before.get(key, 0)
    return out


# -- botocore (boto3) and aiobotocore (s3fs) -------------------------------------
BOTOCORE_METHOD = "botocore response-received events"


def _botocore_handler(counter: RequestCounter):
    def on_response(event_name, response_dict=None, exception=None, **_kwargs):
        operation = event_name.rpartition(".")[2]
        if response_dict is None:  # no answer (connection reset, timeout): the attempt was sent
            counter.add(operation, 0, error=True)
            return
        body = response_dict.get("body")
        if isinstance(body, (bytes, bytearray)):
            nbytes = len(body)
        else:  # a streamed body (GetObject): its announced length
            nbytes = int(response_dict["headers"].get("content-length") or 0)
        status = response_dict.get("status_code", 0)
        counter.add(operation, nbytes, error=status >= 500, missing=status == 404)

    return on_response


def count_botocore(target, counter: RequestCounter) -> None:
    """Count the S3 requests of a boto3/botocore/aiobotocore client, or of every client a session creates."""
    events = target.meta.events if hasattr(target, "meta") else target
    events.register("response-received.s3", _botocore_handler(counter), unique_id=f"layoutlab-count-{id(counter)}")
    counter.method = counter.method or BOTOCORE_METHOD


AIOHTTP_LIMITS = ("a GET/HEAD aiohttp resends by itself after its connection broke before an answer "
                  "(once per request, RFC 9112) is counted once",)


def aiobotocore_session(counter: RequestCounter):
    """An ``AioSession`` whose S3 clients count into ``counter`` (for ``s3fs.S3FileSystem(session=...)``)."""
    from aiobotocore.session import AioSession

    session = AioSession()
    count_botocore(session, counter)
    counter.method = "aiobotocore (s3fs): " + BOTOCORE_METHOD
    counter.limits = list(AIOHTTP_LIMITS)
    return session


# -- obstore (through zarr's ObjectStore) ---------------------------------------
OBSTORE_METHOD = "zarr ObjectStore wrapper: obstore calls mapped to requests"
OBSTORE_LIMITS = ("obstore retries not seen", "LIST answer bodies not counted", "error (404) bodies not counted",
                  "LIST pages inferred from entries (1,000 per page)")


def merged_ranges(ranges: list[tuple[int, int]], coalesce: int = OBJECT_STORE_COALESCE) -> list[tuple[int, int]]:
    """object_store's ``merge_ranges``: sorted, ranges whose gap is <= ``coalesce`` fetched as one."""
    merged: list[list[int]] = []
    for start, end in sorted(ranges):
        if merged and start - merged[-1][1] <= coalesce:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


_COUNTING_CLASS = None


def _counting_class():
    global _COUNTING_CLASS
    if _COUNTING_CLASS is not None:
        return _COUNTING_CLASS
    from zarr.abc.store import RangeByteRequest
    from zarr.storage import ObjectStore

    class CountingObjectStore(ObjectStore):
        """zarr's ObjectStore, counting the requests its obstore calls send (see the module docstring)."""

        def __init__(self, store, *, read_only: bool = False, counter: RequestCounter | None = None):
            super().__init__(store, read_only=read_only)
            self.counter = counter if counter is not None else RequestCounter(OBSTORE_METHOD, OBSTORE_LIMITS, False)

        def with_read_only(self, read_only: bool = False):
            return type(self)(self.store, read_only=read_only, counter=self.counter)

        async def get(self, key, prototype, byte_range=None):
            try:
                buffer = await super().get(key, prototype, byte_range)
            except Exception:
                self.counter.add("GetObject", 0, error=True)
                raise
            if buffer is None:  # obstore raised FileNotFoundError: a 404, its error body unseen
                self.counter.add("GetObject", 0, missing=True)
            else:
                self.counter.add("GetObject", len(buffer))
            return buffer

        async def get_partial_values(self, prototype, key_ranges):
            key_ranges = list(key_ranges)
            buffers = await super().get_partial_values(prototype, key_ranges)
            bounded: dict[str, list[tuple[int, int]]] = {}
            for (key, byte_range), buffer in zip(key_ranges, buffers):
                if isinstance(byte_range, RangeByteRequest):  # one get_ranges call per key: coalesced
                    bounded.setdefault(key, []).append((byte_range.start, byte_range.end))
                else:
                    self.counter.add("GetObject", len(buffer) if buffer is not None else 0)
            for ranges in bounded.values():
                fetched = merged_ranges(ranges)
                self.counter.add("GetObject", sum(b - a for a, b in fetched), requests=len(fetched))
            return buffers

        async def exists(self, key):
            try:
                found = await super().exists(key)
            except Exception:
                self.counter.add("HeadObject", error=True)
                raise
            self.counter.add("HeadObject", missing=not found)
            return found

        async def getsize(self, key):
            try:
                size = await super().getsize(key)
            except FileNotFoundError:
                self.counter.add("HeadObject", missing=True)
                raise
            except Exception:
                self.counter.add("HeadObject", error=True)
                raise
            self.counter.add("HeadObject")
            return size


        async def _list(self, prefix=None):
            self.counter.add("ListObjectsV2")
            seen = 0
            async for item in super()._list(prefix):
                if seen and seen % S3_LIST_PAGE == 0:
                    self.counter.add("ListObjectsV2")
                seen += 1
                yield item

        def list_dir(self, prefix):
            return self._counted_list_dir(super().list_dir(prefix))

        async def _counted_list_dir(self, entries):
            self.counter.add("ListObjectsV2")
            seen = 0
            async for entry in entries:
                if seen and seen % S3_LIST_PAGE == 0:
                    self.counter.add("ListObjectsV2")
                seen += 1
                yield entry

    _COUNTING_CLASS = CountingObjectStore
    return CountingObjectStore


def counting_object_store(store, counter: RequestCounter, read_only: bool = True):
    """A zarr ``ObjectStore`` over the obstore ``store`` that counts into ``counter``."""
    counter.method = counter.method or OBSTORE_METHOD
    counter.limits = counter.limits or list(OBSTORE_LIMITS)
    counter.sees_retries = False
    return _counting_class()(store, read_only=read_only, counter=counter)


# -- the local S3 proxy's own counters -------------------------------------------
def http_json(method: str, url: str, payload: dict | None = None, timeout: float = 30) -> dict:
    """One JSON request to the proxy's control API (the local cloud's, ``local/cloud.py``, uses it too): the
    decoded answer, ``{}`` for an empty one."""
    import urllib.request

    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read()
    return json.loads(body) if body else {}


# The access key a case's process signs with while its proxy client is open (the local cloud takes any key):
# the local S3 refuses reads signed with it that did not cross the client (local/case_guard.py).
CASE_ACCESS_KEY = "layoutlab-case"


class ProxyCounter:
    """A client of the local S3 proxy of its own (own port, latency, bandwidth, counters), opened as a case's:
    while it is open the local S3 refuses reads that did not come through it (``direct_requests``).

    Present only when ``LAYOUTLAB_PROXY_CONTROL`` names the proxy's control URL;
    otherwise ``client`` is None and every method returns None.
    """

    def __init__(self, latency_ms: float | None = None, bandwidth_mbps: float | None = None):
        self.control = settings.value("LAYOUTLAB_PROXY_CONTROL") or None
        self.client = None
        if self.control:
            # a case's client: while it is open the local S3 refuses reads that did not cross it (case_guard)
            spec = {"name": "bench", "case": True}
            if latency_ms is not None:
                spec["latency_ms"] = float(latency_ms)
            if bandwidth_mbps is not None:
                spec["bandwidth_mbps"] = float(bandwidth_mbps)
            self.client = http_json("POST", self.control + "/clients", spec)

    @property
    def endpoint(self) -> str | None:
        return f"http://127.0.0.1:{self.client['port']}" if self.client else None

    def snapshot(self) -> dict | None:
        if not self.client:
            return None
        return _proxy_counts(http_json("GET", f"{self.control}/clients/{self.client['id']}"))

    def close(self) -> dict | None:
        if not self.client:
            return None
        stats = http_json("DELETE", f"{self.control}/clients/{self.client['id']}")
        self.client = None
        return _proxy_counts(stats)


def _proxy_counts(stats: dict) -> dict:
    """The proxy's stats in the record's names; its GET count includes LISTs (it counts HTTP methods)."""
    return {"requests": stats["requests"], "get_requests": stats["get_requests"],
            "head_requests": stats["head_requests"], "bytes_transferred": stats["bytes_out"],
            "by_method": dict(stats.get("by_method", {})),
            "faults": dict(stats.get("faults", {})),
            # reads that reached the local S3 around this client while it was open (refused); None: no guard
            "direct_requests": stats.get("direct_requests")}
