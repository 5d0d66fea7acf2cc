"""What many records share, stored once: the model, its version, the route, the task,
the input mode, and the names of the experts and classes (``iabma_audit_versions``).

A record holds the small id of its row. The writer finds or adds rows on its own
connection; readers load them all (a handful) and look an id up again only when a new
one appears.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sqlalchemy import Engine, select

from app.audit.store.chain import version_mac
from app.audit.store.tables import versions

KEY_COLUMNS = ("model", "version", "route", "task", "input_mode", "experts", "classes")


@dataclass(frozen=True)
class Version:
    id: int
    model: str
    version: str
    route: str
    task: str
    input_mode: str
    experts: str  # JSON list of names, as records of this version share them
    classes: str | None  # JSON list of labels (classification)

    @cached_property
    def expert_names(self) -> list[str]:
        return list(json.loads(self.experts))

    @cached_property
    def class_labels(self) -> list[Any]:
        return list(json.loads(self.classes)) if self.classes is not None else []


def version_key(
    model: str,
    version: str,
    route: str,
    task: str,
    input_mode: str,
    experts: str,
    classes: str | None,
) -> tuple[str, str, str, str, str, str, str | None]:
    return (model, version, route, task, input_mode, experts, classes)


class WriterVersions:
    """The writer's ids, found or added through a raw DBAPI cursor (``marker`` is the
    driver's parameter marker); used by the writer thread alone. With ``key`` (the chain
    key) each row added carries its MAC (:func:`app.audit.store.chain.version_mac`), written in
    the row's own INSERT, so no row is ever seen without it."""

    def __init__(self, marker: str, key: bytes | None = None) -> None:
        self._ids: dict[tuple[Any, ...], int] = {}
        self._key = key
        where = " AND ".join(
            f"{c} IS NULL" if c == "classes" else f"{c} = {marker}" for c in KEY_COLUMNS
        )
        self._find = f"SELECT id, classes FROM {versions.name} WHERE {where}"
        self._find_classes = self._find.replace("classes IS NULL", f"classes = {marker}")
        names = ", ".join(KEY_COLUMNS)
        self._add = f"INSERT INTO {versions.name} ({names}) VALUES ({', '.join([marker] * 7)})"
        # The MAC names the id, so the id is taken first: PostgreSQL's sequence, or on
        # SQLite (one server writes a trail) the next after the largest.
        self._next_id = (
            f"SELECT nextval(pg_get_serial_sequence('{versions.name}', 'id'))"
            if marker == "%s"
            else f"SELECT COALESCE(MAX(id), 0) + 1 FROM {versions.name}"
        )
        self._add_sealed = (
            f"INSERT INTO {versions.name} (id, {names}, mac) VALUES ({', '.join([marker] * 9)})"
        )

    def id_for(self, dbapi: Any, key: tuple[Any, ...]) -> int:
        found = self._ids.get(key)
        if found is not None:
            return found
        for _attempt in range(2):
            got = self._lookup(dbapi, key)
            if got is not None:
                self._ids[key] = got
                return got
            try:
                cur = dbapi.cursor()
                try:
                    if self._key is None:
                        cur.execute(self._add, key)
                    else:
                        cur.execute(self._next_id)
                        new_id = int(cur.fetchone()[0])
                        mac = version_mac(self._key, new_id, key)
                        cur.execute(self._add_sealed, (new_id, *key, mac))
                finally:
                    cur.close()
            except Exception as exc:
                # Another replica added the same row first (the unique key): read it.
                # Anything else (a cancel, a full disk) fails the group.
                if not any(c.__name__ == "IntegrityError" for c in type(exc).__mro__):
                    raise
        got = self._lookup(dbapi, key)
        if got is None:
            raise RuntimeError(f"could not store the audit version row {key!r}")
        self._ids[key] = got
        return got

    def _lookup(self, dbapi: Any, key: tuple[Any, ...]) -> int | None:
        sql, params = (self._find, key[:-1]) if key[-1] is None else (self._find_classes, key)
        cur = dbapi.cursor()
        try:
            cur.execute(sql, params)
            row = cur.fetchone()
        finally:
            cur.close()
        return None if row is None else int(row[0])

    def forget(self) -> None:
        self._ids.clear()


class ReaderVersions:
    """Every version row, loaded once and again when an unknown id is asked for."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._by_id: dict[int, Version] = {}
        self._lock = threading.Lock()

    def _load(self) -> None:
        with self.engine.connect() as conn:
            rows = conn.execute(select(versions)).all()
        found = {int(r.id): Version(int(r.id), *[r._mapping[c] for c in KEY_COLUMNS]) for r in rows}
        with self._lock:
            self._by_id = found

    def get(self, version_id: int) -> Version:
        v = self._by_id.get(version_id)
        if v is None:
            self._load()
            v = self._by_id[version_id]
        return v

    def of_model(self, model: str) -> list[Version]:
        """The versions of ``model`` (loaded afresh: a new one may have been added)."""
        self._load()
        return [v for v in self._by_id.values() if v.model == model]
