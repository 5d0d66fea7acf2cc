"""The writer's own connection under what production does to it: a database that closed
it while idle, a SQLite file deleted under the server, and lock waits after a stall."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from app.audit.store.packing import unpack_request_id
from app.audit.write import connection
from app.audit.write.trail_db import AuditStore
from app.audit.write.writer import AuditWriter
from app.metrics import ServiceMetrics
from tests.support.trail import Trail, make_record


def test_a_connection_the_database_closed_while_idle_is_replaced_unseen(pg_url: str) -> None:
    # The server ends this session after 300 ms idle, as a restart, a failover or a proxy's
    # idle timeout would; the next group must not be the one to find out.
    url = pg_url + "%20-cidle_session_timeout%3D300"
    store = AuditStore(url, 10.0)
    store.prepare()
    store.insert([make_record("before")])
    time.sleep(connection.IDLE_PING_S + 0.2)
    store.insert([make_record("after")])  # raised AdminShutdown before: a 503
    store.close()
    trail = Trail(pg_url, None)
    assert sorted(trail.request_ids()) == [
        "after",
        "before",
    ]


def test_a_connection_lost_in_a_commit_fails_its_group_quietly_and_is_replaced(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A restart or failover ends the session while the writer uses it: that group fails
    # (its requests get a 503, logged by the writer), and closing the dead connection adds
    # no traceback of its own (SQLAlchemy's pool logged one, outside the JSON log lines).
    store = AuditStore(pg_url, 10.0)
    store.prepare()
    store.insert([make_record("before")])
    trail = Trail(pg_url, None)
    pid = store._writer._conn.dbapi_connection.info.backend_pid
    trail.execute(f"SELECT pg_terminate_backend({pid})")
    with caplog.at_level(logging.WARNING), pytest.raises(Exception, match="terminat|closed|lost"):
        store.insert([make_record("lost")])
    store.insert([make_record("after")])
    store.close()
    assert [r.getMessage() for r in caplog.records] == []
    assert sorted(trail.request_ids()) == ["after", "before"]


def test_a_deleted_sqlite_trail_is_refused_not_written_to(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "audit.db"

    async def main() -> list[BaseException | None]:
        store = AuditStore(f"sqlite:///{db}", 10.0)
        store.prepare()
        writer = AuditWriter(store, ServiceMetrics(), lambda: ("demo", "v1"), 4, 10.0)
        writer.start()
        await writer.submit(make_record("kept"))
        for f in tmp_path.glob("audit.db*"):
            if not f.name.endswith(".lock"):
                f.unlink()
        outcomes: list[BaseException | None] = []
        for k in range(5):  # SQLite would have written these to the unlinked file
            lost = writer.submit(make_record(f"lost-{k}"))
            outcomes += await asyncio.gather(lost, return_exceptions=True)
        await writer.close()
        store.close()
        return outcomes

    with caplog.at_level(logging.ERROR, logger="iabma.audit"):
        outcomes = asyncio.run(main())
    assert all(
        "audit store is unavailable (TrailGone: the SQLite trail" in str(e) for e in outcomes
    ), outcomes
    assert not db.exists(), "no empty trail is made in its place"
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info, "one line with its traceback, not five"
    assert "was deleted or replaced while the server ran" in failures[0].getMessage()


def test_a_group_with_time_left_gets_its_whole_lock_wait_back(tmp_path: Path) -> None:
    """After a stall shortened SQLite's lock wait for one group, a later group with more
    time left waits that long for a lock, instead of failing at the old shortened wait."""
    db = tmp_path / "audit.db"
    store = AuditStore(f"sqlite:///{db}", 5.0)
    store.prepare()
    store.insert_rows([make_record("fresh").log_values()])
    store.insert_rows([make_record("hurried").log_values()], time.monotonic() + 0.3)
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("begin immediate")  # another writer holds the lock for 0.8 s
    release = threading.Timer(0.8, lambda: holder.execute("commit"))
    release.start()
    try:
        store.insert_rows([make_record("patient").log_values()], time.monotonic() + 4.0)
    finally:
        release.join()
        holder.close()
    rows = sqlite3.connect(db).execute("select request_id from iabma_audit_log").fetchall()
    assert sorted(unpack_request_id(r[0]) for r in rows) == ["fresh", "hurried", "patient"]
    store.close()
