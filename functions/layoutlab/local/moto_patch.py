"""Serve S3 ranged GETs from moto without reading the whole object.

Stock moto 5.2.5 answers ``GET`` with ``Range: bytes=a-b`` by reading the whole
object out of its buffer (``FakeKey.value`` seeks to 0 and reads everything) and
only then slicing the range (``S3Response._handle_range_header``). A 4 KB read of
a 1 GB object costs a full 1 GB read and copy, which would swamp every
measurement of an HDF5 reader (hundreds of small ranged GETs).

The patch is two small wrappers, nothing copied from moto:

- while moto handles a GET with one simple byte range, ``FakeKey.value`` returns
  a ``KeyBody``: a view with ``len()`` and slicing that reads only the sliced
  bytes from the key's buffer (under the key's own lock). moto's own
  ``_handle_range_header`` then slices it as it always does.
- objects are kept in memory (``MOTO_S3_DEFAULT_KEY_BUFFER_SIZE``, see
  ``KEY_BUFFER_BYTES``) so a range is a memory copy of just the range.

Objects larger than the machine's memory (the ~7 GB granule of NSIDC's table, issue 16):
``apply(key_buffer_bytes=N)`` keeps every object over N bytes in a temporary file on disk
(moto's own ``SpooledTemporaryFile``; a range is then a seek and a read of just the range), and
a multipart upload whose parts add up to more than N is joined by streaming its parts into such
a file. Stock ``FakeMultipart.complete`` joins them in a ``bytearray`` and copies that to
``bytes``: twice the object in memory (14 GB for a 7 GB object). ``complete`` below is moto's,
step for step (same part checks, same ETag of the parts' MD5s, same checksum), with only the
join going to the file; a full-object checksum (moto's default for an upload that names none)
is computed as the parts stream by, where moto's builder joins a third copy of the object.

Anything that needs the whole value (a GET without a range, a range moto
ignores, copies, checksums) still gets ``bytes`` as before. Pinned to moto
5.2.5: ``apply()`` refuses other versions rather than patching blindly.

A wrapper for DynamoDB transactions (``_dynamodb_transactions_roll_back_items``): a cancelled
TransactWriteItems puts back the items it touched instead of a deep copy of the whole table taken before
every transaction (the copies grew the local cloud by 13 MB a granule in a burst).

One more wrapper, for DynamoDB reads: moto 5.2 writes a Scan, Query, GetItem or BatchGetItem
answer through its shape-model serializer, value by value (~20 ms a result item: reading the
demo's 94 items took 2 s, five times per demo and once per summary). Those answers are
DynamoDB JSON already, and moto's own ``dynamo_json_dump`` writes the same document (tested
equal, binary values and sets included) in a small fraction of that time.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading

MOTO_VERSION = "5.2.5"
# Objects up to this size stay in memory instead of spilling to a temp file.
KEY_BUFFER_BYTES = 8 * 2**30

_SIMPLE_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_state = threading.local()
_applied = False


class KeyBody:
    """The bytes of a moto ``FakeKey``, read lazily: only slices are materialised."""

    def __init__(self, key):
        self._key = key

    def __len__(self) -> int:
        return self._key.contentsize

    def __bool__(self) -> bool:
        return len(self) > 0

    def __getitem__(self, item):
        if not isinstance(item, slice):
            raise TypeError("KeyBody supports slices only")
        start, stop, step = item.indices(len(self))
        if step != 1:
            raise ValueError("KeyBody supports contiguous slices only")
        buffer = self._key._value_buffer
        with self._key.lock:
            buffer.seek(start)
            return buffer.read(max(0, stop - start))

    def to_bytes(self) -> bytes:
        return self[:]


class SpooledValue:
    """A completed multipart upload's bytes, already written to a temporary file on disk.

    Handed by the streaming ``complete`` to ``put_object`` in place of ``bytes``; the patched
    ``FakeKey.value`` setter adopts the file as the key's buffer instead of copying it.
    """

    def __init__(self, buffer, size: int):
        self.buffer, self.size = buffer, size

    def __len__(self) -> int:
        return self.size


class FullObjectChecksum:
    """moto's ``compute_checksum`` of the whole object, fed part by part (same algorithm choice,
    same fallbacks), so the object never has to be joined in memory to check it."""

    def __init__(self, algorithm: str):
        import hashlib

        self.algorithm, self.value, self.hasher = algorithm, 0, None
        if algorithm in ("SHA1", "SHA256"):
            self.hasher = hashlib.new(algorithm.lower(), usedforsecurity=False)
        elif algorithm not in ("CRC32", "CRC32C", "CRC64NVME"):
            self.hasher = hashlib.sha256(usedforsecurity=False)  # moto's choice for any other name
        self.width = 4

    def update(self, data: bytes) -> None:
        import binascii

        if self.hasher is not None:
            self.hasher.update(data)
        elif self.algorithm == "CRC32C" and _module("crc32c"):
            self.value = _module("crc32c").crc32c(data, self.value)
        elif self.algorithm == "CRC64NVME" and _has_crt():
            from awscrt import checksums

            self.value, self.width = checksums.crc64nvme(data, self.value), 8
        else:  # CRC32, and moto's fallback for the other two without their libraries
            self.value = binascii.crc32(data, self.value)

    def result(self) -> str:
        import base64

        digest = self.hasher.digest() if self.hasher is not None else self.value.to_bytes(self.width, "big")
        return base64.b64encode(digest).decode()


def _has_crt() -> bool:
    from moto.core.compat import HAS_CRT

    return HAS_CRT


def _module(name: str):
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _streaming_complete(stock_complete):
    def complete(self, body):
        from codecs import getdecoder

        from moto.s3 import models as s3_models
        from moto.s3.exceptions import EntityTooSmall, InvalidPart, MalformedXML
        from moto.settings import get_s3_default_key_buffer_size
        from moto.utilities.utils import md5_hash

        body = list(body)
        named = [self.parts.get(number) for number, _ in body]
        limit = get_s3_default_key_buffer_size()
        if any(part is None for part in named) or sum(part.contentsize for part in named) <= limit:
            return stock_complete(self, iter(body))  # fits in memory, or invalid: moto's own answer

        decode_hex = getdecoder("hex_codec")
        checksum_builder = s3_models.MultipartChecksumBuilder(self.metadata.get("x-amz-checksum-algorithm"),
                                                               self.metadata.get("x-amz-checksum-type"))
        full_object = (FullObjectChecksum(checksum_builder.checksum_algorithm)
                       if checksum_builder.checksum_type != "COMPOSITE" else None)
        joined = tempfile.SpooledTemporaryFile(limit)
        joined.rollover()  # straight to disk: the whole point
        md5s, size, last = bytearray(), 0, None
        try:
            for (_, etag), part in zip(body, named):
                part_etag = part.etag.replace('"', "")
                if part_etag != etag.replace('"', ""):
                    raise InvalidPart()
                if last is not None and last.contentsize < s3_models.S3_UPLOAD_PART_MIN_SIZE:
                    raise EntityTooSmall()
                md5s.extend(decode_hex(part_etag)[0])
                data = None  # the previous part's bytes go before the next part's are read
                data = part.value
                joined.write(data)
                if full_object is None:
                    checksum_builder.addPart(data)  # one checksum per part: small
                else:
                    full_object.update(data)
                size += len(data)
                last = part
            if not body:
                raise MalformedXML
        except BaseException:
            joined.close()
            raise
        full_etag = md5_hash()
        full_etag.update(bytes(md5s))
        checksum = (checksum_builder.build() if full_object is None
                    else (checksum_builder.checksum_type, full_object.result(), 1))
        return SpooledValue(joined, size), f"{full_etag.hexdigest()}-{len(body)}", checksum

    return complete


def _adopting_setter(stock_setter):
    def set_value(self, new_value) -> None:
        if isinstance(new_value, SpooledValue):
            self._value_buffer.close()
            self._value_buffer = new_value.buffer
            self.contentsize = new_value.size
            return
        stock_setter(self, new_value)

    return set_value


def _is_simple_range(value: str | None) -> bool:
    return bool(value) and bool(_SIMPLE_RANGE.match(value.strip())) and value.strip() != "bytes=-"


def apply(key_buffer_bytes: int | None = None) -> None:
    """Patch moto's S3 in this process (idempotent). Call before the server starts.

    ``key_buffer_bytes``: objects over this size live in temporary files on disk (default
    ``KEY_BUFFER_BYTES``, i.e. in memory; an explicit ``MOTO_S3_DEFAULT_KEY_BUFFER_SIZE`` wins
    over the default, not over this argument).
    """
    global _applied
    if key_buffer_bytes is not None:
        os.environ["MOTO_S3_DEFAULT_KEY_BUFFER_SIZE"] = str(int(key_buffer_bytes))
    if _applied:
        return
    import moto
    from moto.s3.models import FakeKey, FakeMultipart
    from moto.s3.responses import S3Response

    if moto.__version__ != MOTO_VERSION:
        raise RuntimeError(
            f"layoutlab's ranged-GET patch is written for moto {MOTO_VERSION}, found {moto.__version__}; "
            "install the pinned version: pip install 'moto[server]==5.2.5'"
        )
    os.environ.setdefault("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(KEY_BUFFER_BYTES))

    stock_value = FakeKey.value

    def value(self):
        if getattr(_state, "lazy", False):
            return KeyBody(self)
        return stock_value.fget(self)

    FakeKey.value = property(value, _adopting_setter(stock_value.fset))
    FakeMultipart.complete = _streaming_complete(FakeMultipart.complete)

    stock_key_response = S3Response.key_response

    def key_response(self, request, full_url, headers):
        _state.lazy = request.method == "GET" and _is_simple_range(request.headers.get("range"))
        try:
            status, response_headers, content = stock_key_response(self, request, full_url, headers)
        finally:
            _state.lazy = False
        if isinstance(content, KeyBody):  # moto decided to answer with the whole object
            content = content.to_bytes()
        return status, response_headers, content

    S3Response.key_response = key_response
    _dynamodb_reads_as_dynamo_json()
    _dynamodb_transactions_roll_back_items()
    _applied = True


DYNAMODB_READS = ("Scan", "Query", "GetItem", "BatchGetItem")


def _dynamodb_reads_as_dynamo_json() -> None:
    import functools

    from moto.dynamodb.models.utilities import dynamo_json_dump
    from moto.dynamodb.responses import DynamoHandler

    stock_serialized = DynamoHandler.serialized

    @functools.wraps(stock_serialized)  # (``__wrapped__``: the stock serializer, for the test that compares)
    def serialized(self, action_result):
        result = action_result.result
        if isinstance(result, dict) and self._get_action() in DYNAMODB_READS:  # (an error goes the stock way)
            return 200, {"Content-Type": "application/x-amz-json-1.0", **self.response_headers}, \
                dynamo_json_dump(result)
        return stock_serialized(self, action_result)

    DynamoHandler.serialized = serialized


def _transaction_key(backend, op_type: str, op: dict) -> dict | None:
    """The key (DynamoDB JSON) of the item one operation of a transaction writes; None if its table is unknown."""
    table = backend.tables.get(op.get("TableName"))
    if table is None:
        return None
    if op_type != "Put":
        return op.get("Key")
    attrs = op.get("Item") or {}
    key = {table.hash_key_attr: attrs.get(table.hash_key_attr)}
    if table.range_key_attr is not None:
        key[table.range_key_attr] = attrs.get(table.range_key_attr)
    return key if all(v is not None for v in key.values()) else None


def _dynamodb_transactions_roll_back_items() -> None:
    """TransactWriteItems keeps a copy of the items it writes, not of their tables.

    Stock moto 5.2.5 deep-copies every table a transaction names before it starts (to roll back if an
    operation fails) and, on a failure, puts the copy in the table's place. Over a burst of granules that is a
    copy of the whole results table per transaction (a slot taken, a slot given back, a granule admitted), so
    each costs time in proportion to all the items ever written, and the copies left the local cloud 13 MB
    larger per granule of a 1,000-granule burst (2.1 GB after 186 granules, 0.5 granules a second; with this
    patch a 150-granule burst stays at 251 MiB, 0.87 granules a second). Here the table is kept as it is (the
    stock code's copy of a table is the table itself) and each item the transaction touches is saved as it was
    (its DynamoDB JSON, or its absence) and put back, or removed, if any operation fails: what the stock
    rollback restores for those items, without also undoing other requests' writes that ran meanwhile."""
    import copy as stock_copy
    import functools

    import moto.dynamodb.models as dynamodb_models
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    class _TablesByReference:
        """The ``copy`` module as moto's DynamoDB backend sees it: a Table's deep copy is the Table."""

        def __getattr__(self, name):
            return getattr(stock_copy, name)

        @staticmethod
        def deepcopy(value, memo=None):
            return value if isinstance(value, Table) else stock_copy.deepcopy(value, memo)

    dynamodb_models.copy = _TablesByReference()
    stock_transact = DynamoDBBackend.transact_write_items

    @functools.wraps(stock_transact)
    def transact_write_items(self, transact_items):
        saved = []
        for entry in transact_items if isinstance(transact_items, list) else []:
            if not isinstance(entry, dict) or len(entry) != 1:
                continue  # (moto refuses it before writing anything)
            op_type, op = next(iter(entry.items()))
            key = _transaction_key(self, op_type, op) if isinstance(op, dict) else None
            if key is None or op_type == "ConditionCheck":
                continue
            try:
                current = self.get_item(op["TableName"], key)
            except Exception:  # (a malformed key: moto's own check names it, before any write)
                continue
            saved.append((op["TableName"], key, current.to_json()["Attributes"] if current is not None else None))
        try:
            return stock_transact(self, transact_items)
        except BaseException:
            for table_name, key, attributes in reversed(saved):
                if attributes is None:
                    self.delete_item(table_name, key)
                else:
                    self.put_item(table_name, attributes)
            raise

    DynamoDBBackend.transact_write_items = transact_write_items


def is_applied() -> bool:
    return _applied
