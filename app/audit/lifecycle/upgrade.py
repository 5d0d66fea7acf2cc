"""Bringing a trail of schema 2 to schema 3 in place (``iabma audit-migrate``): records
keyed by request id and model (:func:`app.audit.lifecycle.migrate.key_by_model`), each row of
``iabma_audit_versions`` sealed by its MAC, outcomes kept with their poster and chained,
chains of two kinds, and the tables of the outcome chains.

Every step looks before it acts, so the upgrade may run again after an interruption (and
after :mod:`app.audit.lifecycle.migrate` on a schema-1 trail, whose outcomes table is older still).
What it seals and chains it takes as it finds it: an edit made before the upgrade is
not seen, as with the records a schema-1 migration chains.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, LargeBinary, inspect, select, update

from app.audit.lifecycle.migrate import key_by_model
from app.audit.store.chain import outcome_key, version_mac
from app.audit.store.records import now_us
from app.audit.store.tables import (
    RECORDS,
    SCHEMA_VERSION,
    chains,
    meta,
    metadata,
    outcome_cuts,
    outcome_links,
    outcomes,
    versions,
)
from app.audit.store.version_rows import KEY_COLUMNS
from app.audit.write.outcome_chain import DIGESTED, insert_link, link_for, start_chain

GROUP = 5_000  # outcomes per link of the chain made for those stored before
_INDEXES = {
    "ix_iabma_outcomes_record": ("record_id",),
    "ix_iabma_outcomes_link": ("chain", "seq"),
}


@dataclass
class Upgraded:
    versions: int = 0  # rows sealed
    outcomes: int = 0  # outcomes chained


def schema_of(engine: Engine) -> int | None:
    """The schema ``iabma_audit_meta`` names, or None where there is none."""
    if not inspect(engine).has_table(meta.name):
        return None
    with engine.connect() as conn:
        found = conn.execute(select(meta.c.value).where(meta.c.key == "schema")).scalar()
    return None if found is None else int(found)


def upgrade(engine: Engine, key: bytes, progress: Callable[[int], None] | None = None) -> Upgraded:
    """Bring the trail to schema 3 with the chain key ``key``; what it sealed and chained.
    The schema says 3 only once every step has run."""
    key_by_model(engine)
    _columns(engine)
    metadata.create_all(engine, tables=[outcome_links, outcome_cuts])
    done = Upgraded(versions=_seal_versions(engine, key))
    done.outcomes = _chain_outcomes(engine, key, progress)
    with engine.begin() as conn:
        conn.execute(update(meta).where(meta.c.key == "schema").values(value=str(SCHEMA_VERSION)))
    return done


def _columns(engine: Engine) -> None:
    blob = LargeBinary().compile(dialect=engine.dialect)
    look = inspect(engine)
    wanted = {
        versions.name: [("mac", blob)],
        outcomes.name: [("poster", "VARCHAR(64)"), ("chain", "INTEGER"), ("seq", "INTEGER")],
        chains.name: [("kind", f"VARCHAR(16) NOT NULL DEFAULT '{RECORDS}'")],
    }
    with engine.begin() as conn:
        for table, columns in wanted.items():
            have = {c["name"] for c in look.get_columns(table)}
            for name, kind in columns:
                if name not in have:
                    conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        indexes = {i["name"] for i in look.get_indexes(outcomes.name)}
        for name, on in _INDEXES.items():
            if name not in indexes:
                conn.exec_driver_sql(f"CREATE INDEX {name} ON {outcomes.name} ({', '.join(on)})")


def _seal_versions(engine: Engine, key: bytes) -> int:
    c = versions.c
    with engine.begin() as conn:
        rows = conn.execute(select(c.id, *[c[k] for k in KEY_COLUMNS]).where(c.mac.is_(None))).all()
        for row in rows:
            mac = version_mac(key, int(row[0]), tuple(row[1:]))
            conn.execute(update(versions).where(c.id == row[0]).values(mac=mac))
    return len(rows)


def _chain_outcomes(engine: Engine, key: bytes, progress: Callable[[int], None] | None) -> int:
    """Chain the outcomes in no link, in id order, :data:`GROUP` to a link."""
    o = outcomes.c
    columns = [o[name] for name in DIGESTED]
    who = f"audit-migrate:{socket.gethostname()}"[:128]
    head = None
    done = 0
    while True:
        with engine.begin() as conn:
            rows = list(
                conn.execute(
                    select(o.id, *columns).where(o.chain.is_(None)).order_by(o.id).limit(GROUP)
                ).all()
            )
            if not rows:
                return done
            if head is None:
                head = start_chain(engine, outcome_key(key), who)
            values = [tuple(_plain(v) for v in row[1:]) for row in rows]
            link = link_for(head, values, now_us())
            conn.execute(
                update(outcomes)
                .where(o.id.in_([row[0] for row in rows]))
                .values(chain=link.chain, seq=link.seq)
            )
            insert_link(conn, link)
        head.advanced(link)
        done += len(rows)
        if progress is not None:
            progress(done)


def _plain(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value
