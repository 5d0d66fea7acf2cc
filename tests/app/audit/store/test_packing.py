"""The audit trail through the app, against SQLite and against the real PostgreSQL here."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.audit.store.packing import unpack, unpack_request_id, weight_sums
from tests.support.bundles import Bundles, assert_close, make_settings
from tests.support.harness import AsgiHarness, UvicornHarness, harness
from tests.support.metrics import totals
from tests.support.services import PG_DSN, schema_of
from tests.support.trail import Trail

N = 60


@pytest.fixture
def serve(bundles: Bundles, tmp_path: Path) -> Callable[..., Any]:
    def build(kind: str, trail: Trail, **kw: Any) -> AsgiHarness | UvicornHarness:
        settings = make_settings(bundles.store, tmp_path, "demo", audit_url=trail.url, **kw)
        return harness(kind, settings)

    return build


async def _burst(
    base_url: str, rows: list[dict[str, Any]], transport: Any = None
) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=base_url, transport=transport, timeout=30) as client:
        return await asyncio.gather(
            *[
                client.post(
                    "/predict", json={"instances": [row]}, headers={"X-Request-ID": f"burst-{k}"}
                )
                for k, row in enumerate(rows)
            ]
        )


@pytest.mark.parametrize("kind", ["uvicorn", "asgi"])
def test_n_concurrent_requests_give_n_records(
    kind: str, trail: Trail, serve: Callable[..., Any], bundles: Bundles
) -> None:
    rows = bundles.demo.instances(slice(0, N))
    with serve(kind, trail) as app:
        commits = "iabma_audit_commit_duration_seconds_count"
        before = totals(app, commits)[commits]
        if isinstance(app, UvicornHarness):
            responses = asyncio.run(_burst(app.base_url, rows))
        else:
            responses = app.run(_burst(app.base_url, rows, httpx.ASGITransport(app=app.app)))
        assert [r.status_code for r in responses] == [200] * N
        assert trail.count() == N
        stored = {
            unpack_request_id(bytes(rid)): (int(n), bytes(blob))
            for rid, n, blob in trail.rows(
                "select request_id, n_instances, answer from iabma_audit_log"
            )
        }
        names = bundles.demo.est.expert_names_
        for r in responses:
            rid = r.json()["request_id"]
            sent = r.json()["predictions"]
            # The record keeps the answer as packed arrays, the experts' own among them.
            n, blob = stored[rid]
            kept = unpack(blob, "classification", n, len(names), 2)
            want = [sent[0]["weights"][e] for e in names]
            assert kept.weights[0] == pytest.approx(want, abs=1e-7)
            back = app.get("/weights", params={"request_id": rid}).json()
            assert_close(back["predictions"], sent)
            assert back["version"] == r.json()["version"]
        made = totals(app, commits)[commits] - before
        assert 0 < made < N, "concurrent records share group commits"
    # What /weights aggregates, summed from the records, equals the answers' weights.
    blobs = [blob for _, blob in stored.values()]
    sums, tops = weight_sums(blobs, [1] * len(blobs), len(names))
    assert (tops.sum(axis=1) == 1).all()
    for j, expert in enumerate(names):
        assert sums[:, j].sum() == pytest.approx(
            sum(r.json()["predictions"][0]["weights"][expert] for r in responses), abs=1e-6
        )


@pytest.mark.parametrize("mode", ["full", "hash", "off"])
def test_payload_modes(mode: str, trail: Trail, serve: Callable[..., Any]) -> None:
    instances = [{"x2": -0.5, "x1": 1.25}, {"x1": None, "x2": 3}]
    with serve("asgi", trail, audit_payload=mode) as app:
        r = app.post("/predict", json={"instances": instances[:1]}, headers={"X-Request-ID": "p-1"})
        assert r.status_code == 200
        stored = app.get("/weights", params={"request_id": "p-1"}).json()["input"]
    canonical = json.dumps(instances[:1], sort_keys=True, separators=(",", ":")).encode()
    digest = hmac.new(app.service.hash_key, canonical, hashlib.sha256).hexdigest()
    ((raw_json, raw_hash),) = trail.rows("select input_json, input_hash from iabma_audit_log")
    if mode == "full":
        assert stored == {"mode": "full", "hmac_sha256": digest, "instances": instances[:1]}
        assert json.loads(raw_json) == instances[:1] and bytes(raw_hash).hex() == digest
    elif mode == "hash":
        assert stored == {"mode": "hash", "hmac_sha256": digest}
        assert raw_json is None and bytes(raw_hash).hex() == digest
    else:
        assert stored == {"mode": "off"}
        assert raw_json is None and raw_hash is None


# A large request (past app.core.service.INLINE_ROWS) waits for the writer to take its record
# before encoding; that wait must end on a failure too.
@pytest.mark.parametrize("rows", [1, 200])
def test_store_failure_is_a_503_and_records_nothing(
    rows: int, trail: Trail, serve: Callable[..., Any]
) -> None:
    with serve("uvicorn", trail) as app:
        ok = app.post("/predict", json={"instances": [{"x1": 0.1, "x2": 0.2}]})
        assert ok.status_code == 200
        # The database now refuses every insert: the group's transaction must roll back.
        failed_before = totals(app, "iabma_audit_failures_total")["iabma_audit_failures_total"]
        trail.refuse_inserts()
        r = app.post("/predict", json={"instances": [{"x1": 0.3, "x2": 0.4}] * rows})
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "audit_unavailable"
        assert "nothing was recorded" in r.json()["error"]["message"]
        assert trail.count() == 1
        assert app.get("/livez").status_code == 200
        failures = totals(app, "iabma_audit_failures_total")["iabma_audit_failures_total"]
        assert failures - failed_before == 1


def test_a_hung_trail_answers_503_within_its_timeout(
    pg_url: str, serve: Callable[..., Any]
) -> None:
    """A table lock holds the writer inside a commit: the single-row request that is in
    it, and the large one queued behind it (whose writer never takes its record), both get
    a 503 after ``IABMA_AUDIT_TIMEOUT_SECONDS``, not a hang."""
    trail = Trail(pg_url, None)
    with serve("uvicorn", trail, audit_timeout_seconds=1.0) as app:
        assert app.post("/predict", json={"instances": [{"x1": 0.1, "x2": 0.2}]}).status_code == 200
        with psycopg.connect(PG_DSN) as lock:
            lock.execute(f'set search_path to "{schema_of(trail.url)}"')
            lock.execute("lock table iabma_audit_log in access exclusive mode")
            answers = []
            for rows in (1, 200):
                t0 = time.monotonic()
                r = app.post("/predict", json={"instances": [{"x1": 0.3, "x2": 0.4}] * rows})
                answers.append((r.status_code, r.json()["error"]["message"], time.monotonic() - t0))
            lock.rollback()
        for status, message, seconds in answers:
            assert status == 503
            assert "did not commit within 1 s" in message
            assert 0.9 < seconds < 3.0
        assert app.get("/readyz").status_code == 200


def test_sqlite_default_creates_var_in_the_working_directory(
    bundles: Bundles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = make_settings(bundles.store, tmp_path, "demo", audit_url="sqlite:///./var/audit.db")
    with AsgiHarness(settings) as app:
        assert app.post("/predict", json={"instances": [{"x1": 1, "x2": 2}]}).status_code == 200
    assert (tmp_path / "var" / "audit.db").is_file()
    with sqlite3.connect(tmp_path / "var" / "audit.db") as conn:
        assert conn.execute("pragma journal_mode").fetchone()[0] == "wal"
        assert conn.execute("select count(*) from iabma_audit_log").fetchone()[0] == 1


def test_a_disabled_trail_writes_nothing_and_says_so(
    bundles: Bundles, tmp_path: Path, serve: Callable[..., Any]
) -> None:
    file = tmp_path / "never" / "audit.db"
    trail = Trail(f"sqlite:///{file}", file)
    with serve("asgi", trail, audit_enabled=False) as app:
        r = app.post("/predict", json={"instances": [{"x1": 0.2, "x2": 0.1}]})
        assert r.status_code == 200
        back = app.get("/weights", params={"request_id": r.json()["request_id"]})
        assert back.status_code == 404
        assert back.json()["error"]["code"] == "audit_disabled"
        assert "IABMA_AUDIT_ENABLED=false" in back.json()["error"]["message"]
    assert not file.exists()


def test_one_client_never_waits_for_a_group_commit(
    trail: Trail, serve: Callable[..., Any], bundles: Bundles
) -> None:
    """The longest group wait costs one client nothing: a group waits only for requests
    being served that have yet to queue a record, and a refused request stops counting."""
    rows = bundles.demo.instances(slice(0, 20))
    with serve("asgi", trail, audit_group_wait_ms=100) as app:
        assert app.post("/predict", json={"instances": [rows[0]]}).status_code == 200
        # Its output is NaN for this row: a 422 from inside the data plane, no record.
        bad = app.post("/predict", json={"instances": [{"x1": None, "x2": 0.25}]})
        assert bad.status_code == 422
        t0 = time.monotonic()
        for row in rows[1:11]:
            assert app.post("/predict", json={"instances": [row]}).status_code == 200
        # Ten commits that each waited would take a second.
        assert time.monotonic() - t0 < 0.5
        responses = app.run(_burst(app.base_url, rows, httpx.ASGITransport(app=app.app)))
        assert [r.status_code for r in responses] == [200] * len(rows)
        assert (app.service.in_flight, app.service.unrecorded) == (0, 0)
    assert trail.count() == 11 + len(rows)
