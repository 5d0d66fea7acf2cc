"""Dynamic batching: concurrent requests share a graph run and get exactly their own rows."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import numpy as np

from app.codecs import native
from app.core.batching import Batcher
from app.core.context import new_request_id
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness
from tests.support.metrics import scrape, value


async def _concurrent(app: AsgiHarness, rows: list[list[dict[str, float]]]) -> list[httpx.Response]:
    """The requests at once, on the app's own event loop."""
    transport = httpx.ASGITransport(app=app.app)
    async with httpx.AsyncClient(transport=transport, base_url=app.base_url) as client:
        return await asyncio.gather(*[client.post("/predict", json={"instances": r}) for r in rows])


def test_concurrent_requests_share_graph_runs_and_keep_their_rows(
    bundles: Bundles, tmp_path: Path
) -> None:
    trained = bundles.demo
    # Requests of 1, 2 and 3 rows, interleaved, so that batches split them at odd offsets.
    sizes = [1 + k % 3 for k in range(24)]
    starts = np.cumsum([0, *sizes[:-1]])
    rows = [
        trained.instances(slice(int(s), int(s) + n)) for s, n in zip(starts, sizes, strict=True)
    ]
    model = {"model_name": "demo", "model_version": trained.version}
    with AsgiHarness(make_settings(bundles.store, tmp_path, "demo")) as app:
        batcher = app.service.batcher
        assert batcher is not None
        before, _ = scrape(app)
        runs_before = batcher.batches
        responses = app.run(_concurrent(app, rows))
        runs = batcher.batches - runs_before
        after, _ = scrape(app)
    assert [r.status_code for r in responses] == [200] * len(rows)
    assert runs < len(rows), "concurrent requests must share graph runs"

    def delta(name: str) -> float:
        return value(after, name, **model) - value(before, name, **model)

    # /metrics shows the batching: its graph runs, and every request in one of them.
    assert delta("iabma_batch_requests_count") == runs
    assert delta("iabma_batch_requests_sum") == len(rows)
    got = np.concatenate(
        [
            [list(p["prediction"]["probabilities"].values()) for p in r.json()["predictions"]]
            for r in responses
        ]
    )
    X = trained.X.iloc[: int(starts[-1]) + sizes[-1]]
    np.testing.assert_allclose(got, trained.est.predict_proba(X), atol=1e-5, rtol=0)


def test_one_client_at_a_time_runs_one_graph_per_request(bundles: Bundles, tmp_path: Path) -> None:
    with AsgiHarness(make_settings(bundles.store, tmp_path, "demo")) as app:
        batcher = app.service.batcher
        assert batcher is not None
        before = batcher.batches
        for k in range(5):
            assert (
                app.post("/predict", json={"instances": bundles.demo.instances([k])}).status_code
                == 200
            )
        assert batcher.batches - before == 5


WAIT_MS = 100.0  # the most IABMA_BATCH_WAIT_MS allows


def _staggered(
    bundles: Bundles, tmp_path: Path, in_flight: int, n: int, gap_s: float
) -> tuple[Batcher, list[tuple[int, bool]], float, list[int]]:
    """Send ``n`` one-row predictions ``gap_s`` apart to a batcher with a long wait that
    believes ``in_flight`` requests are being served. Returns it, each graph run's request
    count and whether it waited, the seconds until every prediction was answered, and the
    requests parked in the batch after all were sent and once all were answered."""
    runs: list[tuple[int, bool]] = []
    parked: list[int] = []
    with AsgiHarness(make_settings(bundles.store, tmp_path, "demo")) as app:
        model = app.service.runtime.current
        assert model is not None
        batcher = Batcher(WAIT_MS, 256, lambda: in_flight, lambda _, k, w: runs.append((k, w)))
        parts = [
            native.decode({"instances": bundles.demo.instances([k])}, model, 1000)[0].columns
            for k in range(n)
        ]

        async def send() -> float:
            loop = asyncio.get_running_loop()
            t0, tasks = loop.time(), []
            for cols in parts:
                tasks.append(asyncio.ensure_future(batcher.predict(model, cols, 1)))
                await asyncio.sleep(gap_s)
            parked.append(batcher.parked())
            await asyncio.gather(*tasks)
            parked.append(batcher.parked())
            return loop.time() - t0

        elapsed = app.run(send())
    return batcher, runs, elapsed, parked


def test_a_busy_batch_waits_for_the_requests_in_flight_and_runs_when_all_joined(
    bundles: Bundles, tmp_path: Path
) -> None:
    # 10 ms apart: without the wait these would be three graph runs.
    batcher, runs, elapsed, _ = _staggered(bundles, tmp_path, in_flight=3, n=3, gap_s=0.01)
    assert runs == [(3, True)] and batcher.waited == 1
    # It ran when the third joined (about 20 ms in), not at the end of the wait.
    assert elapsed < WAIT_MS / 1000 * 0.9


def test_a_busy_batch_runs_after_the_wait_when_the_others_do_not_come(
    bundles: Bundles, tmp_path: Path
) -> None:
    _, runs, elapsed, parked = _staggered(bundles, tmp_path, in_flight=5, n=2, gap_s=0.0)
    assert runs == [(2, True)]
    assert elapsed >= WAIT_MS / 1000 * 0.9
    # While it waited, both were parked: an audit group does not wait for those.
    assert parked == [2, 0]


def test_a_lone_request_never_waits(bundles: Bundles, tmp_path: Path) -> None:
    settings = make_settings(bundles.store, tmp_path, "demo", batch_wait_ms=WAIT_MS)
    with AsgiHarness(settings) as app:
        batcher = app.service.batcher
        assert batcher is not None
        for k in range(3):
            r = app.post("/predict", json={"instances": bundles.demo.instances([k])})
            assert r.status_code == 200
        assert batcher.waited == 0
        assert app.service.in_flight == 0


def test_batching_can_be_turned_off(bundles: Bundles, tmp_path: Path) -> None:
    settings = make_settings(bundles.store, tmp_path, "demo", batching=False)
    with AsgiHarness(settings) as app:
        assert app.service.batcher is None
        responses = app.run(_concurrent(app, [bundles.demo.instances([k]) for k in range(8)]))
    assert [r.status_code for r in responses] == [200] * 8


def test_generated_request_ids_grow_with_time() -> None:
    ids = [new_request_id() for _ in range(200)]
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert len(set(ids)) == 200
    prefixes = [i[:12] for i in ids]
    assert prefixes == sorted(prefixes), "the millisecond prefix keeps the audit index append-only"
