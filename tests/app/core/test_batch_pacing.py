"""Paced batching: gRPC calls, which grpc.aio accepts one per turn of the event loop, share
a graph run while they keep coming, up to a cap; a lone call never waits."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.codecs import native
from app.core.batching import Batcher
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness

GAP_MS, CAP_MS = 50.0, 200.0


def _paced(
    bundles: Bundles, tmp_path: Path, in_flight: int, n: int, every_s: float, paced: bool = True
) -> tuple[list[tuple[int, bool]], list[float]]:
    """Send ``n`` one-row predictions ``every_s`` apart to a paced batcher that believes
    ``in_flight`` requests are being served: each graph run's request count and whether it
    waited, and when (seconds after the first was sent) each prediction was answered."""
    runs: list[tuple[int, bool]] = []
    with AsgiHarness(make_settings(bundles.store, tmp_path, "demo")) as app:
        model = app.service.runtime.current
        assert model is not None
        on_run = lambda _, k, w: runs.append((k, w))  # noqa: E731
        batcher = Batcher(0.0, 256, lambda: in_flight, on_run, GAP_MS, CAP_MS)
        parts = [
            native.decode({"instances": bundles.demo.instances([k])}, model, 1000)[0].columns
            for k in range(n)
        ]

        async def send() -> list[float]:
            loop = asyncio.get_running_loop()
            t0, answered = loop.time(), [0.0] * n

            async def one(k: int) -> None:
                await batcher.predict(model, parts[k], 1, paced)
                answered[k] = loop.time() - t0

            tasks = []
            for k in range(n):
                tasks.append(asyncio.ensure_future(one(k)))
                await asyncio.sleep(every_s)
            await asyncio.gather(*tasks)
            return answered

        answered = app.run(send())
    return runs, answered


def test_paced_calls_share_a_run_while_they_keep_coming(bundles: Bundles, tmp_path: Path) -> None:
    # 5 ms apart, within the 50 ms gap: one run, once the gap after the last has passed.
    runs, answered = _paced(bundles, tmp_path, in_flight=10, n=4, every_s=0.005)
    assert runs == [(4, True)]
    assert min(answered) >= 0.015 + GAP_MS / 1000 * 0.9


def test_a_paced_batch_runs_at_its_cap(bundles: Bundles, tmp_path: Path) -> None:
    # 30 ms apart for 300 ms: within the gap each time, so only the cap ends a batch.
    runs, answered = _paced(bundles, tmp_path, in_flight=20, n=10, every_s=0.03)
    assert len(runs) >= 2 and sum(k for k, _ in runs) == 10
    assert runs[0][0] < 10 and all(waited for _, waited in runs)
    assert answered[0] < CAP_MS / 1000 * 1.5


def test_a_lone_paced_call_and_an_unpaced_request_do_not_wait(
    bundles: Bundles, tmp_path: Path
) -> None:
    runs, answered = _paced(bundles, tmp_path, in_flight=1, n=2, every_s=0.005)
    assert runs == [(1, False), (1, False)]
    assert answered[0] < GAP_MS / 1000
    runs, answered = _paced(bundles, tmp_path, in_flight=10, n=2, every_s=0.005, paced=False)
    assert runs == [(1, False), (1, False)]
