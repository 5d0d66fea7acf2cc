"""Outcomes in the trail: the served rows they belong to, storing them all or none, and
reading their scores back; every function blocks.

``iabma_outcomes`` holds one outcome per served row (a unique key). A batch is written in
one transaction that first reads what is stored for its rows: a repeat of a stored
outcome is a duplicate, a different one a conflict, and a conflict stores nothing. Two
writers racing on one row meet at the unique key; the loser reads again and retries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import IntegrityError

from app.audit.bulk import BulkInsert
from app.audit.codec import pack_request_id
from app.audit.records import served_blobs
from app.audit.scores import Served
from app.audit.tables import outcomes, records
from app.audit.versions import ReaderVersions

# Request ids per SELECT: well under SQLite's 32766 and PostgreSQL's 65535 parameters.
IDS_PER_QUERY = 2000
RETRIES = 5
SERVED = ("id", "request_id", "created_us", "version_id", "n_instances", "answer")
OUTCOME_COLUMNS = (
    "model", "request_id", "row_index", "record_id", "record_us", "version", "received_us",
    "outcome", "experts", "weights", "scores",
)  # fmt: skip


def _by_ids(
    conn: Connection, head: str, ids: Sequence[Any], model: str | None = None
) -> list[tuple[Any, ...]]:
    """``head WHERE [model = ? AND] request_id IN (...)``. Plain SQL: a thousand bound ids
    cost SQLAlchemy's expanding parameters more than the search. PostgreSQL takes the ids
    as one array (psycopg parses every bound parameter of a long statement anew: 14 ms
    for a thousand); SQLite as bound parameters, in chunks."""
    first = (model,) if model is not None else ()
    on_model = "model = {} AND " if model is not None else ""
    if conn.dialect.name == "postgresql":
        where = on_model.format("%s") + "request_id = ANY(%s)"
        return list(conn.exec_driver_sql(f"{head} WHERE {where}", (*first, list(ids))).fetchall())
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(ids), IDS_PER_QUERY):
        chunk = ids[start : start + IDS_PER_QUERY]
        where = on_model.format("?") + f"request_id IN ({', '.join('?' * len(chunk))})"
        rows += conn.exec_driver_sql(f"{head} WHERE {where}", (*first, *chunk)).fetchall()
    return rows


def _insert(conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """PostgreSQL by ``COPY`` in the open transaction, SQLite as one multi-row INSERT."""
    if conn.dialect.name == "postgresql":
        raw: Any = conn.connection.driver_connection
        dbapi: Any = conn.dialect.dbapi
        sql = f"COPY {outcomes.name} ({', '.join(OUTCOME_COLUMNS)}) FROM STDIN"
        try:
            with raw.cursor() as cur, cur.copy(sql) as copy:
                for row in rows:
                    copy.write_row(row)
        except dbapi.IntegrityError as exc:  # the driver's own, unwrapped
            raise IntegrityError(sql, None, exc) from exc
        return
    for sql, params in BulkInsert(outcomes.name, OUTCOME_COLUMNS, "?").statements(rows):
        conn.exec_driver_sql(sql, tuple(params))


def served(
    engine: Engine, versions: ReaderVersions, model: str, request_ids: Sequence[str]
) -> dict[str, Served]:
    """The latest record of each request id (a client may reuse an id) of ``model``.

    The query names the ids alone: with ``model = ?`` beside them, SQLite (without
    statistics) walks the model's whole time index instead of the request id's, 460 ms
    instead of 10 for 1,000 ids in a trail of a million records."""
    head = f"SELECT {', '.join(SERVED)} FROM {records.name}"
    found: dict[str, Served] = {}
    wanted = {pack_request_id(rid): rid for rid in request_ids}
    with engine.connect() as conn:
        rows = _by_ids(conn, head, list(wanted))
    for row in sorted(rows, key=lambda r: (r[2], r[0])):
        v = versions.get(int(row[3]))
        if v.model != model:
            continue
        rec = _Stored(n_instances=int(row[4]), answer=bytes(row[5]))
        weights, prediction, experts = served_blobs(rec, v)
        rid = wanted[bytes(row[1])]
        found[rid] = Served(
            int(row[0]), rid, int(row[2]), v.version, v.task, rec.n_instances, v.experts,
            v.classes, weights, prediction, experts,
        )  # fmt: skip
    return found


@dataclass(frozen=True)
class _Stored:
    n_instances: int
    answer: bytes


@dataclass(frozen=True)
class NewOutcome:
    """One row of ``iabma_outcomes``, scored, before it is stored."""

    request_id: str
    row: int
    outcome: str  # canonical JSON: the repeat of an outcome is the same text
    record: Served
    weights: bytes
    scores: bytes

    def values(self, model: str, received_us: int) -> tuple[Any, ...]:
        """The row, in :data:`OUTCOME_COLUMNS` order."""
        rec = self.record
        return (
            model, self.request_id, self.row, rec.record_id, rec.created_us, rec.version,
            received_us, self.outcome, rec.experts, self.weights, self.scores,
        )  # fmt: skip


class Growth:
    """PostgreSQL plans the lookups of a batch by the outcomes table's statistics, which
    autovacuum refreshes a minute or more after a burst; a table that grew tenfold meanwhile
    is read through its time index instead of its key (a batch of 1,000 then took 25 ms
    more at 150,000 outcomes, and more as it grew). So the writer gathers them itself each
    time this process has added as many rows as half the table held."""

    FLOOR = 5_000

    def __init__(self) -> None:
        self.added = 0
        self.rows: int | None = None

    def inserted(self, conn: Connection, n: int) -> None:
        """After a commit of ``n`` rows, on PostgreSQL."""
        if conn.dialect.name != "postgresql":
            return
        if self.rows is None:
            sql = "SELECT GREATEST(reltuples, 0) FROM pg_class WHERE oid = %s::regclass"
            self.rows = int(conn.exec_driver_sql(sql, (outcomes.name,)).scalar() or 0)
        self.added += n
        if self.added >= max(self.FLOOR, self.rows // 2):
            conn.exec_driver_sql(f"ANALYZE {outcomes.name}")
            conn.commit()
            self.rows += self.added
            self.added = 0


@dataclass
class Stored:
    """What a batch did: its positions stored, or stored before with the same outcome;
    or, when any differs from a stored one, nothing and those positions with it."""

    accepted: list[int] = field(default_factory=list)
    duplicates: list[int] = field(default_factory=list)
    conflicts: list[tuple[int, str]] = field(default_factory=list)  # (position, stored)


def store(
    engine: Engine,
    model: str,
    batch: Sequence[NewOutcome],
    received_us: int,
    growth: Growth | None = None,
) -> Stored:
    """Insert ``batch`` in one transaction unless a row holds a different outcome."""
    for attempt in range(RETRIES):
        try:
            with engine.connect() as conn:
                _begin_write(conn)
                result = _classify(conn, model, batch)
                if not result.conflicts and result.accepted:
                    _insert(conn, [batch[k].values(model, received_us) for k in result.accepted])
                if result.conflicts:
                    conn.rollback()
                else:
                    conn.commit()
                    if growth is not None and result.accepted:
                        growth.inserted(conn, len(result.accepted))
                return result
        except IntegrityError:
            # Another writer stored one of these rows after they were read: read again.
            if attempt == RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def _begin_write(conn: Connection) -> None:
    """SQLite: take the write lock before reading, so that no writer slips in between the
    read and the insert (a deferred transaction would fail to upgrade its lock then)."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _classify(conn: Connection, model: str, batch: Sequence[NewOutcome]) -> Stored:
    ids = list(dict.fromkeys(item.request_id for item in batch))
    head = f"SELECT request_id, row_index, outcome FROM {outcomes.name}"
    found = _by_ids(conn, head, ids, model)
    stored = {(rid, int(row)): outcome for rid, row, outcome in found}
    result = Stored()
    for k, item in enumerate(batch):
        before = stored.get((item.request_id, item.row))
        if before is None:
            result.accepted.append(k)
        elif before == item.outcome:
            result.duplicates.append(k)
        else:
            result.conflicts.append((k, before))
    return result


def window(
    model: str, since_us: int | None, until_us: int | None, version: str | None
) -> list[Any]:
    """The conditions on ``outcomes`` for ``model``'s predictions served in
    ``[since_us, until_us)``, by ``version`` if given."""
    c = outcomes.c
    conditions = [c.model == model]
    if since_us is not None:
        conditions.append(c.record_us >= since_us)
    if until_us is not None:
        conditions.append(c.record_us < until_us)
    if version is not None:
        conditions.append(c.version == version)
    return conditions


def scored(
    engine: Engine,
    model: str,
    since_us: int | None = None,
    until_us: int | None = None,
    version: str | None = None,
) -> list[tuple[int, str, bytes, bytes]]:
    """``(record_us, experts, weights, scores)`` of every outcome of ``model`` whose
    prediction was served in ``[since_us, until_us)`` (by ``version``), oldest first."""
    c = outcomes.c
    conditions = window(model, since_us, until_us, version)
    query = select(c.record_us, c.experts, c.weights, c.scores).where(*conditions)
    with engine.connect() as conn:
        rows = conn.execute(query.order_by(c.record_us)).cursor.fetchall()
    return list(rows)
