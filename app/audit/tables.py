"""The audit trail's two tables (SQLAlchemy Core) and the engine for SQLite or PostgreSQL.

``iabma_audit_records`` holds one row per answered request: who, when, which version, the
per-instance answer as JSON and the input (or its hash). ``iabma_audit_expert_weights``
holds, per record and expert, the sum of that expert's weights, how often it had the
largest weight, and over how many rows, so that ``GET /weights`` can aggregate any time
range in SQL whichever experts each version had.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    Engine,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    inspect,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

# SQLite only auto-increments an INTEGER PRIMARY KEY (its rowid).
_ID = BigInteger().with_variant(Integer, "sqlite")

metadata = MetaData()

records = Table(
    "iabma_audit_records",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("request_id", String(128), nullable=False),
    Column("created_us", BigInteger, nullable=False),  # microseconds since the epoch, UTC
    Column("model", String(128), nullable=False),
    Column("version", String(128), nullable=False),
    Column("route", String(32), nullable=False),
    Column("task", String(16), nullable=False),
    Column("n_instances", Integer, nullable=False),
    Column("top_expert", String(128), nullable=False),
    Column("latency_ms", Double, nullable=False),
    Column("input_mode", String(8), nullable=False),
    Column("input_sha256", String(64)),
    Column("input_json", Text),
    Column("predictions_json", Text, nullable=False),
    Index("ix_iabma_audit_records_time", "model", "created_us", "id"),
    Index("ix_iabma_audit_records_top", "model", "top_expert", "created_us"),
    Index("ix_iabma_audit_records_request_id", "request_id"),
)

expert_weights = Table(
    "iabma_audit_expert_weights",
    metadata,
    Column(
        "record_id",
        _ID,
        ForeignKey(records.c.id, ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("expert", String(128), primary_key=True),
    Column("weight_sum", Double, nullable=False),
    Column("top_count", Integer, nullable=False),
    Column("n", Integer, nullable=False),
)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets /weights read while a commit is in flight and lets two workers share the
    # file; synchronous=FULL makes each group commit durable before the responses go out.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def make_engine(url: str, timeout_seconds: float) -> Engine:
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        assert u.database is not None  # Settings refuses in-memory trails
        Path(u.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            u, connect_args={"check_same_thread": False, "timeout": timeout_seconds}
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    args: dict[str, Any] = {}
    if "connect_timeout" not in u.query:
        args["connect_timeout"] = max(1, round(timeout_seconds))
    return create_engine(u, pool_pre_ping=True, connect_args=args)


def create_tables(engine: Engine) -> None:
    """Create what is missing; tolerate another worker creating it at the same moment."""
    try:
        metadata.create_all(engine)
    except (IntegrityError, OperationalError, ProgrammingError):
        names = set(inspect(engine).get_table_names())
        if not all(t.name in names for t in metadata.sorted_tables):
            raise
