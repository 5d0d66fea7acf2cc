"""The audit trail's tables (SQLAlchemy Core) and the engine for SQLite or PostgreSQL.

``iabma_audit_log`` holds one row per answered request, the answer as compact arrays; two
small tables beside it hold the sums of :mod:`app.audit.rollup`, and ``iabma_outcomes``
the outcomes posted for its rows, scored (:mod:`app.audit.outcomes`).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO, Any

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    Engine,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
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
    "iabma_audit_log",
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
    Column("experts", Text, nullable=False),  # JSON list of names
    Column("classes", Text),  # JSON list of labels (classification)
    Column("weights", LargeBinary, nullable=False),
    Column("prediction", LargeBinary, nullable=False),
    Column("uncertainty", LargeBinary, nullable=False),
    Column("weight_sums", LargeBinary, nullable=False),  # (m,) float64: sum over the rows
    Column("top_counts", LargeBinary, nullable=False),  # (m,) int64: rows where j was on top
    Column("input_mode", String(8), nullable=False),
    Column("input_hash", String(64)),
    Column("input_json", Text),
    # The experts' own predictions (app.audit.records.served_experts); added to trails
    # made before it (upgrade_tables), where older records have none.
    Column("expert_outputs", LargeBinary),
    # The link of app.audit.chain that covers this record: its chain and place in it.
    Column("chain", Integer),
    Column("seq", Integer),
    Index("ix_iabma_audit_log_time", "model", "created_us", "id"),
    Index("ix_iabma_audit_log_top", "model", "top_expert", "created_us"),
    Index("ix_iabma_audit_log_request_id", "request_id"),
)

# Derived from the records, and rebuilt from them when dropped (app.audit.rollup): per
# ten-minute bucket, version, top expert and set of experts, what GET /weights sums.
buckets = Table(
    "iabma_audit_buckets",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("model", String(128), nullable=False),
    Column("bucket_us", BigInteger, nullable=False),
    Column("version", String(128), nullable=False),
    Column("top_expert", String(128), nullable=False),
    Column("experts", Text, nullable=False),
    Column("records", BigInteger, nullable=False),
    Column("instances", BigInteger, nullable=False),
    Column("weight_sums", LargeBinary, nullable=False),
    Column("top_counts", LargeBinary, nullable=False),
    Index("ix_iabma_audit_buckets_time", "model", "bucket_us"),
    # Two readers can never both store a bucket: the second's transaction fails whole.
    UniqueConstraint("model", "bucket_us", "version", "top_expert", "experts"),
)

# One row per outcome posted to POST /feedback: the served row it belongs to, and its
# scores against what was served (app.audit.scores), so that GET /performance reads this
# table alone.
outcomes = Table(
    "iabma_outcomes",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("model", String(128), nullable=False),
    Column("request_id", String(128), nullable=False),
    Column("row_index", Integer, nullable=False),
    Column("record_id", BigInteger, nullable=False),  # iabma_audit_log.id
    Column("record_us", BigInteger, nullable=False),  # the prediction's time
    Column("version", String(128), nullable=False),
    Column("received_us", BigInteger, nullable=False),
    Column("outcome", Text, nullable=False),  # JSON: the class label, or the number
    Column("experts", Text, nullable=False),  # JSON list of names
    Column("weights", LargeBinary, nullable=False),  # (m,) float64: the row's weights
    Column("scores", LargeBinary, nullable=False),  # (1 + m, 3) float64: app.audit.scores
    # One outcome per served row: a second insert of one fails whole (POST /feedback's 409).
    UniqueConstraint("model", "request_id", "row_index"),
    Index("ix_iabma_outcomes_time", "model", "record_us"),
)

# app.audit.chain: one chain per writer connection, one link per group commit, and per
# chain the keyed cut below which links and records were pruned or archived.
chains = Table(
    "iabma_audit_chains",
    metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("started_us", BigInteger, nullable=False),
    Column("owner", String(128), nullable=False),
)
links = Table(
    "iabma_audit_links",
    metadata,
    Column("chain", Integer, primary_key=True, autoincrement=False),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("created_us", BigInteger, nullable=False),
    Column("digests", LargeBinary, nullable=False),
    Column("prev", LargeBinary, nullable=False),
    Column("mac", LargeBinary, nullable=False),
    Index("ix_iabma_audit_links_time", "created_us"),
)
cuts = Table(
    "iabma_audit_cuts",
    metadata,
    Column("chain", Integer, primary_key=True, autoincrement=False),
    Column("through_seq", Integer, nullable=False),
    Column("before_us", BigInteger, nullable=False),
    Column("mac_at", LargeBinary, nullable=False),
    Column("mac", LargeBinary, nullable=False),
)

# One row per serving process: the last probe commit (app.audit.health), a write that
# tells whether the trail can record while no request comes to try it.
probes = Table(
    "iabma_audit_probe",
    metadata,
    Column("owner", String(128), primary_key=True),
    Column("at_us", BigInteger, nullable=False),
)

# Per model: every sealed bucket before through_us is summed in iabma_audit_buckets.
watermarks = Table(
    "iabma_audit_rollup",
    metadata,
    Column("model", String(128), primary_key=True),
    Column("through_us", BigInteger, nullable=False),
)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets /weights read while a commit is in flight; synchronous=FULL makes each
    # group commit durable before the responses go out.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
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
    upgrade_tables(engine)
    analyze_stale(engine)


# Columns added to a table after its first release: (table, column), nullable all.
ADDED_COLUMNS = ((records, "expert_outputs"), (records, "chain"), (records, "seq"))


def upgrade_tables(engine: Engine) -> None:
    """Add the columns a trail made by an older release lacks (a nullable column is a
    change of the catalogue only, on either database); another worker may add the same."""
    tables = {t.name for t, _ in ADDED_COLUMNS}
    found = {t: {c["name"] for c in inspect(engine).get_columns(t)} for t in tables}
    for table, name in ADDED_COLUMNS:
        if name in found[table.name]:
            continue
        kind = table.c[name].type.compile(dialect=engine.dialect)
        exists = " IF NOT EXISTS" if engine.dialect.name == "postgresql" else ""
        try:
            with engine.begin() as conn:
                conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN{exists} {name} {kind}")
        except OperationalError:
            columns = {c["name"] for c in inspect(engine).get_columns(table.name)}
            if name not in columns:
                raise


def analyze_stale(engine: Engine) -> None:
    """PostgreSQL: gather the statistics of tables that changed by a tenth since they were
    last gathered (a trail bulk-loaded or restored before autovacuum came by). Without them
    the planner guesses that a lookup of a thousand request ids matches a quarter of the
    trail, and scans all of it (19 ms instead of 4 for 200,000 records)."""
    if engine.dialect.name != "postgresql":
        return
    names = [t.name for t in metadata.sorted_tables]
    query = (
        "SELECT relname FROM pg_stat_user_tables WHERE schemaname = current_schema() "
        "AND n_mod_since_analyze > GREATEST(1000, n_live_tup / 10) AND relname = ANY(%s)"
    )
    with engine.connect() as conn:
        found = [row[0] for row in conn.exec_driver_sql(query, (names,)).fetchall()]
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for name in found:
            conn.exec_driver_sql(f"ANALYZE {name}")


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
