"""The audit trail, against SQLite and against the real PostgreSQL on this machine."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest
from app_harness import AsgiHarness, UvicornHarness, harness
from app_support import Bundles, make_settings
from metrics_support import totals
from support import PG_DSN, schema_of

from app.audit.records import AuditRecord, now_us
from app.audit.store import ROWS_PER_STATEMENT, AuditStore
from app.audit.tables import SqliteInUse
from app.audit.writer import AuditWriter
from app.metrics import ServiceMetrics

N = 60


class Trail:
    """Raw SQL access to a trail, independent of the app's own queries."""

    def __init__(self, url: str, sqlite_file: Path | None) -> None:
        self.url = url
        self.sqlite_file = sqlite_file

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if self.sqlite_file is not None:
            with sqlite3.connect(self.sqlite_file) as conn:
                return conn.execute(sql).fetchall()
        with psycopg.connect(PG_DSN) as conn:
            conn.execute(f'set search_path to "{schema_of(self.url)}"')
            return conn.execute(sql).fetchall()

    def execute(self, sql: str) -> None:
        if self.sqlite_file is not None:
            with sqlite3.connect(self.sqlite_file) as conn:
                conn.execute(sql)
            return
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'set search_path to "{schema_of(self.url)}"')
            conn.execute(sql)

    def refuse_inserts(self) -> None:
        """A trigger that aborts every insert into the log, as a full or failing disk would."""
        if self.sqlite_file is not None:
            self.execute(
                "create trigger refuse before insert on iabma_audit_log "
                "begin select raise(abort, 'refused by the test'); end"
            )
            return
        self.execute(
            "create function refuse() returns trigger language plpgsql as "
            "$$ begin raise exception 'refused by the test'; end $$"
        )
        self.execute(
            "create trigger refuse before insert on iabma_audit_log "
            "for each row execute function refuse()"
        )

    def count(self) -> int:
        return int(self.rows("select count(*) from iabma_audit_log")[0][0])


@pytest.fixture(params=["sqlite", "postgres"])
def trail(request: pytest.FixtureRequest, tmp_path: Path) -> Trail:
    if request.param == "sqlite":
        file = tmp_path / "trail" / "audit.db"
        return Trail(f"sqlite:///{file}", file)
    return Trail(request.getfixturevalue("pg_url"), None)


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
        stored = dict(trail.rows("select request_id, weights from iabma_audit_log"))
        for r in responses:
            rid = r.json()["request_id"]
            sent = r.json()["predictions"]
            # The record keeps the answer as arrays, without the experts' own outputs.
            w = np.frombuffer(stored[rid], "<f8").reshape(1, -1)[0]
            assert w.tolist() == list(sent[0]["weights"].values())
            back = app.get("/weights", params={"request_id": rid}).json()
            assert back["predictions"] == [
                {k: item[k] for k in ("prediction", "weights", "uncertainty")} for item in sent
            ]
            assert back["version"] == r.json()["version"]
        made = totals(app, commits)[commits] - before
        assert 0 < made < N, "concurrent records share group commits"
    # Each record's per-expert sums (what /weights aggregates) equal its answer's weights.
    sums = trail.rows("select experts, weight_sums, top_counts, n_instances from iabma_audit_log")
    summed = np.zeros(len(json.loads(sums[0][0])))
    for _experts, blob, tops, n in sums:
        assert int(n) == 1 and np.frombuffer(tops, "<i8").sum() == 1
        summed += np.frombuffer(blob, "<f8")
    for j, expert in enumerate(json.loads(sums[0][0])):
        assert summed[j] == pytest.approx(
            sum(r.json()["predictions"][0]["weights"][expert] for r in responses)
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
        assert json.loads(raw_json) == instances[:1] and raw_hash == digest
    elif mode == "hash":
        assert stored == {"mode": "hash", "hmac_sha256": digest}
        assert raw_json is None and raw_hash == digest
    else:
        assert stored == {"mode": "off"}
        assert raw_json is None and raw_hash is None


# A large request (past app.service.INLINE_ROWS) waits for the writer to take its record
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


def test_a_large_record_is_taken_before_it_is_committed(trail: Trail) -> None:
    async def main() -> list[str]:
        store, writer = _open_writer(trail)
        order: list[str] = []
        committed, taken = writer.submit_large(_record("large"))
        taken.add_done_callback(lambda _: order.append("taken"))
        committed.add_done_callback(lambda _: order.append("committed"))
        await committed
        # A record whose row cannot be built fails its commit, and is still let go.
        broken = dataclasses.replace(_record("broken"), instances=[{"x": {1, 2}}])  # a set
        failed, released = writer.submit_large(broken)
        with pytest.raises(Exception, match="audit store is unavailable"):
            await failed
        assert released.done() and released.exception() is None
        await writer.close()
        store.close()
        return order

    assert asyncio.run(main()) == ["taken", "committed"]
    assert trail.count() == 1


def _open_writer(trail: Trail) -> tuple[AuditStore, AuditWriter]:
    """A store and its started writer (groups of at most 4); call inside the event loop."""
    store = AuditStore(trail.url, 10.0)
    store.prepare()
    writer = AuditWriter(store, ServiceMetrics(), lambda: ("demo", "v1"), 4, 10.0)
    writer.start()
    return store, writer


def _record(rid: str) -> AuditRecord:
    return AuditRecord(
        request_id=rid,
        created_us=now_us(),
        model="demo",
        version="v1",
        route="predict",
        task="classification",
        experts=("a", "b"),
        classes=(0, 1),
        weights=np.array([[0.25, 0.75]]),
        prediction=np.array([[0.4, 0.6]]),
        uncertainty=np.array([[0.67, 0.6, 0.07, 0.81]]),
        latency_ms=1.0,
        input_mode="hash",
        instances=[{"x": 1}],
        hash_key=b"k" * 32,
    )


def test_closing_the_writer_flushes_the_queue(trail: Trail) -> None:
    async def main() -> list[Any]:
        store, writer = _open_writer(trail)
        waiting = [writer.submit(_record(f"q-{k}")) for k in range(25)]
        await asyncio.sleep(0)  # every record is queued, none committed yet
        assert 0 < writer.depth <= 25  # the writer thread may already be committing some
        await writer.close()
        results = await asyncio.gather(*waiting, return_exceptions=True)
        store.close()
        return results

    assert asyncio.run(main()) == [None] * 25
    assert trail.count() == 25


def test_a_group_is_one_transaction_even_over_several_statements(trail: Trail) -> None:
    """The writer's connection runs in autocommit; a group larger than one INSERT must
    still be all or nothing. Half a group in the trail would be records of requests that
    were answered 503."""
    store = AuditStore(trail.url, 10.0)
    store.prepare()
    try:
        n = ROWS_PER_STATEMENT + 5
        store.insert([_record(f"ok-{k}") for k in range(n)])
        assert trail.count() == n
        # The last record fails its NOT NULL column, in the group's second statement.
        bad = [_record(f"bad-{k}") for k in range(n)]
        bad[-1] = dataclasses.replace(bad[-1], request_id=None)  # type: ignore[arg-type]
        with pytest.raises(Exception, match="(?i)null"):
            store.insert(bad)
        assert trail.count() == n
        # The writer reconnects after a failure, and the next group lands.
        store.insert([_record("after")])
        assert trail.count() == n + 1
    finally:
        store.close()


def test_tables_are_created_once_by_racing_writers(pg_url: str) -> None:
    """Replicas sharing PostgreSQL start together; each creates what is missing."""
    trail = Trail(pg_url, None)
    stores = [AuditStore(trail.url, 10.0) for _ in range(4)]

    async def main() -> None:
        await asyncio.gather(*[asyncio.to_thread(s.prepare) for s in stores])

    asyncio.run(main())
    for s in stores:
        s.insert([_record("race")])
        s.close()
    assert trail.count() == 4


def test_a_sqlite_trail_serves_one_process(tmp_path: Path) -> None:
    """A second writer on the same SQLite file (another worker, or a second container on
    the volume) is refused at start-up instead of fighting over the file lock."""
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    first = AuditStore(url, 10.0)
    first.prepare()
    try:
        with pytest.raises(SqliteInUse, match="already used by process .* serves one process"):
            AuditStore(url, 10.0).prepare()
    finally:
        first.close()
    second = AuditStore(url, 10.0)
    second.prepare()  # free again once the first one has closed
    second.close()


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
