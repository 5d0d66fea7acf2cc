"""``iabma_shadow``: per answered request while a version was staged, the staged answer.

One row per group of requests the shadow thread scored together: their request ids and
row counts, the served and the staged version, and the staged weights and mixture of
every row as one packed float64 blob (:meth:`app.bundle.staged_gate.Shadowed.blob`).
Groups are written apart from the records' commits, and read back paired with
``iabma_outcomes`` by model, request id and row (:mod:`app.audit.read.shadow_scores`). The
table is created on first use, so a trail that never staged a version never has it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import (
    BigInteger,
    Column,
    Engine,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    insert,
    inspect,
    select,
)
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

_ID = BigInteger().with_variant(Integer, "sqlite")
metadata = MetaData()

shadow = Table(
    "iabma_shadow",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("model", String(128), nullable=False),
    Column("first_us", BigInteger, nullable=False),  # when its first request was answered
    Column("last_us", BigInteger, nullable=False),  # and its last
    Column("served", String(128), nullable=False),  # the served version
    Column("staged", String(128), nullable=False),  # the staged version
    Column("m", Integer, nullable=False),  # the staged version's experts
    Column("request_ids", Text, nullable=False),  # one per line (ids hold no line break)
    Column("rows", LargeBinary, nullable=False),  # int32 per request: its rows
    Column("answer", LargeBinary, nullable=False),  # every request's rows, in order
    Index("ix_iabma_shadow_time", "model", "staged", "last_us"),
)
COLUMNS = ("model", "first_us", "last_us", "served", "staged", "m", "request_ids", "rows", "answer")


@dataclass(frozen=True)
class ShadowGroup:
    """The requests one group shadowed: ``answer`` their rows' packed float64 blobs,
    request after request, ``rows`` their row counts."""

    model: str
    served: str
    staged: str
    m: int
    request_ids: list[str]
    created_us: list[int]
    rows: list[int]
    answer: bytes

    def values(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "first_us": min(self.created_us),
            "last_us": max(self.created_us),
            "served": self.served,
            "staged": self.staged,
            "m": self.m,
            "request_ids": "\n".join(self.request_ids),
            "rows": np.asarray(self.rows, "<i4").tobytes(),
            "answer": self.answer,
        }


def ensure(engine: Engine) -> None:
    """Create the table if missing; tolerate another worker creating it meanwhile.

    On PostgreSQL the blobs are stored uncompressed: float64 arrays barely compress, and
    pglz spent about a millisecond of the database's CPU per 1000-row request trying."""
    try:
        metadata.create_all(engine)
    except (IntegrityError, OperationalError, ProgrammingError):
        if not inspect(engine).has_table(shadow.name):
            raise
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.exec_driver_sql(
                f"ALTER TABLE {shadow.name} ALTER COLUMN answer SET STORAGE EXTERNAL"
            )


def exists(engine: Engine) -> bool:
    return bool(inspect(engine).has_table(shadow.name))


def write(engine: Engine, group: ShadowGroup) -> None:
    """The group as one row: a single insert however many requests it holds (one row per
    request cost 90 us of the server's Python each on PostgreSQL)."""
    with engine.begin() as conn:
        conn.execute(insert(shadow), [group.values()])


@dataclass(frozen=True)
class Shadowed:
    """One shadowed request as read back: ``answer`` its rows, (n, width) float64."""

    served: str
    m: int
    answer: np.ndarray


def read(
    engine: Engine, model: str, staged: str, window: tuple[int | None, int | None]
) -> dict[str, Shadowed]:
    """Every request of ``model`` that ``staged`` shadowed in ``window`` (microseconds,
    since inclusive, until exclusive; a group is read if it overlaps), by request id:
    the first, for an id shadowed twice (a retried request)."""
    if not exists(engine):
        return {}
    c = shadow.c
    query = select(c.served, c.m, c.request_ids, c.rows, c.answer).where(
        c.model == model, c.staged == staged
    )
    since, until = window
    if since is not None:
        query = query.where(c.last_us >= since)
    if until is not None:
        query = query.where(c.first_us < until)
    out: dict[str, Shadowed] = {}
    with engine.connect() as conn:
        groups: list[Any] = list(conn.execute(query.order_by(c.id)).all())
    for served, m, ids, rows, answer in groups:
        counts = np.frombuffer(bytes(rows), "<i4")
        values = np.frombuffer(bytes(answer), "<f8")
        total = int(counts.sum())
        if total == 0 or values.size % total:
            continue  # a group that does not read as written: left out
        table = values.reshape(total, -1)
        at = 0
        for rid, n in zip(str(ids).split("\n"), counts.tolist(), strict=True):
            out.setdefault(rid, Shadowed(str(served), int(m), table[at : at + n]))
            at += n
    return out
