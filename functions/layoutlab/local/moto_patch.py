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

Anything that needs the whole value (a GET without a range, a range moto
ignores, copies, checksums) still gets ``bytes`` as before. Pinned to moto
5.2.5: ``apply()`` refuses other versions rather than patching blindly.
"""

from __future__ import annotations

import os
import re
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


def _is_simple_range(value: str | None) -> bool:
    return bool(value) and bool(_SIMPLE_RANGE.match(value.strip())) and value.strip() != "bytes=-"


def apply() -> None:
    """Patch moto's S3 in this process (idempotent). Call before the server starts."""
    global _applied
    if _applied:
        return
    import moto
    from moto.s3.models import FakeKey
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

    FakeKey.value = property(value, stock_value.fset)

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
    _applied = True


def is_applied() -> bool:
    return _applied
