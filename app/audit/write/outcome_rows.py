"""Outcomes in the trail: the served rows they belong to, storing them all or none, and
reading their scores back; every function blocks.

``iabma_outcomes`` holds one outcome per served row (a unique key), with who posted it.
A batch is written in one transaction that first reads what is stored for its rows: a
repeat of a stored outcome is a duplicate, a different one a conflict, and a conflict
stores nothing. The rows go in the order of that unique key, so two batches that share
rows wait for each other instead of deadlocking; the loser of a race (the unique key, or
a deadlock or serialization failure the database chose to end) reads again and retries.
With the chain on, the transaction also adds its link (:mod:`app.audit.write.outcome_chain`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError

from app.audit.read.scores import Served
from app.audit.store.chain import ChainHead
from app.audit.store.packing import pack_request_id
from app.audit.store.records import served_blobs
from app.audit.store.tables import archived, outcomes, records
from app.audit.store.version_rows import ReaderVersions
from app.audit.write.bulk import BulkInsert
from app.audit.write.outcome_chain import OutcomeChains, insert_link, link_for

# Request ids per SELECT: well under SQLite's 32766 and PostgreSQL's 65535 parameters.
IDS_PER_QUERY = 2000
RETRIES = 5
SERVED = ("id", "request_id", "created_us", "version_id", "n_instances", "answer")
OUTCOME_COLUMNS = (
    "model", "request_id", "row_index", "record_id", "record_us", "version", "received_us",
    "outcome", "experts", "weights", "scores", "poster", "chain", "seq",
)  # fmt: skip
# What a database says when it ended one of two transactions waiting for each other
# (PostgreSQL's deadlock_detected, serialization_failure): the other went through.
RETRY_STATES = frozenset({"40P01", "40001"})


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


@dataclass
class Found:
    """The records that request ids name: one each, or several (``ambiguous``: a trail
    written before request ids were unique per model), or none (``archived``, with the
    day of their Parquet files, or neither)."""

    records: dict[str, Served] = field(default_factory=dict)
    ambiguous: dict[str, int] = field(default_factory=dict)
    archived: dict[str, str] = field(default_factory=dict)
    unreadable: set[str] = field(default_factory=set)


def served(
    engine: Engine, versions: ReaderVersions, model: str, request_ids: Sequence[str]
) -> Found:
    """The record of ``model`` that each request id names.

    An outcome belongs to exactly one record. Request ids are unique per model in the
    trail; an older trail may hold an id twice, and then neither record can be told to
    be the one meant: the id is ``ambiguous``, and its outcomes are refused.

    The query names the ids alone: with ``model = ?`` beside them, SQLite (without
    statistics) walks the model's whole time index instead of the request id's, 460 ms
    instead of 10 for 1,000 ids in a trail of a million records."""
    head = f"SELECT {', '.join(SERVED)} FROM {records.name}"
    out = Found()
    wanted = {pack_request_id(rid): rid for rid in request_ids}
    with engine.connect() as conn:
        rows = _by_ids(conn, head, list(wanted))
    mine: dict[str, list[Any]] = {}
    for row in rows:
        rid = wanted[bytes(row[1])]
        try:
            v = versions.get(int(row[3]))
        except (KeyError, ValueError, TypeError):  # its version row gone or bent
            out.unreadable.add(rid)
            continue
        if v.model == model:
            mine.setdefault(rid, []).append((row, v))
    for rid, found in mine.items():
        out.unreadable.discard(rid)
        if len(found) > 1:
            out.ambiguous[rid] = len(found)
            continue
        row, v = found[0]
        try:
            rec = _Stored(n_instances=int(row[4]), answer=bytes(row[5]))
            weights, prediction, experts = served_blobs(rec, v)
        except (ValueError, IndexError, TypeError, KeyError):  # not as the server packs it
            out.unreadable.add(rid)
            continue
        out.records[rid] = Served(
            int(row[0]), rid, int(row[2]), v.version, v.task, rec.n_instances, v.experts,
            v.classes, weights, prediction, experts,
        )  # fmt: skip
    missing = [pack_request_id(r) for r in request_ids if r not in mine and r not in out.unreadable]
    if missing:
        with engine.connect() as conn:
            head = f"SELECT request_id, day FROM {archived.name}"
            for raw, day in _by_ids(conn, head, list(dict.fromkeys(missing))):
                out.archived[wanted[bytes(raw)]] = str(day)
    return out


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

    def values(self, model: str, received_us: int, poster: str | None) -> tuple[Any, ...]:
        """The row's digested values (:data:`app.audit.write.outcome_chain.DIGESTED`), the
        first of :data:`OUTCOME_COLUMNS`."""
        rec = self.record
        return (
            model, self.request_id, self.row, rec.record_id, rec.created_us, rec.version,
            received_us, self.outcome, rec.experts, self.weights, self.scores, poster,
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
    chains: OutcomeChains | None = None,
    poster: str | None = None,
) -> Stored:
    """Insert ``batch`` (posted by ``poster``) in one transaction unless a row holds a
    different outcome; with ``chains``, its link too."""
    for attempt in range(RETRIES):
        try:
            return _store_once(engine, model, batch, received_us, growth, chains, poster)
        except Exception as exc:
            # Another writer stored one of these rows after they were read, or the
            # database ended this transaction to let another through: read again.
            if attempt == RETRIES - 1 or not _retryable(exc):
                raise
    raise AssertionError("unreachable")


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, IntegrityError):
        return True
    for err in (exc, getattr(exc, "orig", None), exc.__cause__):
        if getattr(err, "sqlstate", None) in RETRY_STATES:
            return True
    return False


def _store_once(
    engine: Engine,
    model: str,
    batch: Sequence[NewOutcome],
    received_us: int,
    growth: Growth | None,
    chains: OutcomeChains | None,
    poster: str | None,
) -> Stored:
    with _head(chains, engine) as head, engine.connect() as conn:
        _begin_write(conn)
        result = _classify(conn, model, batch)
        link = None
        if not result.conflicts and result.accepted:
            # In the unique key's order: two batches sharing rows take them in one order.
            picks = sorted(result.accepted, key=lambda k: (batch[k].request_id, batch[k].row))
            rows = [batch[k].values(model, received_us, poster) for k in picks]
            if head is not None:
                link = link_for(head, rows, received_us)
                rows = [(*row, link.chain, link.seq) for row in rows]
            else:
                rows = [(*row, None, None) for row in rows]
            _insert(conn, rows)
            if link is not None:
                insert_link(conn, link)
        if result.conflicts:
            conn.rollback()
        else:
            conn.commit()
            if link is not None and head is not None:
                head.advanced(link)
            if growth is not None and result.accepted:
                growth.inserted(conn, len(result.accepted))
        return result


@contextmanager
def _head(chains: OutcomeChains | None, engine: Engine) -> Iterator[ChainHead | None]:
    if chains is None:
        yield None
        return
    with chains.head(engine) as head:
        yield head


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
