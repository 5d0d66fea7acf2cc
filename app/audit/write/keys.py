"""A record's keys as the writer stores them: its version's id in place of the version's
key (:mod:`app.audit.store.version_rows`), its model's id after its values, and which request ids
the trail holds already for a model (what :mod:`app.audit.write.apart` asks after a refusal).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.audit.store.records import VERSION_AT
from app.audit.store.tables import models, records
from app.audit.store.version_rows import WriterVersions


class WriterKeys:
    """Found or added through the writer's raw DBAPI connection (``marker`` is its
    driver's parameter marker, ``?`` for sqlite3 or ``%s`` for psycopg); used by the
    writer thread alone. With ``chain_key`` each version row added carries its MAC."""

    def __init__(self, marker: str, model_ids: bool, chain_key: bytes | None = None) -> None:
        self.model_ids = model_ids
        self._versions = WriterVersions(marker, chain_key)
        self._models: dict[str, int] = {}
        self._add_model = (
            f"INSERT INTO {models.name} (model) VALUES ({marker}) ON CONFLICT (model) DO NOTHING"
        )
        self._find_model = f"SELECT id FROM {models.name} WHERE model = {marker}"
        self._postgres = marker == "%s"
        held = "= ANY(%s)" if self._postgres else "IN ({})"
        self._held = f"SELECT request_id, model_id FROM {records.name} WHERE request_id {held}"

    def with_ids(self, dbapi: Any, rows: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Rows whose version key (:meth:`AuditRecord.log_values`) is now its row's id,
        and with ``model_ids``, their model's id after their values."""
        at = VERSION_AT
        out = []
        for row in rows:
            key = row[at]
            if isinstance(key, tuple):
                row = (*row[:at], self._versions.id_for(dbapi, key), *row[at + 1 :])
                if self.model_ids:
                    row = (*row, self.model_id(dbapi, key[0]))
            out.append(row)
        return out

    def model_id(self, dbapi: Any, model: str) -> int:
        found = self._models.get(model)
        if found is None:
            cur = dbapi.cursor()
            try:
                cur.execute(self._add_model, (model,))  # another writer's row stays
                cur.execute(self._find_model, (model,))
                found = self._models[model] = int(cur.fetchone()[0])
            finally:
                cur.close()
        return found

    def taken(self, dbapi: Any, keys: list[tuple[bytes, int]]) -> set[tuple[bytes, int]]:
        """Of ``keys`` (request id, model id), those that name a record already."""
        ids = list({rid for rid, _ in keys})
        cur = dbapi.cursor()
        try:
            if self._postgres:
                cur.execute(self._held, (ids,))
            else:
                cur.execute(self._held.format(", ".join("?" * len(ids))), ids)
            found = {(bytes(rid), model) for rid, model in cur.fetchall()}
        finally:
            cur.close()
        return found & set(keys)
