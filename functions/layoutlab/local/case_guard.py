"""No path around the emulated link: while a benchmark case runs, the local S3 serves reads only through the proxy.

A case measures what crosses its own proxy client (``local/proxy.py``: latency, bandwidth,
counts). A library that reached moto directly (an endpoint persisted in a variant, an
environment variable the case did not replace) would read with no latency and uncounted, and
the record would look faster and cheaper than S3 would be. This module makes that impossible
rather than unlikely:

- the proxy adds ``PROXIED_HEADER`` with this cloud's secret ``token`` to every request it
  forwards to moto;
- a proxy client opened for a case (``{"case": true}``, what ``ProxyCounter`` opens) *arms* the
  guard until it is closed; the measured process signs its requests with the case's own access
  key (``accounting.CASE_ACCESS_KEY``, set by ``run_case`` while its client is open);
- ``CaseGuard.wsgi(app)`` wraps moto's WSGI application: while a case is armed, an S3 read
  (GET or HEAD, any key, listing or bucket) signed by the case's key that does not carry the token is answered
  ``403 AccessDenied`` and counted as a *direct request* of every armed case. The case's
  record has the count (``proxy_counts.direct_requests``); the runner turns a case with any
  into an error record, never a measurement.

Writes, other services (DynamoDB, Step Functions, CloudWatch: their requests are signed for
their own service), moto's own API (``/moto-api``) and requests signed with any other key are
never refused: conversions and the pipeline's bookkeeping (another execution's Map state reading
its items while this case runs) talk to moto directly, outside the measured process.
"""

from __future__ import annotations

import re
import secrets
import threading

from layoutlab.bench.accounting import CASE_ACCESS_KEY

PROXIED_HEADER = "X-Layoutlab-Proxied"
_WSGI_HEADER = "HTTP_" + PROXIED_HEADER.upper().replace("-", "_")
# SigV4's credential scope names the key and the service: "Credential=AKID/20261125/us-east-1/s3/aws4_request"
_SCOPE = re.compile(r"Credential=([^/,&]+)(?:/|%2F)[^/%]+(?:/|%2F)[^/%]+(?:/|%2F)([^/%]+)(?:/|%2F)aws4_request")
REFUSAL = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>layoutlab local '
           "cloud: a benchmark case is running and this S3 read did not come through its proxy client "
           "(the endpoint it used is the local S3's own, not the case's)</Message>"
           "<RequestId>layoutlab-case-guard</RequestId></Error>").encode()


def signed_by_case(environ: dict) -> bool:
    """True when a WSGI request is an S3 request signed with a benchmark case's access key."""
    found = _SCOPE.search(environ.get("HTTP_AUTHORIZATION", "") or environ.get("QUERY_STRING", ""))
    return found is not None and found.group(1) == CASE_ACCESS_KEY and found.group(2) == "s3"


class CaseGuard:
    """The armed cases and what each saw refused; shared by the proxy and moto (one process)."""

    def __init__(self, token: str | None = None):
        self.token = token or secrets.token_hex(16)
        self._lock = threading.Lock()
        self._direct: dict[str, int] = {}  # armed case client id -> direct requests refused while it was open
        self.refused: list[str] = []  # the last refusals ("GET /bucket/key"), for the server log

    def arm(self, case_id: str) -> None:
        with self._lock:
            self._direct.setdefault(case_id, 0)

    def disarm(self, case_id: str) -> int:
        with self._lock:
            return self._direct.pop(case_id, 0)

    def direct_requests(self, case_id: str) -> int | None:
        with self._lock:
            return self._direct.get(case_id)

    def refuses(self, environ: dict) -> bool:
        """Whether to refuse this request (and count it), given the cases armed now."""
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD") or environ.get("PATH_INFO", "").startswith(
                "/moto-api"):
            return False
        if environ.get(_WSGI_HEADER) == self.token or not signed_by_case(environ):
            return False
        with self._lock:
            if not self._direct:
                return False
            for case_id in self._direct:
                self._direct[case_id] += 1
            self.refused = (self.refused + [f"{environ['REQUEST_METHOD']} {environ.get('PATH_INFO', '')}"])[-20:]
        return True

    def wsgi(self, app):
        """``app`` (moto's WSGI application) behind the guard."""

        def guarded(environ, start_response):
            if self.refuses(environ):
                body = b"" if environ["REQUEST_METHOD"] == "HEAD" else REFUSAL
                start_response("403 Forbidden", [("Content-Type", "application/xml"),
                                                  ("Content-Length", str(len(body)))])
                return [body]
            return app(environ, start_response)

        return guarded


def guarded_moto_server(guard: CaseGuard, host: str):
    """moto's ``ThreadedMotoServer`` on a free port of ``host``, its application behind ``guard``."""
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    class GuardedMotoServer(ThreadedMotoServer):
        def _server_entry(self) -> None:  # ThreadedMotoServer's own, with the application wrapped
            app = guard.wsgi(DomainDispatcherApplication(create_backend_app))
            self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
            self._server_ready_event.set()
            self._server.serve_forever()

    return GuardedMotoServer(ip_address=host, port=0, verbose=False)
