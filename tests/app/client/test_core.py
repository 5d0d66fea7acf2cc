"""The shared core on its own: backoff, Retry-After, the retry plan, and request bodies."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from app.client import Client, ConnectionFailed, InvalidInput, RetryPolicy, ServiceUnavailable
from app.client.core import Call, Sleep, plan, retry_after_seconds

FAST = RetryPolicy(attempts=4, backoff=0.001, max_backoff=0.002)


def test_backoff_doubles_is_capped_and_jittered() -> None:
    p = RetryPolicy(backoff=0.5, max_backoff=3.0, jitter=0.5)
    assert [p.delay(k, None, 0.0) for k in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert p.delay(1, None, 0.999) == pytest.approx(0.5, abs=1e-3)  # 1.0 scaled by 1 - 0.5
    assert RetryPolicy(jitter=0).delay(2, None, 0.7) == pytest.approx(0.8)
    # Retry-After wins when longer, within max_retry_after.
    assert p.delay(0, 2.0, 0.0) == 2.0 and p.delay(0, 0.1, 0.0) == 0.5
    assert RetryPolicy(max_retry_after=5).delay(0, 3600, 0.0) == 5
    for bad in ({"attempts": 0}, {"jitter": 1.5}, {"backoff": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            RetryPolicy(**bad)


def test_retry_after_reads_seconds_and_dates() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    date = format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(date, now=now.timestamp()) == pytest.approx(7)
    assert retry_after_seconds(format_datetime(now, usegmt=True), now.timestamp() + 9) == 0
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None


def answer(status: int, body: object, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers)


def test_plan_retries_503_honours_retry_after_then_parses() -> None:
    call = Call("GET", "/models", lambda body: body["ok"])
    steps = plan(call, RetryPolicy(attempts=3, backoff=0.1, jitter=0), random.Random(0))
    assert next(steps) is call
    wait = steps.send(answer(503, {"error": {"code": "not_ready"}}, **{"Retry-After": "2"}))
    assert wait == Sleep(2.0)
    assert steps.send(None) is call
    assert steps.send(httpx.ConnectError("refused")) == Sleep(0.2)
    assert steps.send(None) is call
    with pytest.raises(StopIteration) as done:
        steps.send(answer(200, {"ok": 42}))
    assert done.value.value == 42


def test_plan_never_retries_4xx_or_a_call_marked_unsafe() -> None:
    call = Call("POST", "/predict", dict, request_id="r1")
    steps = plan(call, FAST, random.Random(0))
    next(steps)
    body = {"error": {"code": "wrong_type", "message": "m", "field": "instances[0].x1"}}
    with pytest.raises(InvalidInput) as caught:
        steps.send(answer(422, body))
    assert (caught.value.field, caught.value.attempts, caught.value.request_id) == (
        "instances[0].x1", 1, "r1",
    )  # fmt: skip
    unsafe = plan(Call("POST", "/admin/reload", dict, retryable=False), FAST, random.Random(0))
    next(unsafe)
    with pytest.raises(ServiceUnavailable):
        unsafe.send(answer(503, {"error": {"code": "not_ready"}}))


def test_client_over_a_mock_transport_retries_with_one_request_id() -> None:
    """The policy end to end through httpx (the same plan also runs against real servers
    in test_retries.py)."""
    seen: list[httpx.Request] = []
    script = [503, 502, 504]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if script:
            return answer(script.pop(0), {"error": {"code": "x", "message": "busy", "field": ""}})
        return answer(200, {"model": "m", "version": "1", "request_id": "r", "task": "regression",
                            "predictions": []})  # fmt: skip

    with Client("http://svc", transport=httpx.MockTransport(handler), retry=FAST) as client:
        assert client.predict([{"x": 1.0}]).predictions == ()
    assert len(seen) == 4 and len({r.headers["x-request-id"] for r in seen}) == 1

    def refuse(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        raise httpx.ConnectError("connection refused", request=request)

    seen.clear()
    refusing = Client("http://svc", transport=httpx.MockTransport(refuse), retry=FAST)
    with refusing, pytest.raises(ConnectionFailed) as caught:
        refusing.models()
    assert len(seen) == 4 and caught.value.attempts == 4
    assert caught.value.status is None and caught.value.code == "connection_failed"
