"""Fault settings of the local S3 proxy and task timeouts of the local dispatcher (no sockets)."""

from __future__ import annotations

import json

import pytest

from layoutlab.local import dispatch
from layoutlab.local.proxy import Client, Faults


def _fates(faults: Faults, n: int, client_id: str = "bench-1") -> list[tuple[str | None, float]]:
    client = Client(client_id, latency_ms=0, bandwidth_mbps=0, faults=faults)
    return [client.fate() for _ in range(n)]


def test_faults_hit_their_share_of_requests_and_are_counted():
    faults = Faults(slowdown_rate=0.05, reset_rate=0.01, slow_rate=0.05, slow_ms=100, seed=8)
    client = Client("bench-1", latency_ms=0, bandwidth_mbps=0, faults=faults)
    fates = [client.fate() for _ in range(20000)]
    kinds = [kind for kind, _ in fates]
    assert kinds.count("slowdown") / len(fates) == pytest.approx(0.05, abs=0.005)
    assert kinds.count("reset") / len(fates) == pytest.approx(0.01, abs=0.003)
    slowed = [delay for _, delay in fates if delay]
    assert len(slowed) / len(fates) == pytest.approx(0.05, abs=0.005) and set(slowed) == {0.1}
    stats = client.stats()["faults"]
    assert stats == {"slowdown": kinds.count("slowdown"), "reset": kinds.count("reset"), "slow": len(slowed)}


def test_the_same_seed_and_client_give_the_same_fates_and_others_differ():
    faults = Faults(slowdown_rate=0.2, reset_rate=0.05, seed=3)
    assert _fates(faults, 500) == _fates(faults, 500)
    assert _fates(faults, 500) != _fates(Faults(slowdown_rate=0.2, reset_rate=0.05, seed=4), 500)
    assert _fates(faults, 500) != _fates(faults, 500, client_id="bench-2")


def test_no_faults_by_default():
    assert _fates(Faults(), 1000) == [(None, 0.0)] * 1000


@pytest.mark.parametrize("spec, says", [
    ({"slowdown_rate": 1.5}, "0..1"),
    ({"slowdown_rate": 0.7, "reset_rate": 0.5}, "<= 1"),
    ({"slow_ms": -1}, "slow_ms"),
    ({"typo_rate": 0.1}, "unknown fault setting"),
])
def test_bad_fault_settings_are_refused_with_the_reason(spec, says):
    with pytest.raises(ValueError, match=says):
        Faults.from_spec(spec)


def test_task_timeouts_take_overrides_and_refuse_bad_ones():
    assert dispatch.task_timeouts({})["bench"] == dispatch.TASK_TIMEOUT_S["bench"]
    assert dispatch.task_timeouts({dispatch.TASK_TIMEOUT_ENV: json.dumps({"bench": 5})})["bench"] == 5.0
    for bad in ('{"bnech": 5}', '{"bench": 0}', "[5]", "five"):
        with pytest.raises(ValueError, match=dispatch.TASK_TIMEOUT_ENV):
            dispatch.task_timeouts({dispatch.TASK_TIMEOUT_ENV: bad})
