"""Retries, keys and gzip over real sockets: a flaky proxy before a real uvicorn, a refused
port, and a server that accepts but never answers."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING

import httpx
import pytest

from app.client import (
    AsyncClient,
    AuthenticationError,
    Client,
    ConnectionFailed,
    InvalidInput,
    PermissionDenied,
    RetryPolicy,
    ServiceUnavailable,
)
from tests.support.bundles import Bundles
from tests.support.harness import free_socket
from tests.support.trail import assert_kept
from tests.support.upstream import FlakyProxy

if TYPE_CHECKING:
    from conftest import Serve  # the fixture's type; pytest provides the value

FAST = RetryPolicy(attempts=3, backoff=0.01, max_backoff=0.05)
ROW = {"x1": 0.5, "x2": -1.0}


def test_503_twice_then_an_answer_recorded_once(serve: Serve) -> None:
    app = serve("demo").base_url  # its own trail, to count what reached it
    with FlakyProxy(app, [503, 503]).running() as proxy, Client(proxy.base_url, retry=FAST) as c:
        result = c.predict([ROW])
        assert [s.method for s in proxy.seen] == ["POST"] * 3
        assert {s.headers["x-request-id"] for s in proxy.seen} == {result.request_id}
    with Client(app) as direct:
        page = direct.weights(limit=10)
        assert [r.request_id for r in page.records] == [result.request_id]
        assert_kept(
            direct.weights(request_id=result.request_id).predictions[0].weights,
            result.predictions[0].weights,
        )


def test_async_retries_the_same_way(demo_url: str) -> None:
    async def main(url: str) -> str:
        async with AsyncClient(url, retry=FAST) as client:
            return (await client.models()).name

    with FlakyProxy(demo_url, [503, 504]).running() as proxy:
        assert asyncio.run(main(proxy.base_url)) == "demo"
        assert [s.path for s in proxy.seen] == ["/models"] * 3


def test_retry_after_is_honoured(demo_url: str) -> None:
    with (
        FlakyProxy(demo_url, [503], retry_after="1").running() as proxy,
        Client(proxy.base_url, retry=FAST) as client,
    ):
        started = time.monotonic()
        client.models()
        waited = time.monotonic() - started
    assert len(proxy.seen) == 2
    assert waited >= 1.0, f"the retry came {waited:.3f}s after a Retry-After of 1s"


def test_503_for_good_raises_after_every_attempt() -> None:
    with FlakyProxy(None, []).running() as proxy, Client(proxy.base_url, retry=FAST) as client:
        with pytest.raises(ServiceUnavailable) as caught:
            client.predict([ROW], request_id="doomed-1")
        assert len(proxy.seen) == 3
    err = caught.value
    assert (err.status, err.code, err.field, err.attempts) == (503, "not_ready", "model", 3)
    assert err.request_id == "doomed-1"


def test_422_through_the_proxy_is_not_retried(demo_url: str) -> None:
    with FlakyProxy(demo_url, []).running() as proxy, Client(proxy.base_url, retry=FAST) as c:
        with pytest.raises(InvalidInput) as caught:
            c.predict([{"x1": None, "x2": "x"}])
        assert len(proxy.seen) == 1
    assert caught.value.field == "instances[0].x2"


def test_connection_refused_is_retried_then_explained() -> None:
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here now
    seen: list[httpx.Request] = []
    policy = RetryPolicy(attempts=3, backoff=0.05, jitter=0)
    url = f"http://127.0.0.1:{port}"
    with Client(url, retry=policy, event_hooks={"request": [seen.append]}) as client:
        started = time.monotonic()
        with pytest.raises(ConnectionFailed) as caught:
            client.predict([ROW], request_id="lost-1")
        waited = time.monotonic() - started
    err = caught.value
    assert len(seen) == 3 and err.attempts == 3 and waited >= 0.15  # 0.05 + 0.1 of backoff
    assert (err.status, err.code, err.request_id) == (None, "connection_failed", "lost-1")
    assert "after 3 attempt(s)" in err.message
    assert "GET /weights?request_id=lost-1" in err.message

    async def main() -> ConnectionFailed:
        async with AsyncClient(url, retry=FAST) as client:
            with pytest.raises(ConnectionFailed) as caught:
                await client.models()
            return caught.value

    assert asyncio.run(main()).attempts == 3


def test_a_server_that_never_answers_times_out_and_is_retried() -> None:
    sock = free_socket()
    sock.listen(8)  # connections complete in the backlog; nothing ever reads them
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        client = Client(url, timeout=0.2, retry=RetryPolicy(attempts=2, backoff=0.01))
        with client, pytest.raises(ConnectionFailed) as caught:
            client.models()
    finally:
        sock.close()
    assert (caught.value.code, caught.value.attempts) == ("timeout", 2)


def test_keys_and_gzip_on_the_wire(demo_url: str, bundles: Bundles) -> None:
    rows = bundles.demo.instances(slice(0, 50))
    options = {"api_key": "k-data", "auditor_key": "k-audit", "gzip": True, "gzip_min_bytes": 512}
    with FlakyProxy(demo_url, []).running() as proxy, Client(proxy.base_url, **options) as c:
        big = c.predict(rows)
        c.predict([ROW])
        c.weights(request_id=big.request_id)
        c.models()
    post_big, post_small, weights, models = proxy.seen
    assert post_big.headers["content-encoding"] == "gzip"
    assert json.loads(post_big.body) == {"instances": rows}
    assert len(post_big.raw) < len(post_big.body) / 2
    assert "content-encoding" not in post_small.headers  # under the threshold
    assert post_big.headers["authorization"] == "Bearer k-data"
    assert models.headers["authorization"] == "Bearer k-data"
    assert weights.headers["authorization"] == "Bearer k-audit"
    assert len(big.predictions) == 50


def test_gzip_bodies_reach_the_real_app(demo_url: str, bundles: Bundles) -> None:
    rows = bundles.demo.instances(slice(0, 50))
    with Client(demo_url, gzip=True, gzip_min_bytes=0) as packed, Client(demo_url) as plain:
        assert packed.predict(rows).predictions == plain.predict(rows).predictions


def test_api_and_auditor_keys_against_the_real_app(serve: Serve) -> None:
    keys = {"IABMA_API_KEYS": "k-one,k-two", "IABMA_AUDITOR_KEYS": "k-audit"}
    url = serve("demo", **keys).base_url
    with Client(url, api_key="k-two", auditor_key="k-audit") as keyed:
        sent = keyed.predict([ROW])
        assert keyed.weights(request_id=sent.request_id).request_id == sent.request_id
        assert keyed.models().name == "demo"
    seen: list[httpx.Request] = []
    hooks = {"request": [seen.append]}
    data_only = Client(url, api_key="k-one", event_hooks=hooks)
    with data_only, pytest.raises(PermissionDenied) as denied:
        data_only.weights(limit=1)
    wrong = Client(url, api_key="wrong", event_hooks=hooks)
    with wrong, pytest.raises(AuthenticationError) as refused:
        wrong.predict([ROW])
    assert (denied.value.status, refused.value.status) == (403, 401)
    assert refused.value.code == "unauthorized" and len(seen) == 2, "4xx are never retried"
