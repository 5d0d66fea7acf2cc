"""``iabma_shadow``: per answered request while a version was staged, the staged answer.

One row per request: the request id and time of its record, the served and the staged
version, and the staged weights and mixture as one packed float64 blob
(:meth:`app.bundle.staged_gate.Shadowed.blob`). Rows are written in groups, apart from
the records' commits, and read back joined to ``iabma_outcomes`` by model, request id
and row (:mod:`app.audit.shadow_scores`). The table is created on first use, so a trail
that never staged a version never has it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
    insert,
    inspect,
)
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

_ID = BigInteger().with_variant(Integer, "sqlite")
metadata = MetaData()

shadow = Table(
    "iabma_shadow",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("model", String(128), nullable=False),
    Column("request_id", String(128), nullable=False),  # as iabma_outcomes holds it
    Column("created_us", BigInteger, nullable=False),  # when the request was answered
    Column("served", String(128), nullable=False),  # the served version
    Column("staged", String(128), nullable=False),  # the staged version
    Column("n", Integer, nullable=False),
    Column("m", Integer, nullable=False),  # the staged version's experts
    Column("answer", LargeBinary, nullable=False),
    Index("ix_iabma_shadow_request", "model", "request_id"),
    Index("ix_iabma_shadow_time", "model", "created_us"),
)
COLUMNS = ("model", "request_id", "created_us", "served", "staged", "n", "m", "answer")


@dataclass(frozen=True)
class ShadowRow:
    model: str
    request_id: str
    created_us: int
    served: str
    staged: str
    n: int
    m: int
    answer: bytes


def ensure(engine: Engine) -> None:
    """Create the table if missing; tolerate another worker creating it meanwhile."""
    try:
        metadata.create_all(engine)
    except (IntegrityError, OperationalError, ProgrammingError):
        if not inspect(engine).has_table(shadow.name):
            raise


def exists(engine: Engine) -> bool:
    return bool(inspect(engine).has_table(shadow.name))


def write(engine: Engine, rows: Sequence[ShadowRow]) -> None:
    """One transaction for the group."""
    if not rows:
        return
    values: list[dict[str, Any]] = [{c: getattr(r, c) for c in COLUMNS} for r in rows]
    with engine.begin() as conn:
        conn.execute(insert(shadow), values)
