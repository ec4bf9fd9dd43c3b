"""An S3 proxy that makes loopback behave like S3 seen from Lambda, and counts.

Sits in front of moto's S3 and, per request: waits ``latency_ms`` before the first
byte (S3's first-byte latency), sends the body no faster than ``bandwidth_mbps``
(S3 serves one GET stream at a bounded rate), and counts requests (by method)
and response bytes.

Clients: the main port is the ``default`` client. ``POST /_layoutlab/clients``
opens another listening port with its own settings and counters, so concurrent
benchmark cases never mix their counts and each case chooses its latency; any
library (s3fs, obstore, HDF5's ros3) is pointed at it through its endpoint URL,
which every S3 client supports (a User-Agent tag would not be: ros3 sets none).
Control paths (``/_layoutlab/...``) are never counted: an S3 bucket name
cannot start with ``_``.

Cases (issue 24): a client opened with ``"case": true`` arms the local S3's guard
(``local/case_guard.py``) while it is open: the proxy marks every request it forwards,
and moto refuses S3 reads that do not carry the mark, counting them in the client's
``direct_requests``. A case can then read only through its own client.

Faults (issue #8): a client may also answer a seeded share of its S3 requests
with ``503 SlowDown`` (S3's XML error body, the request not forwarded), reset
the connection without an answer, or answer late. ``POST /_layoutlab/faults``
sets the faults of the default client and of every client opened afterwards;
``POST /_layoutlab/clients`` accepts ``"faults"`` for one client. Each client
draws from its own ``random.Random(f"{seed}:{client id}")``: the n-th request of
a client meets the same fate in every run. Counters: ``faults`` in the stats.

Written by hand because no maintained Python library emulates S3 latency and
bandwidth with per-client accounting (toxiproxy would need a Go binary and
still not count S3 requests); aiohttp (already a dependency of s3fs) does the
HTTP work.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time
from dataclasses import asdict, dataclass, field

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

# Defaults resembling S3 seen from a Lambda function in the same region.
# - first-byte latency: AWS's S3 performance guidelines quote 100-200 ms for
#   first byte on small objects at the tail; in-region Lambda measurements
#   (and DESIGN.md section 4) show tens of ms typical: 25 ms sits in that range
#   and in the 20-30 ms the acceptance asks for.
# - bandwidth: AWS's "Optimizing Amazon S3 performance" whitepaper plans on
#   85-90 MB/s per request (connection): 720 Mbit/s ~= 90 MB/s.
DEFAULT_LATENCY_MS = 25.0
DEFAULT_BANDWIDTH_MBPS = 720.0
CONTROL_PREFIX = "/_layoutlab"
HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
    "transfer-encoding", "upgrade", "content-length", "host",
}
SEND_CHUNK = 256 * 1024
SLOWDOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                 b'<Message>Please reduce your request rate.</Message><RequestId>layoutlab-proxy</RequestId></Error>')


@dataclass(frozen=True)
class Faults:
    """Shares of requests answered 503 SlowDown / reset / slowed by ``slow_ms``; seeded."""

    slowdown_rate: float = 0.0
    reset_rate: float = 0.0
    slow_rate: float = 0.0
    slow_ms: float = 0.0
    seed: int = 0

    @classmethod
    def from_spec(cls, spec: dict | None) -> "Faults":
        spec = dict(spec or {})
        unknown = set(spec) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown fault setting(s) {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        faults = cls(**{k: (int(v) if k == "seed" else float(v)) for k, v in spec.items()})
        rates = (faults.slowdown_rate, faults.reset_rate, faults.slow_rate)
        if any(not 0 <= r <= 1 for r in rates) or sum(rates[:2]) > 1 or faults.slow_ms < 0:
            raise ValueError("fault rates must be 0..1 (slowdown_rate + reset_rate <= 1) and slow_ms >= 0")
        return faults

    def active(self) -> bool:
        return bool(self.slowdown_rate or self.reset_rate or (self.slow_rate and self.slow_ms))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Client:
    id: str
    latency_ms: float
    bandwidth_mbps: float
    port: int = 0
    counts: dict = field(default_factory=dict)
    bytes_out: int = 0
    bytes_in: int = 0
    site: web.TCPSite | None = None
    faults: Faults = field(default_factory=Faults)
    fault_counts: dict = field(default_factory=dict)
    case: bool = False  # opened for a benchmark case: arms the local S3's guard (local/case_guard.py)
    direct_requests: int | None = None  # reads that reached the local S3 around this client while it was open
    _draws: random.Random | None = None

    def fate(self) -> tuple[str | None, float]:
        """What happens to the next request: (None | "slowdown" | "reset", extra delay in s)."""
        if not self.faults.active():
            return None, 0.0
        if self._draws is None:
            self._draws = random.Random(f"{self.faults.seed}:{self.id}")
        draw, slow = self._draws.random(), self._draws.random()
        kind = ("slowdown" if draw < self.faults.slowdown_rate
                else "reset" if draw < self.faults.slowdown_rate + self.faults.reset_rate else None)
        delay = self.faults.slow_ms / 1000.0 if slow < self.faults.slow_rate else 0.0
        for name, happened in (("slowdown", kind == "slowdown"), ("reset", kind == "reset"), ("slow", delay > 0)):
            if happened:
                self.fault_counts[name] = self.fault_counts.get(name, 0) + 1
        return kind, delay

    def stats(self) -> dict:
        get = self.counts.get("GET", 0)
        head = self.counts.get("HEAD", 0)
        return {
            "id": self.id,
            "port": self.port,
            "latency_ms": self.latency_ms,
            "bandwidth_mbps": self.bandwidth_mbps,
            "requests": get + head,
            "get_requests": get,
            "head_requests": head,
            "by_method": dict(self.counts),
            "bytes_out": self.bytes_out,
            "bytes_in": self.bytes_in,
            "faults": {"slowdown": 0, "reset": 0, "slow": 0, **self.fault_counts},
            "fault_settings": self.faults.to_dict(),
            "case": self.case,
            "direct_requests": self.direct_requests,
        }

    def reset(self) -> None:
        self.fault_counts.clear()
        self.counts.clear()
        self.bytes_out = 0
        self.bytes_in = 0


class S3Proxy:
    """The proxy; run it on an asyncio loop with ``await start()``."""

    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0,
                 latency_ms: float = DEFAULT_LATENCY_MS, bandwidth_mbps: float = DEFAULT_BANDWIDTH_MBPS,
                 guard=None):
        self.upstream = upstream.rstrip("/")
        self.guard = guard  # a local.case_guard.CaseGuard in front of the upstream, or None
        self.host = host
        self.port = port
        self.defaults = {"latency_ms": float(latency_ms), "bandwidth_mbps": float(bandwidth_mbps)}
        self.clients: dict[str, Client] = {}
        self.default_faults = Faults()
        self._by_port: dict[int, Client] = {}
        self._ids = itertools.count(1)
        self._session: ClientSession | None = None
        self._runner: web.AppRunner | None = None

    # -- lifecycle -------------------------------------------------------
    async def start(self) -> int:
        self._session = ClientSession(
            connector=TCPConnector(limit=256), timeout=ClientTimeout(total=None), auto_decompress=False
        )
        app = web.Application(client_max_size=2**40)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        default = Client("default", **self.defaults)
        await self._listen(default, self.port)
        self.port = default.port
        return self.port

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()
        if self._session:
            await self._session.close()

    async def _listen(self, client: Client, port: int = 0) -> None:
        site = web.TCPSite(self._runner, self.host, port, reuse_address=True)
        await site.start()
        client.site = site
        client.port = site._server.sockets[0].getsockname()[1]
        self.clients[client.id] = client
        self._by_port[client.port] = client

    # -- requests --------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith(CONTROL_PREFIX):
            return await self._control(request)
        local_port = request.transport.get_extra_info("sockname")[1]
        client = self._by_port.get(local_port) or self.clients["default"]
        body = await request.read()
        client.counts[request.method] = client.counts.get(request.method, 0) + 1
        client.bytes_in += len(body)
        fault, delay = client.fate()
        if delay:
            await asyncio.sleep(delay)
        if fault == "reset":
            request.transport.abort()  # the client sees the connection reset, no answer
            return web.Response(status=500)  # never sent: the transport is gone
        if fault == "slowdown":  # a HEAD answer carries no body (S3 sends the status alone)
            return web.Response(status=503, body=None if request.method == "HEAD" else SLOWDOWN_BODY,
                                content_type="application/xml")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Host"] = request.headers.get("Host", f"{self.host}:{local_port}")
        if self.guard is not None:  # this request crossed the link: the local S3 serves it while a case runs
            from layoutlab.local.case_guard import PROXIED_HEADER

            headers[PROXIED_HEADER] = self.guard.token
        async with self._session.request(
            request.method, self.upstream + request.path_qs, headers=headers, data=body or None,
            allow_redirects=False,
        ) as upstream:
            payload = await upstream.read()
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
            # first-byte latency, added on top of moto's own (loopback) time so
            # that emulated time = requests x latency + bytes / bandwidth exactly
            if client.latency_ms > 0:
                await asyncio.sleep(client.latency_ms / 1000.0)
            if request.method == "HEAD":
                out_headers["Content-Length"] = upstream.headers.get("Content-Length", "0")
                return web.Response(status=upstream.status, headers=out_headers)
            response = web.StreamResponse(status=upstream.status, headers=out_headers)
            response.content_length = len(payload)
            await response.prepare(request)
            await self._send_throttled(response, payload, client.bandwidth_mbps)
            client.bytes_out += len(payload)
            await response.write_eof()
            return response

    @staticmethod
    async def _send_throttled(response: web.StreamResponse, payload: bytes, bandwidth_mbps: float) -> None:
        if not payload:
            return
        view = memoryview(payload)
        if bandwidth_mbps <= 0:
            await response.write(view)
            return
        bytes_per_s = bandwidth_mbps * 1e6 / 8
        start = time.perf_counter()
        for offset in range(0, len(view), SEND_CHUNK):
            chunk = view[offset:offset + SEND_CHUNK]
            await response.write(chunk)
            ahead = (offset + len(chunk)) / bytes_per_s - (time.perf_counter() - start)
            if ahead > 0:
                await asyncio.sleep(ahead)

    # -- control API -----------------------------------------------------
    async def _control(self, request: web.Request) -> web.Response:
        parts = [p for p in request.path[len(CONTROL_PREFIX):].split("/") if p]
        if parts == ["status"] and request.method == "GET":
            return web.json_response({"upstream": self.upstream, "port": self.port, "defaults": self.defaults,
                                      "clients": {cid: c.stats() for cid, c in self.clients.items()}})
        if parts == ["clients"] and request.method == "POST":
            spec = await request.json() if request.can_read_body else {}
            latency = float(spec.get("latency_ms", self.defaults["latency_ms"]))
            bandwidth = float(spec.get("bandwidth_mbps", self.defaults["bandwidth_mbps"]))
            if latency < 0 or bandwidth < 0:
                return web.json_response({"error": "latency_ms and bandwidth_mbps must be >= 0"}, status=400)
            try:
                faults = Faults.from_spec(spec["faults"]) if "faults" in spec else self.default_faults
            except (TypeError, ValueError) as error:
                return web.json_response({"error": str(error)}, status=400)
            client = Client(f"{spec.get('name', 'client')}-{next(self._ids)}", latency, bandwidth, faults=faults,
                            case=bool(spec.get("case")))
            await self._listen(client)
            if client.case and self.guard is not None:
                self.guard.arm(client.id)
            return web.json_response(client.stats(), status=201)
        if parts == ["faults"] and request.method == "POST":
            try:
                faults = Faults.from_spec(await request.json() if request.can_read_body else {})
            except (TypeError, ValueError) as error:
                return web.json_response({"error": str(error)}, status=400)
            self.default_faults = faults
            default = self.clients["default"]
            default.faults, default._draws = faults, None
            return web.json_response(faults.to_dict())
        if len(parts) == 2 and parts[0] == "clients":
            client = self.clients.get(parts[1])
            if client is None:
                return web.json_response({"error": f"no client {parts[1]!r}"}, status=404)
            if client.case and self.guard is not None:
                client.direct_requests = self.guard.direct_requests(client.id)
            if request.method == "GET":
                return web.json_response(client.stats())
            if request.method == "POST" and request.query.get("action") == "reset":
                client.reset()
                return web.json_response(client.stats())
            if request.method == "DELETE" and client.id != "default":
                if client.case and self.guard is not None:
                    client.direct_requests = self.guard.disarm(client.id)
                stats = client.stats()
                await client.site.stop()
                self.clients.pop(client.id, None)
                self._by_port.pop(client.port, None)
                return web.json_response(stats)
        return web.json_response({"error": f"unknown control request {request.method} {request.path}"}, status=404)


class ProxyThread:
    """Run an ``S3Proxy`` on its own event loop in a daemon thread (used by the service)."""

    def __init__(self, proxy: S3Proxy):
        self.proxy = proxy
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="s3-proxy")

    def start(self) -> int:
        self._thread.start()
        return asyncio.run_coroutine_threadsafe(self.proxy.start(), self.loop).result(timeout=30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.stop(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
