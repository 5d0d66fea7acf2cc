"""Opening the trail's database: the engine for SQLite or PostgreSQL (SQLite's pragmas by
who writes through it), and the lock that keeps a SQLite trail to one process.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url


def _sqlite_pragmas(synchronous: str) -> Any:
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        # WAL lets /weights read while a commit is in flight.
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={synchronous}")
        cur.close()

    return on_connect


def make_engine(url: str, timeout_seconds: float, mover: bool = False) -> Engine:
    """The trail's engine. On SQLite each commit reaches the disk before it returns
    (``synchronous=FULL``: a group commit is durable before its answers go out), except
    with ``mover``, for retention's and the archive's deletes (``NORMAL``): their fsyncs
    would queue the server's. A crash then loses at most the last batches, whose records
    come back and go the next time; the WAL keeps commits in order, so never deletes
    without the cut written before them."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        assert u.database is not None  # Settings refuses in-memory trails
        Path(u.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            u, connect_args={"check_same_thread": False, "timeout": timeout_seconds}
        )
        event.listen(engine, "connect", _sqlite_pragmas("NORMAL" if mover else "FULL"))
        return engine
    args: dict[str, Any] = {}
    if "connect_timeout" not in u.query:
        args["connect_timeout"] = max(1, round(timeout_seconds))
    return create_engine(u, pool_pre_ping=True, connect_args=args)


class SqliteInUse(Exception):
    """Another process holds this SQLite trail."""


def lock_sqlite(url: str) -> IO[str] | None:
    """Hold ``<file>.lock`` for this process's life: SQLite serves one process.

    Two uvicorn workers (or two containers on one volume) would fight over the file lock
    on every commit, with tail latencies near a second; the second one refuses to start.
    """
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database:
        return None
    path = Path(u.database).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(f"{path}.lock", "a+", encoding="utf-8")  # noqa: SIM115 - held until close
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "another process"
        handle.close()
        raise SqliteInUse(
            f"the SQLite audit trail {path} is already used by {owner}. SQLite serves one "
            "process: run one worker, or give several workers or replicas one PostgreSQL "
            "trail (IABMA_AUDIT_URL=postgresql+psycopg://...)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"process {os.getpid()}\n")
    handle.flush()
    return handle
