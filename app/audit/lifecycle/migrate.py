"""Upgrading an older trail, keeping every record and its id (outcomes refer to it)
(``iabma audit-migrate``).

Schema 1 (before compact records): the old table is renamed ``iabma_audit_log_v1`` (its
indexes dropped, so that the new table's can take their names), the new tables are made,
and the records are copied in id order, in groups chained like the server's commits.

Schema 2 to 3, first step (a request id names one record of a model; the rest is
:mod:`app.audit.lifecycle.upgrade`): in one transaction, each record gets its model's id, and the
records' unique key (request id, model id) replaces the index on the request id. Where a
request id already named several records of a model, the first keeps the key and the
later ones are kept without it (``model_id`` NULL), counted in the command's report. The
chain's digests do not cover the model id, so they still hold.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine, func, inspect, select

from app.audit.store import packing
from app.audit.store.records import LOG_COLUMNS, served_experts
from app.audit.store.tables import REQUEST_KEY, create_tables, meta, models, records, versions
from app.audit.write.connection import WriterConnection

OLD = "iabma_audit_log_v1"
OLD_INDEXES = ("ix_iabma_audit_log_time", "ix_iabma_audit_log_top", "ix_iabma_audit_log_request_id")
OLD_COLUMNS = (
    "id", "request_id", "created_us", "model", "version", "route", "task", "n_instances",
    "top_expert", "latency_ms", "experts", "classes", "weights", "prediction", "uncertainty",
    "input_mode", "input_hash", "input_json", "expert_outputs",
)  # fmt: skip
GROUP = 5_000


def found_schema(engine: Engine) -> int | None:
    """The trail's schema: 1 by its records' columns, 2 without their model ids, else what
    ``iabma_audit_meta`` says (2 while an upgrade is unfinished); None without a trail."""
    look = inspect(engine)
    if not look.has_table(records.name):
        return None
    columns = {c["name"] for c in look.get_columns(records.name)}
    if "experts" in columns:
        return 1
    if "model_id" not in columns or not look.has_table(meta.name):
        return 2
    with engine.connect() as conn:
        found = conn.execute(select(meta.c.value).where(meta.c.key == "schema")).scalar()
    return 2 if found is None else int(found)


def converted(old: Any) -> tuple[Any, ...]:
    """A schema-1 row as a schema-2 row (:data:`LOG_COLUMNS`), its id after them."""
    (rid, rid_text, created, model, version, route, task, n, top, latency, experts,
     classes, w, p, u, mode, digest, text, outputs) = old  # fmt: skip
    names = json.loads(experts)
    n, m = int(n), len(names)
    k = len(json.loads(classes)) if classes is not None else 0
    width = k if task == "classification" else packing.REGRESSION_FIELDS
    served = served_experts(None if outputs is None else bytes(outputs), task, n, m, k)
    answer = packing.pack(
        task,
        np.frombuffer(bytes(w), "<f8").reshape(n, m),
        np.frombuffer(bytes(p), "<f8").reshape(n, width),
        np.frombuffer(bytes(u), "<f8").reshape(n, 4),
        None if served is None else served.outputs,
        None if served is None or served.std is None else np.append(served.std, served.temperature),
    )
    key = (model, version, route, task, mode, experts, classes)
    return (
        packing.pack_request_id(rid_text), int(created), key, n, names.index(top),
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
    writer = WriterConnection(engine, (*LOG_COLUMNS, "id"), 600.0, chain_key, model_ids=False)
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
    with engine.begin() as conn:
        _key_records(conn)
    return done


def key_by_model(engine: Engine) -> None:
    """Schema 2's records keyed by (request id, model) in one transaction (servers
    stopped); nothing where they are keyed already. :func:`app.audit.lifecycle.upgrade.upgrade`
    calls it first, and says the trail is schema 3 only once every step has run."""
    if "model_id" in {c["name"] for c in inspect(engine).get_columns(records.name)}:
        return
    with engine.begin() as conn:
        models.create(conn, checkfirst=True)
        conn.exec_driver_sql(f"ALTER TABLE {records.name} ADD COLUMN model_id INTEGER")
        conn.exec_driver_sql("DROP INDEX IF EXISTS ix_iabma_audit_log_request_id")
        _key_records(conn)
        next(i for i in records.indexes if i.name == REQUEST_KEY).create(conn)


def _key_records(conn: Connection) -> None:
    """Give each model's first record under each request id its model's id."""
    conn.exec_driver_sql(
        f"INSERT INTO {models.name} (model) SELECT DISTINCT model FROM {versions.name} "
        f"WHERE model NOT IN (SELECT model FROM {models.name})"
    )
    log, v, m = records.name, versions.name, models.name
    conn.exec_driver_sql(
        f"UPDATE {log} SET model_id = (SELECT {m}.id FROM {v} JOIN {m} ON {m}.model = {v}.model "
        f"WHERE {v}.id = {log}.version_id) WHERE model_id IS NULL AND id IN (SELECT MIN(r.id) "
        f"FROM {log} r JOIN {v} ON {v}.id = r.version_id GROUP BY r.request_id, {v}.model)"
    )


def unkeyed(engine: Engine) -> int:
    """Records without a key: each shares its request id with an earlier record of its
    model, from before schema 3."""
    with engine.connect() as conn:
        query = select(func.count()).select_from(records).where(records.c.model_id.is_(None))
        return int(conn.execute(query).scalar_one())
