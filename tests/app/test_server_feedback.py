"""Outcomes on the server as it is deployed: SIGKILL in the middle of a feed loses no
acknowledged outcome, and two workers under concurrent predictions count exactly."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.support.bundles import TEST_HASH_KEY, Bundles
from tests.support.harness import UvicornProcess
from tests.support.metrics import parse, total
from tests.support.services import wait_for
from tests.support.trail import Trail

ROWS = 1000  # rows per seeded prediction: outcomes name (request, row)


def env(bundles: Bundles, trail: Trail) -> dict[str, str]:
    return {
        "IABMA_STORE": str(bundles.store),
        "IABMA_MODEL_NAME": "demo",
        "IABMA_AUDIT_URL": trail.url,
        "IABMA_AUDIT_HASH_KEY": TEST_HASH_KEY,
        "IABMA_LOG_LEVEL": "WARNING",
    }


def seed(url: str, bundles: Bundles, requests: int, prefix: str) -> list[dict[str, Any]]:
    """``requests`` predictions of ROWS rows; an outcome (the served label) for each row."""
    rows = bundles.demo.instances(list(range(len(bundles.demo.X)))) * 4
    outcomes = []
    for k in range(requests):
        rid = f"{prefix}-{k}"
        r = httpx.post(url + "/predict", json={"instances": rows[:ROWS]},
                       headers={"X-Request-ID": rid}, timeout=60)  # fmt: skip
        assert r.status_code == 200, r.text
        for i, item in enumerate(r.json()["predictions"]):
            outcomes.append({"request_id": rid, "row": i, "outcome": item["prediction"]["label"]})
    return outcomes


def stored(trail: Trail) -> set[tuple[str, int]]:
    return {
        (rid, int(row))
        for rid, row in trail.rows("select request_id, row_index from iabma_outcomes")
    }


def test_sigkill_loses_no_acknowledged_outcome(
    bundles: Bundles, trail: Trail, tmp_path: Path
) -> None:
    with UvicornProcess(env(bundles, trail), cwd=tmp_path) as served:
        served.wait_ready()
        outcomes = seed(served.base_url, bundles, 4, "kill")
        acknowledged: list[dict[str, Any]] = []
        stop = threading.Event()

        def feed() -> None:
            with httpx.Client(base_url=served.base_url, timeout=10) as client:
                for start in range(0, len(outcomes), 40):
                    batch = outcomes[start : start + 40]
                    try:
                        r = client.post("/feedback", json={"outcomes": batch})
                    except httpx.HTTPError:
                        return  # the server is gone
                    if r.status_code != 200 or stop.is_set():
                        return
                    acknowledged.extend(batch)

        feeder = threading.Thread(target=feed)
        feeder.start()
        wait_for(lambda: len(acknowledged) >= 400, 60, "400 acknowledged outcomes")
        os.killpg(served.proc.pid, signal.SIGKILL)
        served.proc.wait(10)
        stop.set()
        feeder.join(30)
    after = stored(trail)
    assert len(acknowledged) >= 400
    missing = {(o["request_id"], o["row"]) for o in acknowledged} - after
    assert not missing, f"{len(missing)} acknowledged outcomes lost"
    # A batch may be stored whose answer never left: more stored than acknowledged, in
    # whole batches (all or nothing).
    assert len(after) - len(acknowledged) in (0, 40)
    with UvicornProcess(env(bundles, trail), cwd=tmp_path) as again:
        again.wait_ready()
        assert httpx.get(again.base_url + "/performance").json()["rows"] == len(after)


async def _predictions(url: str, n: int) -> list[int]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        rs = await asyncio.gather(
            *[
                client.post("/predict", json={"instances": [{"x1": k / n, "x2": 0.5}]})
                for k in range(n)
            ]
        )
    return [r.status_code for r in rs]


async def _feeds(url: str, outcomes: list[dict[str, Any]], senders: int) -> list[dict[str, int]]:
    """Every sender posts every outcome, in batches of 100, all at once."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:

        async def send() -> list[dict[str, int]]:
            out = []
            for start in range(0, len(outcomes), 100):
                r = await client.post("/feedback", json={"outcomes": outcomes[start : start + 100]})
                assert r.status_code == 200, r.text
                out.append(r.json())
            return out

        parts = await asyncio.gather(*[send() for _ in range(senders)])
    return [answer for part in parts for answer in part]


def test_two_workers_count_exactly_under_concurrent_predictions(
    bundles: Bundles, pg_url: str, tmp_path: Path
) -> None:
    trail = Trail(pg_url, None)
    with UvicornProcess(env(bundles, trail), ("--workers", "2"), cwd=tmp_path) as served:
        served.wait_ready()
        outcomes = seed(served.base_url, bundles, 2, "race")
        before = trail.count()

        async def both() -> tuple[list[int], list[dict[str, int]]]:
            return await asyncio.gather(
                _predictions(served.base_url, 300), _feeds(served.base_url, outcomes, 3)
            )

        codes, answers = asyncio.run(both())
        assert codes == [200] * 300
        assert trail.count() - before == 300, "every prediction has its record"
        assert sum(a["accepted"] for a in answers) == len(outcomes) == len(stored(trail))
        assert sum(a["duplicates"] for a in answers) == 2 * len(outcomes)

        def accepted() -> float:
            samples, _ = parse(httpx.get(served.base_url + "/metrics").text)
            return total(samples, "iabma_feedback_total", result="accepted")

        wait_for(lambda: accepted() == len(outcomes), 10, "both workers' counts")
