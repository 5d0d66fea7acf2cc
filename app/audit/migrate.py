"""Converting a trail of schema 1 (before compact records) into schema 2, keeping every
record, its id (outcomes refer to it) and the old table (``iabma audit-migrate``).

The old table is renamed ``iabma_audit_log_v1`` (its indexes dropped, so that the new
table's can take their names), the new tables are made, and the records are copied in
id order, in groups chained like the server's commits.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from sqlalchemy import Engine, inspect

from app.audit import codec
from app.audit.connection import WriterConnection
from app.audit.records import LOG_COLUMNS, served_experts
from app.audit.tables import create_tables, records

OLD = "iabma_audit_log_v1"
OLD_INDEXES = ("ix_iabma_audit_log_time", "ix_iabma_audit_log_top", "ix_iabma_audit_log_request_id")
OLD_COLUMNS = (
    "id", "request_id", "created_us", "model", "version", "route", "task", "n_instances",
    "top_expert", "latency_ms", "experts", "classes", "weights", "prediction", "uncertainty",
    "input_mode", "input_hash", "input_json", "expert_outputs",
)  # fmt: skip
GROUP = 5_000


def needs_migration(engine: Engine) -> bool:
    look = inspect(engine)
    if not look.has_table(records.name):
        return False
    return "experts" in {c["name"] for c in look.get_columns(records.name)}


def converted(old: Any) -> tuple[Any, ...]:
    """A schema-1 row as a schema-2 row (:data:`LOG_COLUMNS`), its id after them."""
    (rid, rid_text, created, model, version, route, task, n, top, latency, experts,
     classes, w, p, u, mode, digest, text, outputs) = old  # fmt: skip
    names = json.loads(experts)
    n, m = int(n), len(names)
    k = len(json.loads(classes)) if classes is not None else 0
    width = k if task == "classification" else codec.REGRESSION_FIELDS
    served = served_experts(None if outputs is None else bytes(outputs), task, n, m, k)
    answer = codec.pack(
        task,
        np.frombuffer(bytes(w), "<f8").reshape(n, m),
        np.frombuffer(bytes(p), "<f8").reshape(n, width),
        np.frombuffer(bytes(u), "<f8").reshape(n, 4),
        None if served is None else served.outputs,
        None if served is None or served.std is None else np.append(served.std, served.temperature),
    )
    key = (model, version, route, task, mode, experts, classes)
    return (
        codec.pack_request_id(rid_text), int(created), key, n, names.index(top),
        round(float(latency) * 1000), None if digest is None else bytes.fromhex(digest),
        text, answer, int(rid),
    )  # fmt: skip


def migrate(engine: Engine, chain_key: bytes, progress: Callable[[int], None] | None = None) -> int:
    """Convert the trail; the number of records copied."""
    with engine.begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {records.name} RENAME TO {OLD}")
        for name in OLD_INDEXES:
            conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")
    create_tables(engine)
    writer = WriterConnection(engine, (*LOG_COLUMNS, "id"), 600.0, chain_key)
    done = 0
    try:
        with engine.connect() as conn:
            rows: Iterable[Any] = conn.execution_options(
                stream_results=True, yield_per=GROUP
            ).exec_driver_sql(f"SELECT {', '.join(OLD_COLUMNS)} FROM {OLD} ORDER BY id")
            group: list[tuple[Any, ...]] = []
            for old in rows:
                group.append(converted(old))
                if len(group) == GROUP:
                    writer.insert(group)
                    done += len(group)
                    group = []
                    if progress is not None:
                        progress(done)
            if group:
                writer.insert(group)
                done += len(group)
    finally:
        writer.close()
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.exec_driver_sql(
                f"SELECT setval(pg_get_serial_sequence('{records.name}', 'id'), "
                f"(SELECT COALESCE(MAX(id), 0) + 1 FROM {records.name}), false)"
            )
    return done
