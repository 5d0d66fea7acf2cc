"""The clients' feedback and performance calls against a real uvicorn: batches counted
and joined, faults named among all outcomes, a lost answer retried as duplicates."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import httpx
import pytest

from app.client import (
    AsyncClient,
    Client,
    ClientError,
    Conflict,
    FeedbackResult,
    InvalidInput,
    Performance,
    RetryPolicy,
)
from app.contract.performance import ClassScores
from tests.support.bundles import Bundles

if TYPE_CHECKING:
    from conftest import Serve  # the fixture's type; pytest provides the value


def predicted(client: Client, bundles: Bundles, rid: str, n: int = 5) -> list[int]:
    """Predict ``n`` rows under ``rid``; their labels, as outcomes to send back."""
    result = client.predict(bundles.demo.instances(slice(0, n)), request_id=rid)
    return [p.prediction.label for p in result.predictions]  # type: ignore[union-attr]


def test_feedback_in_batches_then_performance(demo_url: str, bundles: Bundles) -> None:
    with Client(demo_url) as client:
        labels = predicted(client, bundles, "client-fb", 7)
        sent = [("client-fb", i, y) for i, y in enumerate(labels)]
        result = client.feedback(sent, batch_rows=3)
        assert result == FeedbackResult(accepted=7, duplicates=0)
        again = client.feedback([{"request_id": "client-fb", "row": 6, "outcome": labels[6]}])
        assert again == FeedbackResult(accepted=0, duplicates=1)
        report = client.performance()
    assert isinstance(report, Performance) and report.rows >= 7
    assert isinstance(report.mixture, ClassScores) and report.mixture.accuracy is not None
    assert set(report.experts) == set(bundles.demo.est.expert_names_)


def test_a_fault_names_its_outcome_among_all_of_them(demo_url: str, bundles: Bundles) -> None:
    with Client(demo_url) as client:
        labels = predicted(client, bundles, "client-bad", 5)
        sent = [("client-bad", i, y) for i, y in enumerate(labels)]
        sent[4] = ("client-bad", 9, labels[0])  # no row 9: in the second batch of 3
        with pytest.raises(InvalidInput) as err:
            client.feedback(sent, batch_rows=3)
        assert err.value.field == "outcomes[4].row"
        first = 1 - labels[0]
        with pytest.raises(Conflict) as clash:
            client.feedback([("client-bad", 0, first)])
        assert clash.value.status == 409 and clash.value.field == "outcomes[0].outcome"
        with pytest.raises(TypeError, match=r"outcomes\[0\]"):
            client.feedback([["client-bad", 0]])


def test_a_lost_answer_is_retried_and_counts_as_duplicates(demo_url: str, bundles: Bundles) -> None:
    """The first answer is lost on its way back: the retry finds the outcomes stored."""
    lost = {"done": False}
    real = httpx.HTTPTransport()

    class LosesOneAnswer(httpx.BaseTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            response = real.handle_request(request)
            if request.url.path == "/feedback" and not lost["done"]:
                lost["done"] = True
                response.read()
                raise httpx.ReadError("connection reset after the commit", request=request)
            return response

    with Client(demo_url) as plain:
        labels = predicted(plain, bundles, "client-lost", 2)
    policy = RetryPolicy(attempts=3, backoff=0.01)
    with Client(demo_url, transport=LosesOneAnswer(), retry=policy) as client:
        result = client.feedback([("client-lost", i, y) for i, y in enumerate(labels)])
    assert result == FeedbackResult(accepted=0, duplicates=2)


def test_the_async_client_does_the_same(demo_url: str, bundles: Bundles) -> None:
    with Client(demo_url) as plain:
        labels = predicted(plain, bundles, "client-aio", 4)

    async def main() -> tuple[FeedbackResult, Performance]:
        async with AsyncClient(demo_url) as client:
            sent = [{"request_id": "client-aio", "row": i, "outcome": y} for i, y in
                    enumerate(labels)]  # fmt: skip
            done = await client.feedback(sent, batch_rows=2)
            return done, await client.performance(version=bundles.demo.version)

    done, report = asyncio.run(main())
    assert done == FeedbackResult(accepted=4, duplicates=0)
    assert report.filter["version"] == bundles.demo.version


def test_keys_go_to_the_routes_that_take_them(serve: Serve, bundles: Bundles) -> None:
    url = serve(
        "demo", IABMA_API_KEYS="api", IABMA_FEEDBACK_KEYS="fb", IABMA_AUDITOR_KEYS="aud"
    ).base_url
    with Client(url, api_key="api", feedback_key="fb", auditor_key="aud") as client:
        labels = predicted(client, bundles, "client-keys", 1)
        assert client.feedback([("client-keys", 0, labels[0])]).accepted == 1
        assert client.performance().rows == 1
    with Client(url, api_key="api") as client, pytest.raises(ClientError) as err:
        client.feedback([("client-keys", 0, labels[0])])
    assert err.value.status == 403


def test_performance_leaves_out_the_posters_named(serve: Serve, bundles: Bundles) -> None:
    """Two feedback keys post one row each; leaving one poster out leaves its row out,
    leaving both out leaves none, on the sync and the async client alike."""
    url = serve("demo", IABMA_API_KEYS="api", IABMA_FEEDBACK_KEYS="fb-one,fb-two").base_url
    with Client(url, api_key="api") as plain:
        labels = predicted(plain, bundles, "client-posters", 2)
    posters = []
    for row, key in enumerate(("fb-one", "fb-two")):
        with Client(url, api_key="api", feedback_key=key) as client:
            done = client.feedback([("client-posters", row, labels[row])])
        assert done.accepted == 1 and done.poster is not None
        posters.append(done.poster)
    one, two = posters
    with Client(url, api_key="api") as client:
        assert client.performance().posters == {one: 1, two: 1}
        left = client.performance(exclude_poster=[one])
        assert (left.rows, dict(left.posters)) == (1, {two: 1})
        assert left.filter["exclude_poster"] == [one]
        assert client.performance(exclude_poster=one).posters == {two: 1}
        assert client.performance(exclude_poster=[]).rows == 2  # an empty list leaves none out
        with pytest.raises(InvalidInput) as err:
            client.performance(exclude_poster=["fb-one"])  # a key is not a poster's name
        assert err.value.field == "exclude_poster"
        with pytest.raises(ValueError, match="exclude_poster"):
            client.performance(exclude_poster=[f"{one},{two}"])

    async def main() -> Performance:
        async with AsyncClient(url, api_key="api") as client:
            return await client.performance(exclude_poster=(one, two), buckets=3)

    both = asyncio.run(main())
    assert (both.rows, both.filter["buckets"]) == (0, 3)
