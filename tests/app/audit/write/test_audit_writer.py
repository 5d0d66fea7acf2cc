"""The audit writer and store on their own: groups, hand-offs, transactions, start-up."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.audit.store.engine import SqliteInUse
from app.audit.write.bulk import ROWS_PER_STATEMENT
from app.audit.write.trail_db import AuditStore
from app.audit.write.writer import AuditWriter
from app.errors import AuditUnavailable, InternalError
from app.metrics import ServiceMetrics
from tests.support.services import PG_DSN, schema_of
from tests.support.trail import Trail, make_record, open_writer


def test_a_large_record_is_taken_before_it_is_committed(trail: Trail) -> None:
    async def main() -> list[str]:
        store, writer = open_writer(trail)
        order: list[str] = []
        committed, taken = writer.submit_large(make_record("large"))
        taken.add_done_callback(lambda _: order.append("taken"))
        committed.add_done_callback(lambda _: order.append("committed"))
        await committed
        # A record whose row cannot be built fails alone (a server fault), and is still
        # let go.
        broken = dataclasses.replace(make_record("broken"), instances=[{"x": {1, 2}}])  # a set
        failed, released = writer.submit_large(broken)
        with pytest.raises(InternalError, match="could not be built; nothing was recorded"):
            await failed
        assert released.done() and released.exception() is None
        await writer.close()
        store.close()
        return order

    assert asyncio.run(main()) == ["taken", "committed"]
    assert trail.count() == 1


def test_closing_the_writer_flushes_the_queue(trail: Trail) -> None:
    async def main() -> list[Any]:
        store, writer = open_writer(trail)
        waiting = [writer.submit(make_record(f"q-{k}")) for k in range(25)]
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
    were answered 503, and a record refused in the second statement must not leave the
    first one's records committed (their retry would find them taken)."""
    store = AuditStore(trail.url, 10.0)
    store.prepare()
    try:
        n = ROWS_PER_STATEMENT + 5
        assert store.insert([make_record(f"ok-{k}") for k in range(n)]) == {}
        assert trail.count() == n
        # The last record fails its NOT NULL column, in the group's second statement:
        # it alone is refused, and every other record lands once.
        bad = [make_record(f"bad-{k}") for k in range(n)]
        bad[-1] = dataclasses.replace(bad[-1], created_us=None)  # type: ignore[arg-type]
        refused = store.insert(bad)
        assert list(refused) == [n - 1] and "null" in str(refused[n - 1]).lower()
        assert trail.count() == 2 * n - 1
        # The database refuses every row (a full disk would): the group fails whole.
        trail.refuse_inserts()
        with pytest.raises(Exception, match="refused by the test"):
            store.insert([make_record(f"none-{k}") for k in range(n)])
        assert trail.count() == 2 * n - 1
        trail.execute("drop trigger refuse" + ("" if trail.sqlite_file else " on iabma_audit_log"))
        # The writer reconnects after a failure, and the next group lands.
        store.insert([make_record("after")])
        assert trail.count() == 2 * n
    finally:
        store.close()


def test_tables_are_created_once_by_racing_writers(pg_url: str) -> None:
    """Replicas sharing PostgreSQL start together; each creates what is missing."""
    trail = Trail(pg_url, None)
    stores = [AuditStore(trail.url, 10.0) for _ in range(4)]

    async def main() -> None:
        await asyncio.gather(*[asyncio.to_thread(s.prepare) for s in stores])

    asyncio.run(main())
    for k, s in enumerate(stores):
        s.insert([make_record(f"race-{k}")])
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


def test_a_group_waits_for_records_of_requests_in_flight(trail: Trail) -> None:
    """With a request still being served, the first record waits for its record, and the
    two commit together, as soon as the second is queued."""
    pending = [1]

    async def main() -> tuple[bool, float]:
        store, writer = open_writer(trail, group_wait=5.0, pending=lambda: pending[0])
        first = writer.submit(make_record("g-1"))
        await asyncio.sleep(0.3)
        waited = not first.done()
        pending[0] = 0
        t0 = time.monotonic()
        second = writer.submit(make_record("g-2"))
        await asyncio.gather(first, second)
        seconds = time.monotonic() - t0
        await writer.close()
        store.close()
        return waited, seconds

    waited, seconds = asyncio.run(main())
    assert waited, "the first record committed while another request had yet to queue one"
    assert seconds < 2.0, "the group kept waiting after every request had queued its record"
    assert trail.count() == 2


@pytest.mark.parametrize("pending", [0, 3])
def test_a_group_wait_is_bounded_and_a_lone_request_never_waits(pending: int, trail: Trail) -> None:
    """Nothing in flight: the record commits at once, whatever the wait. Requests in flight
    that never queue a record (refused, or slow) hold a group for the wait at most."""

    async def main() -> float:
        store, writer = open_writer(trail, group_wait=0.5, pending=lambda: pending)
        await writer.submit(make_record("warm"))  # the writer's connection is open
        t0 = time.monotonic()
        await writer.submit(make_record("lone"))
        seconds = time.monotonic() - t0
        await writer.close()
        store.close()
        return seconds

    seconds = asyncio.run(main())
    if pending:
        assert 0.45 < seconds < 2.0
    else:
        assert seconds < 0.3
    assert trail.count() == 2


def test_a_full_group_commits_without_waiting_for_the_rest(trail: Trail) -> None:
    """Groups hold 4 records here: with requests still in flight for the whole group wait,
    4 records queued commit at once, and the rest in the next group."""

    async def main() -> float:
        store, writer = open_writer(trail, group_wait=30.0, pending=lambda: 1)
        t0 = time.monotonic()
        first = [writer.submit(make_record(f"full-{k}")) for k in range(4)]
        await asyncio.gather(*first)
        seconds = time.monotonic() - t0
        late = writer.submit(make_record("next"))
        await writer.close()
        await late
        store.close()
        return seconds

    assert asyncio.run(main()) < 5.0
    assert trail.count() == 5


def test_closing_the_writer_ends_a_group_wait(trail: Trail) -> None:
    async def main() -> float:
        store, writer = open_writer(trail, group_wait=30.0, pending=lambda: 1)
        waiting, taken = writer.submit_large(make_record("closing"))
        await asyncio.wait_for(taken, 5.0)  # the writer holds it in a group, waiting
        t0 = time.monotonic()
        await writer.close()
        await waiting
        store.close()
        return time.monotonic() - t0

    assert asyncio.run(main()) < 5.0
    assert trail.count() == 1


def test_a_large_record_is_let_go_while_its_group_waits(trail: Trail) -> None:
    """Its row is built before the group waits for more, so its request encodes meanwhile
    instead of waiting for the others' records."""
    pending = [1]

    async def main() -> bool:
        store, writer = open_writer(trail, group_wait=5.0, pending=lambda: pending[0])
        committed, taken = writer.submit_large(make_record("large"))
        await asyncio.wait_for(taken, 2.0)
        waiting = not committed.done()
        pending[0] = 0
        await asyncio.gather(committed, writer.submit(make_record("small")))
        await writer.close()
        store.close()
        return waiting

    assert asyncio.run(main()), "the group committed before the second record came"
    assert trail.count() == 2


@contextlib.contextmanager
def trail_locked(trail: Trail) -> Iterator[None]:
    """Another connection holds the write lock: the writer's next insert waits on it."""
    if trail.sqlite_file is not None:
        conn = sqlite3.connect(trail.sqlite_file, isolation_level=None)
        conn.execute("begin immediate")
        try:
            yield
        finally:
            conn.execute("rollback")
            conn.close()
        return
    with psycopg.connect(PG_DSN) as conn:
        conn.execute(f'set search_path to "{schema_of(trail.url)}"')
        conn.execute("lock table iabma_audit_log in access exclusive mode")
        yield
        conn.rollback()


def test_records_that_waited_past_their_deadline_are_never_written(trail: Trail) -> None:
    """Their requests got a 503; written after the stall, they would stand for answers
    never given, and land in time that GET /weights may have summed already."""

    async def main() -> list[Any]:
        store = AuditStore(trail.url, 10.0)
        store.prepare()
        writer = AuditWriter(store, ServiceMetrics(), lambda: ("demo", "v1"), 4, 0.3)
        writer.start()
        with trail_locked(trail):
            stuck, taken = writer.submit_large(make_record("in-the-hung-insert"))
            await asyncio.wait_for(taken, 5.0)  # its group is formed: the insert waits
            queued = [writer.submit(make_record(f"queued-{k}")) for k in range(3)]
            outcomes = await asyncio.gather(stuck, *queued, return_exceptions=True)
        await writer.close()
        store.close()
        return outcomes

    outcomes = asyncio.run(main())
    # The insert in flight is cancelled half a second past its deadline; all say why.
    assert all("did not commit within 0.3 s" in str(e) for e in outcomes), outcomes
    # Every request got a 503, so nothing may be written: not the queued records, nor the
    # one whose insert hung (it would land once the lock goes).
    assert trail.rows("select request_id from iabma_audit_log") == []


def test_records_are_counted_under_their_own_version(trail: Trail) -> None:
    """At a swap one group holds records of both versions; the metric must not put them
    all under the version served when the commit lands."""

    async def main() -> dict[Any, float]:
        store = AuditStore(trail.url, 10.0)
        store.prepare()
        metrics = ServiceMetrics()
        writer = AuditWriter(store, metrics, lambda: ("demo", "v2"), 8, 10.0)
        writer.start()
        records = [
            dataclasses.replace(make_record(f"r{k}"), version="v1" if k < 3 else "v2")
            for k in range(5)
        ]
        await asyncio.gather(*(writer.submit(r) for r in records))
        await writer.close()
        store.close()
        return dict(metrics.audit_records.pending)

    assert asyncio.run(main()) == {("demo", "v1"): 3, ("demo", "v2"): 2}


def test_a_closed_writer_refuses_records(trail: Trail) -> None:
    async def main() -> None:
        store, writer = open_writer(trail)
        await writer.submit(make_record("before"))
        await writer.close()
        with pytest.raises(AuditUnavailable, match="not running"):
            writer.submit(make_record("after"))
        store.close()

    asyncio.run(main())
    assert trail.count() == 1
