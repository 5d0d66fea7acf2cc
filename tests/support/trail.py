"""Raw access to an audit trail, and records and writers for the writer's own tests."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from app.audit.store.packing import pack_request_id, unpack_request_id
from app.audit.store.records import AuditRecord
from app.audit.write.trail_db import AuditStore
from app.audit.write.writer import AuditWriter
from app.metrics import ServiceMetrics
from tests.support.services import PG_DSN, make_record, schema_of


class Trail:
    """Raw SQL access to a trail, independent of the app's own queries."""

    def __init__(self, url: str, sqlite_file: Path | None) -> None:
        self.url = url
        self.sqlite_file = sqlite_file

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if self.sqlite_file is not None:
            with sqlite3.connect(self.sqlite_file) as conn:
                return conn.execute(sql).fetchall()
        with psycopg.connect(PG_DSN) as conn:
            conn.execute(f'set search_path to "{schema_of(self.url)}"')
            return conn.execute(sql).fetchall()

    def execute(self, sql: str) -> None:
        if self.sqlite_file is not None:
            with sqlite3.connect(self.sqlite_file) as conn:
                conn.execute(sql)
            return
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'set search_path to "{schema_of(self.url)}"')
            conn.execute(sql)

    def refuse_inserts(self) -> None:
        """A trigger that aborts every insert into the log, as a full or failing disk would."""
        if self.sqlite_file is not None:
            self.execute(
                "create trigger refuse before insert on iabma_audit_log "
                "begin select raise(abort, 'refused by the test'); end"
            )
            return
        self.execute(
            "create function refuse() returns trigger language plpgsql as "
            "$$ begin raise exception 'refused by the test'; end $$"
        )
        self.execute(
            "create trigger refuse before insert on iabma_audit_log "
            "for each row execute function refuse()"
        )

    def blob(self, data: bytes) -> str:
        """``data`` as a SQL literal of this database."""
        if self.sqlite_file is not None:
            return f"X'{data.hex()}'"
        return f"'\\x{data.hex()}'::bytea"

    def rid(self, request_id: str) -> str:
        """A request id as the trail stores it, as a SQL literal."""
        return self.blob(pack_request_id(request_id))

    def request_ids(self, where: str = "") -> list[str]:
        rows = self.rows(f"select request_id from iabma_audit_log {where} order by id")
        return [unpack_request_id(bytes(r[0])) for r in rows]

    def count(self) -> int:
        return int(self.rows("select count(*) from iabma_audit_log")[0][0])


def open_writer(
    trail: Trail, group_wait: float = 0.0, pending: Callable[[], int] = lambda: 0
) -> tuple[AuditStore, AuditWriter]:
    """A store and its started writer (groups of at most 4); call inside the event loop."""
    store = AuditStore(trail.url, 10.0)
    store.prepare()
    writer = AuditWriter(
        store, ServiceMetrics(), lambda: ("demo", "v1"), 4, 10.0, group_wait, pending
    )
    writer.start()
    return store, writer


HOUR = 3_600_000_000
NOW = 1_795_000_000_000_000 + 123_456_789  # not on a bucket edge
EXPERTS = ("a", "b", "c")


def spread(rng: np.random.Generator, n: int, hours: float, model: str = "demo") -> list[Any]:
    """``n`` records at random times over the ``hours`` before NOW, from two versions, the
    second with one more expert."""
    out = []
    for i in range(n):
        v2 = i % 3 == 0
        experts = (*EXPERTS, "d") if v2 else EXPERTS
        rows = int(rng.integers(1, 4))
        w = rng.dirichlet(np.ones(len(experts)), size=rows)
        rec: AuditRecord = make_record(f"{model}-{i}")
        out.append(
            dataclasses.replace(
                rec,
                model=model,
                created_us=NOW - int(rng.uniform(0, hours) * HOUR),
                version="v2" if v2 else "v1",
                experts=experts,
                weights=w,
                prediction=np.full((rows, 2), 0.5),
                uncertainty=np.zeros((rows, 4)),
            )
        )
    return out


# What the trail keeps of a served answer: probabilities, weights and entropies as float32,
# so a re-read matches what was served to this.
KEPT_TOL = 1e-6


def assert_kept(got: Any, want: Any, path: str = "answer") -> None:
    """``got`` (read back from the trail) equals ``want`` (as served): every number to
    :data:`KEPT_TOL`, everything else exactly, through dataclasses, mappings and lists."""
    if dataclasses.is_dataclass(want) and not isinstance(want, type):
        assert type(got) is type(want), path
        for f in dataclasses.fields(want):
            assert_kept(getattr(got, f.name), getattr(want, f.name), f"{path}.{f.name}")
    elif isinstance(want, dict):
        assert list(got) == list(want), path
        for k, v in want.items():
            assert_kept(got[k], v, f"{path}[{k!r}]")
    elif isinstance(want, list | tuple):
        assert len(got) == len(want), path
        for k, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_kept(a, b, f"{path}[{k}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert abs(got - want) <= KEPT_TOL, f"{path}: {got!r} != {want!r}"
    else:
        assert got == want, path
