"""The local S3's guard: while a case runs, a read of the case that did not cross the proxy is refused and counted."""

from __future__ import annotations

from layoutlab.local.case_guard import PROXIED_HEADER, CaseGuard

S3_AUTH = "AWS4-HMAC-SHA256 Credential=layoutlab-case/20261125/us-east-1/s3/aws4_request, SignedHeaders=host"
DYNAMODB_AUTH = "AWS4-HMAC-SHA256 Credential=layoutlab-case/20261125/us-east-1/dynamodb/aws4_request, SignedHeaders=host"
# the pipeline's own bookkeeping (another execution's Map state reading its items while a case runs)
PIPELINE_AUTH = "AWS4-HMAC-SHA256 Credential=layoutlab-local/20261125/us-east-1/s3/aws4_request, SignedHeaders=host"


def environ(method="GET", path="/bucket/key", auth=S3_AUTH, token=None):
    env = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "", "HTTP_AUTHORIZATION": auth}
    if token:
        env["HTTP_" + PROXIED_HEADER.upper().replace("-", "_")] = token
    return env


def served(guard, env):
    answers = []
    body = guard.wsgi(lambda e, start: (start("200 OK", []), [b"data"])[1])(env, lambda s, h: answers.append(s))
    return answers[0], b"".join(body)


def test_reads_around_the_proxy_are_refused_and_counted_only_while_a_case_runs():
    guard = CaseGuard()
    assert served(guard, environ()) == ("200 OK", b"data")  # no case: conversions and uploads read directly
    guard.arm("bench-1")
    status, body = served(guard, environ())
    assert status.startswith("403") and b"AccessDenied" in body and b"proxy client" in body
    assert served(guard, environ("HEAD"))[0].startswith("403")
    assert served(guard, environ(token=guard.token)) == ("200 OK", b"data")  # crossed the link
    assert served(guard, environ(token="forged"))[0].startswith("403")
    # not S3 reads: writes, other services, moto's own API
    assert served(guard, environ("PUT"))[0] == "200 OK"
    assert served(guard, environ("POST", "/", DYNAMODB_AUTH))[0] == "200 OK"
    assert served(guard, environ("GET", "/moto-api/reset"))[0] == "200 OK"
    assert served(guard, environ(auth=PIPELINE_AUTH))[0] == "200 OK"
    assert served(guard, environ(auth=""))[0] == "200 OK"
    assert guard.direct_requests("bench-1") == 3
    assert guard.disarm("bench-1") == 3
    assert served(guard, environ()) == ("200 OK", b"data")
