"""The writer thread's own connection to the trail, and the one statement per group.

Autocommit, out of the pool: ``COPY`` on PostgreSQL, one INSERT on SQLite
(:mod:`app.audit.write.bulk`). It is pinged after :data:`IDLE_PING_S` idle, cancelled when
stalled, and refuses a SQLite file replaced under it (docs/design.md, "Audit trail"). A
row the database refuses fails alone (:mod:`app.audit.write.apart`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

from psycopg import RawCursor
from sqlalchemy import Engine, make_url

from app.audit.store.chain import LINK_COLUMNS, ChainHead, Link
from app.audit.store.records import CREATED_AT, LOG_COLUMNS, now_us
from app.audit.store.tables import chains, links, probes, records
from app.audit.write.apart import Apart, Refused, is_row_fault
from app.audit.write.bulk import BulkInsert, ChainedInsert, LinkedInsert
from app.audit.write.keys import WriterKeys

IDLE_PING_S = 1.0
CANCEL_WAIT_S = 2.0


class TrailGone(Exception):
    """The SQLite trail's file was deleted or replaced while the server ran."""


class WriterConnection:
    """Opened on first use, replaced after any failure; used by one thread only."""

    def __init__(
        self,
        engine: Engine,
        columns: Sequence[str],
        timeout_seconds: float,
        chain_key: bytes | None = None,
        model_ids: bool = True,
    ) -> None:
        """With ``chain_key`` each group also commits its link of :mod:`app.audit.store.chain`.
        With ``model_ids`` each row (its version a key, as records give it) also gets its
        model's id, the second half of its unique key; a migration copies rows without."""
        self.engine = engine
        self.timeout_ms = max(1, round(timeout_seconds * 1000))
        postgres = engine.dialect.name == "postgresql"
        self._key = chain_key
        self._head: ChainHead | None = None
        key_at = None
        if model_ids:
            key_at = (LOG_COLUMNS.index("request_id"), len(columns))
            columns = (*columns, "model_id")
        self._apart = Apart(key_at, ordered=postgres)
        if chain_key is not None:
            columns = (*columns, "chain", "seq")
        self._copy = f"COPY {records.name} ({', '.join(columns)}) FROM STDIN" if postgres else None
        marker = "?" if engine.dialect.paramstyle == "qmark" else "%s"
        self._log = BulkInsert(records.name, columns, marker)
        chained = chain_key is not None and not postgres
        self._chained = ChainedInsert(records.name, links.name, columns) if chained else None
        linked = chain_key is not None and postgres
        self._linked = LinkedInsert(records.name, links.name, columns) if linked else None
        self._link_sql = (
            f"INSERT INTO {links.name} ({', '.join(LINK_COLUMNS)}) VALUES "
            f"({', '.join([marker] * len(LINK_COLUMNS))})"
        )
        database = None if postgres else make_url(str(engine.url)).database
        self._file = os.path.abspath(os.path.expanduser(database)) if database else None
        self._file_id: tuple[int, int] | None = None
        self._conn: Any = None
        self._used = 0.0
        self._busy_ms = self.timeout_ms  # sqlite3.connect(timeout=...) set it so
        self._marker = marker
        self._keys = WriterKeys(marker, model_ids, chain_key)
        self._owner = f"{socket.gethostname()}:{os.getpid()}"[:128]

    def insert(self, rows: Sequence[tuple[Any, ...]], give_up_at: float | None = None) -> Refused:
        """Write ``rows``, each refused row apart (:mod:`app.audit.write.apart`); the refused
        ones by place. :meth:`cancel` stops it. On SQLite, whose wait for a lock no cancel
        reaches, stop waiting at ``give_up_at`` (``time.monotonic()``)."""
        conn = self._ready()
        dbapi = conn.dbapi_connection
        try:
            if self._copy is None:
                self._check_file()
                self._busy_until(dbapi, give_up_at)
            keyed = self._keys.with_ids(dbapi, rows)
            refused = self._apart.write(
                keyed,
                lambda part: self._write(dbapi, part),
                lambda keys: self._keys.taken(dbapi, keys),
            )
        except Exception:
            self.close()  # a broken connection must not serve the next group
            raise
        self._used = time.monotonic()
        return refused

    def _write(self, dbapi: Any, rows: Sequence[Any]) -> None:
        """One attempt at ``rows`` in one transaction, with their link; if a row is
        refused, nothing is written and the chain stays where it was."""
        link: Link | None = None
        if self._head is not None:
            # The link's time is its newest record's: retention prunes by it.
            newest = max(row[CREATED_AT] for row in rows)
            link = self._head.next_link(rows, newest, len(LOG_COLUMNS))
            if self._chained is None:  # SQLite's statement adds them itself
                rows = [(*row, link.chain, link.seq) for row in rows]
        cur = dbapi.cursor()
        try:
            if self._copy is not None:
                self._write_postgres(dbapi, cur, rows, link)
            else:
                if link is not None and self._chained is not None:
                    statements = self._chained.statements(rows, link)
                else:
                    statements = self._log.statements(rows)
                several = len(statements) > 1
                if several:
                    cur.execute("BEGIN")
                try:
                    for sql, params in statements:
                        cur.execute(sql, params)
                except Exception as exc:
                    if several and is_row_fault(exc):
                        cur.execute("ROLLBACK")  # a refused row: the connection goes on
                    raise
                if several:
                    cur.execute("COMMIT")
        finally:
            cur.close()
        if link is not None and self._head is not None:
            self._head.advanced(link)

    def _write_postgres(self, dbapi: Any, cur: Any, rows: Sequence[Any], link: Link | None) -> None:
        """PostgreSQL: ``COPY`` alone is its own transaction; with a link, one statement
        (:class:`LinkedInsert`), or past its rows one transaction with the ``COPY``."""
        one = None if link is None or self._linked is None else self._linked.statement(rows, link)
        if one is not None:
            with RawCursor(dbapi) as raw:  # $n parameters: psycopg parses nothing
                raw.execute(*one)
            return
        if link is None:
            with cur.copy(self._copy) as copy:
                for row in rows:
                    copy.write_row(row)
            return
        with dbapi.transaction():
            with cur.copy(self._copy) as copy:
                for row in rows:
                    copy.write_row(row)
            cur.execute(self._link_sql, link.values())

    def probe(self) -> None:
        """A write of one small row, committed: whether a commit can succeed now (a full
        disk or a lost server fail it as they fail a group)."""
        conn = self._ready()
        m = self._marker
        try:
            cur = conn.cursor()
            try:
                self._check_file()
                params = (now_us(), self._owner)
                cur.execute(f"UPDATE {probes.name} SET at_us = {m} WHERE owner = {m}", params)
                if cur.rowcount == 0:
                    cur.execute(
                        f"INSERT INTO {probes.name} (at_us, owner) VALUES ({m}, {m})", params
                    )
            finally:
                cur.close()
        except Exception:
            self.close()
            raise
        self._used = time.monotonic()

    def close(self) -> None:
        # A commit that failed may still have landed: the next connection starts a new
        # chain rather than risk a link whose place is taken.
        self._head = None
        conn, self._conn = self._conn, None
        if conn is not None:
            # The driver's own connection: closing it drops any open transaction. Detached
            # from the pool, the wrapper's invalidate() would leave it open, and its close()
            # rolls back first, which on a connection the server dropped fails and is logged
            # with a traceback by SQLAlchemy's pool, outside our log lines.
            with contextlib.suppress(Exception):
                conn.dbapi_connection.close()

    def _ready(self) -> Any:
        idle = time.monotonic() - self._used > IDLE_PING_S
        if self._conn is not None and self._copy is not None and idle and not self._alive():
            self.close()
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def _alive(self) -> bool:
        try:
            self._conn.dbapi_connection.execute("SELECT 1")
        except Exception:
            return False
        return True

    def _connect(self) -> Any:
        if self._file is not None and self._file_id is not None:
            self._check_file()  # never let a reconnect create an empty file in its place
        conn = self.engine.raw_connection()
        dbapi: Any = conn.dbapi_connection  # psycopg's or sqlite3's connection
        if self._copy is not None:
            dbapi.autocommit = True
            # A backstop: the writer cancels a commit that outlives its requests' patience.
            dbapi.execute(f"SET statement_timeout = {self.timeout_ms + 1000}")
        else:
            dbapi.isolation_level = None  # sqlite3's autocommit
            if self._chained is not None:
                self._chained.create(dbapi)
            self._busy_ms = self.timeout_ms
            if self._file_id is None and self._file is not None:
                st = os.stat(self._file)
                self._file_id = (st.st_dev, st.st_ino)
        # Detached, so the pool never hands an autocommit connection to a reader.
        conn.detach()
        self._used = time.monotonic()
        if self._key is not None:
            try:
                self._head = self._start_chain(dbapi)
            except Exception:
                conn.close()
                raise
        return conn

    def _start_chain(self, dbapi: Any) -> ChainHead:
        m = self._marker
        cur = dbapi.cursor()
        try:
            cur.execute(
                f"INSERT INTO {chains.name} (started_us, owner) VALUES ({m}, {m}) RETURNING id",
                (now_us(), self._owner),
            )
            chain = int(cur.fetchone()[0])
        finally:
            cur.close()
        assert self._key is not None
        return ChainHead(self._key, chain)

    def cancel(self) -> None:
        """Cancel the statement running on the connection now, from another thread: the
        insert raises, and nothing of it is committed. On PostgreSQL this is a round trip
        on a new connection, waited for at most :data:`CANCEL_WAIT_S` (a partitioned
        server never answers it), so call it off the event loop."""
        conn = self._conn
        if conn is None:
            return
        dbapi: Any = conn.dbapi_connection
        with contextlib.suppress(Exception):
            if self._copy is not None:
                dbapi.cancel_safe(timeout=CANCEL_WAIT_S)
            else:
                dbapi.interrupt()

    def _busy_until(self, dbapi: Any, give_up_at: float | None) -> None:
        """Set SQLite's lock wait to what is left before ``give_up_at`` (the whole wait
        for a fresh group). It changes only after a stall (records wait in the queue for
        milliseconds), and each PRAGMA is a step that gives up the GIL."""
        want = self.timeout_ms
        if give_up_at is not None:
            want = min(want, max(0, round((give_up_at - time.monotonic()) * 1000)))
        if want != self._busy_ms:
            dbapi.execute(f"PRAGMA busy_timeout = {want}")
            self._busy_ms = want

    def _check_file(self) -> None:
        if self._file is None or self._file_id is None:
            return
        try:
            st = os.stat(self._file)
            same = (st.st_dev, st.st_ino) == self._file_id
        except OSError:
            same = False
        if not same:
            raise TrailGone(
                f"the SQLite trail {self._file} was deleted or replaced while the server "
                "ran; nothing more is written to it. Restart the server (after putting "
                "the file back, if the trail is to go on in it)"
            )
