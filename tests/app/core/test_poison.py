"""Poison beside ordinary traffic, on a real uvicorn with its trail on SQLite and on
PostgreSQL: every poisoned request gets its own answer, and no ordinary one fails.

The poison is what once failed a whole group commit, or could: a 20-digit integer read by
Python's parser (a body with a space before a colon), on ``/predict`` and on OIP infer;
numbers beyond float32, negative ones too; a 400-digit integer for a category (read as
missing here); and a request id sent again and again by two clients at once. The ordinary
clients send rows of the credit regression bundle, each under an id of its own;
``/readyz`` is polled throughout.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.bundles import TEST_HASH_KEY, Bundles
from tests.support.harness import UvicornProcess
from tests.support.trail import Trail

ORDINARY_CLIENTS, ORDINARY_REQUESTS = 2, 120
NUMERIC, CATEGORICAL = "duration", "checking_status"


def spaced(body: Any) -> bytes:
    """JSON with a space before each colon: orjson's fast path declines it, and Python's
    parser keeps a long integer as an int."""
    return json.dumps(body, separators=(", ", " : ")).encode()


def with_value(row: dict[str, Any], value: Any, name: str = NUMERIC) -> bytes:
    """``row`` with a feature (the numeric one) set to ``value``, written as its digits."""
    return spaced({"instances": [{**row, name: "@"}]}).replace(b'"@"', str(value).encode())


def oip_body(rows: list[dict[str, Any]], numeric: set[str], value: Any) -> bytes:
    inputs = []
    for name in rows[0]:
        values = [row[name] for row in rows]
        if name == NUMERIC:
            values = ["@"]
        dtype = "FP64" if name in numeric else "BYTES"
        inputs.append({"name": name, "datatype": dtype, "shape": [1], "data": values})
    return spaced({"inputs": inputs}).replace(b'"@"', str(value).encode())


@pytest.fixture(params=["sqlite", "postgres"])
def served(
    request: pytest.FixtureRequest, bundles: Bundles, tmp_path: Path
) -> Iterator[tuple[UvicornProcess, Trail]]:
    if request.param == "sqlite":
        file = tmp_path / "audit.db"
        trail = Trail(f"sqlite:///{file}", file)
    else:
        trail = Trail(request.getfixturevalue("pg_url"), None)
    env = {
        "IABMA_STORE": str(bundles.store),
        "IABMA_MODEL_NAME": "credit",
        "IABMA_AUDIT_URL": trail.url,
        "IABMA_AUDIT_HASH_KEY": TEST_HASH_KEY,
        "IABMA_AUDIT_PAYLOAD": "full",
        "IABMA_UNKNOWN_CATEGORY": "missing",  # any value of a categorical feature is taken
        "IABMA_LOG_LEVEL": "WARNING",
    }
    proc = UvicornProcess(env)
    with proc:
        proc.wait_ready()
        yield proc, trail


Poison = tuple[str, str, bytes, dict[str, str], set[int]]


def poisons(rows: list[dict[str, Any]], numeric: set[str]) -> list[Poison]:
    """(name, path, body, headers, the statuses it may get)."""
    row = rows[0]
    predict, infer = "/predict", "/v2/models/credit/infer"
    json_type = {"content-type": "application/json"}
    # A 20-digit integer is a number within float32: served, unless the experts' answer
    # to it overflows (a 422 naming the row); never a 5xx.
    huge = {200, 422}
    return [
        ("20 digits, /predict", predict, with_value(row, 10**20), json_type, huge),
        ("-20 digits, /predict", predict, with_value(row, -(10**20)), json_type, huge),
        ("20 digits, OIP", infer, oip_body(rows[:1], numeric, 10**20), json_type, huge),
        ("beyond float32", predict, with_value(row, -(10**39)), json_type, {422}),
        # Read as a missing category; the record keeps its digits.
        (
            "400 digits, a category",
            predict,
            with_value(row, 10**400, CATEGORICAL),
            json_type,
            {200},
        ),
        ("-1e39, OIP", infer, oip_body(rows[:1], numeric, -1e39), json_type, {400}),
        # Two clients send one id again and again: one record, every other answer a 409.
        (
            "one id, twice at once",
            predict,
            with_value(row, 3),
            {**json_type, "x-request-id": "poison-dup"},
            {200, 409},
        ),
        (
            "one id, twice at once",
            predict,
            with_value(row, 4),
            {**json_type, "x-request-id": "poison-dup"},
            {200, 409},
        ),
    ]


async def traffic(
    base: str, rows: list[dict[str, Any]], numeric: set[str]
) -> tuple[Counter[Any], dict[str, Counter[int]], list[int]]:
    ordinary: Counter[Any] = Counter()
    poisoned: dict[str, Counter[int]] = {}
    ready: list[int] = []
    done = asyncio.Event()

    async def ordinary_client(k: int, client: httpx.AsyncClient) -> None:
        for i in range(ORDINARY_REQUESTS):
            row = rows[(k * ORDINARY_REQUESTS + i) % len(rows)]
            r = await client.post("/predict", json={"instances": [row]})
            ordinary[r.status_code if r.status_code != 200 else "ok"] += 1
            if r.status_code != 200:
                ordinary[r.text[:200]] += 1

    async def poison_client(p: Poison, client: httpx.AsyncClient) -> None:
        name, path, body, headers, _ = p
        seen = poisoned.setdefault(name, Counter())
        while not done.is_set():
            r = await client.post(path, content=body, headers=headers)
            seen[r.status_code] += 1

    async def readiness(client: httpx.AsyncClient) -> None:
        while not done.is_set():
            ready.append((await client.get("/readyz")).status_code)
            await asyncio.sleep(0.05)

    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        background = [asyncio.create_task(poison_client(p, client)) for p in poisons(rows, numeric)]
        background.append(asyncio.create_task(readiness(client)))
        await asyncio.gather(*(ordinary_client(k, client) for k in range(ORDINARY_CLIENTS)))
        done.set()
        await asyncio.gather(*background)
    return ordinary, poisoned, ready


@pytest.mark.slow
def test_poison_beside_ordinary_traffic_fails_no_one_else(
    served: tuple[UvicornProcess, Trail], bundles: Bundles
) -> None:
    proc, trail = served
    rows = bundles.credit.instances(slice(0, 50))
    numeric = {k for k, v in rows[0].items() if isinstance(v, float)}
    ordinary, poisoned, ready = asyncio.run(
        asyncio.wait_for(traffic(proc.base_url, rows, numeric), 300)
    )
    assert ordinary == {"ok": ORDINARY_CLIENTS * ORDINARY_REQUESTS}, ordinary
    assert set(ready) == {200} and len(ready) > 5, Counter(ready)
    expected = {name: allowed for name, _, _, _, allowed in poisons(rows, numeric)}
    for name, seen in poisoned.items():
        assert sum(seen.values()) > 5, (name, seen)
        assert set(seen) <= expected[name], (name, seen)
    assert poisoned["beyond float32"] == {422: sum(poisoned["beyond float32"].values())}
    assert poisoned["one id, twice at once"][200] == 1
    # Every 2xx left one record, and nothing else did.
    answered = ORDINARY_CLIENTS * ORDINARY_REQUESTS + sum(s[200] for s in poisoned.values())
    assert trail.count() == answered
    assert trail.request_ids("where request_id = " + trail.rid("poison-dup")) == ["poison-dup"]
    # What the trail keeps of them: the 20-digit integer as the float the graph took, the
    # 400 digits of a category as text.
    kept = [json.loads(text)[0] for (text,) in trail.rows("select input_json from iabma_audit_log")]
    assert any(row[NUMERIC] == 1e20 for row in kept)
    assert any(row[CATEGORICAL] == "1" + "0" * 400 for row in kept)
