"""Reading and writing the trail through SQLAlchemy Core; every method is blocking.

The writer thread calls :meth:`AuditStore.insert` with a whole group of records: one
transaction, two ``executemany`` calls through the driver on the writer's own connection,
no ORM work per record. Request handlers call the readers through a worker thread.

Paging: records come newest first, ordered by ``(time, id)``. The cursor is the
base64url text of ``"<created_us>.<id>"`` of the last record on the page; the next page
holds the records strictly before it. Aggregates cover every record that matches the
filter (``since`` inclusive, ``until`` exclusive, ``expert``), not only the page.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from sqlalchemy import Dialect, Table, and_, func, or_, select

from app.audit.records import AuditRecord, record_json
from app.audit.tables import create_tables, expert_weights, lock_sqlite, make_engine, records
from app.errors import Fault, InvalidInput

_CURSOR = re.compile(r"^(\d{1,19})\.(\d{1,19})$")


def encode_cursor(created_us: int, record_id: int) -> str:
    return base64.urlsafe_b64encode(f"{created_us}.{record_id}".encode()).decode().rstrip("=")


def decode_cursor(text: str) -> tuple[int, int]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    match = _CURSOR.match(raw)
    if not match:
        raise InvalidInput(
            [Fault("invalid_value", "cursor", "not a cursor returned by GET /weights")]
        )
    return int(match.group(1)), int(match.group(2))


@dataclass(frozen=True)
class RecordFilter:
    model: str
    since_us: int | None = None
    until_us: int | None = None
    expert: str | None = None
    limit: int = 100
    cursor: tuple[int, int] | None = None

    def conditions(self, table: Table = records) -> list[Any]:
        c = table.c
        out: list[Any] = [c.model == self.model]
        if self.since_us is not None:
            out.append(c.created_us >= self.since_us)
        if self.until_us is not None:
            out.append(c.created_us < self.until_us)
        if self.expert is not None:
            out.append(c.top_expert == self.expert)
        return out


def insert_sql(table: Table, dialect: Dialect) -> tuple[str, list[str] | None]:
    """The driver's INSERT for every column but the key, and the order of its parameters
    (None when the driver takes them by name)."""
    columns = [c.name for c in table.columns if not (c.primary_key and c.autoincrement)]
    compiled = table.insert().compile(dialect=dialect, column_keys=columns)
    order = list(compiled.positiontup) if compiled.positional and compiled.positiontup else None
    return compiled.string, order


class AuditStore:
    def __init__(self, url: str, timeout_seconds: float) -> None:
        self.url = url
        self.engine = make_engine(url, timeout_seconds)
        self.timeout_seconds = timeout_seconds
        self._lock: IO[str] | None = None
        self._writer: Any = None  # the writer thread's own DBAPI connection
        self._log_sql = insert_sql(records, self.engine.dialect)
        self._weights_sql = insert_sql(expert_weights, self.engine.dialect)

    def prepare(self) -> None:
        """Claim a SQLite trail for this process, then create the tables, retrying while
        the database is still starting up."""
        self._lock = lock_sqlite(self.url)
        deadline = time.monotonic() + self.timeout_seconds
        while True:
            try:
                create_tables(self.engine)
                return
            except Exception:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.engine.dispose()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    @staticmethod
    def _params(rows: list[dict[str, Any]], order: list[str] | None) -> list[Any]:
        if order is None:
            return rows
        return [tuple(r[k] for k in order) for r in rows]

    def insert(self, batch: Sequence[AuditRecord]) -> None:
        """One transaction for the whole group, through the driver's executemany.

        Called only from the writer thread, which keeps one connection for itself.
        """
        log = [r.log_row() for r in batch]
        weights = [w for r in batch for w in r.weight_rows()]
        if self._writer is None:
            self._writer = self.engine.raw_connection()
        conn = self._writer
        try:
            cur = conn.cursor()
            try:
                cur.executemany(self._log_sql[0], self._params(log, self._log_sql[1]))
                cur.executemany(self._weights_sql[0], self._params(weights, self._weights_sql[1]))
            finally:
                cur.close()
            conn.commit()
        except Exception:
            # A broken connection must not serve the next group: reconnect then.
            self._writer = None
            with contextlib.suppress(Exception):
                conn.rollback()
            with contextlib.suppress(Exception):
                conn.invalidate()
            raise

    def find(self, request_id: str) -> dict[str, Any] | None:
        """The most recent record with this request id (ids sent by clients may repeat)."""
        query = select(records).where(records.c.request_id == request_id)
        query = query.order_by(records.c.created_us.desc(), records.c.id.desc()).limit(1)
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else record_json(row)

    def page(self, flt: RecordFilter) -> tuple[list[dict[str, Any]], str | None]:
        c = records.c
        query = select(records).where(*flt.conditions())
        if flt.cursor is not None:
            us, rid = flt.cursor
            query = query.where(or_(c.created_us < us, and_(c.created_us == us, c.id < rid)))
        query = query.order_by(c.created_us.desc(), c.id.desc()).limit(flt.limit + 1)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        more = len(rows) > flt.limit
        rows = rows[: flt.limit]
        cursor = encode_cursor(rows[-1].created_us, rows[-1].id) if more else None
        return [record_json(r) for r in rows], cursor

    def aggregate(self, flt: RecordFilter) -> dict[str, Any]:
        conds = flt.conditions()
        totals = select(func.count(), func.coalesce(func.sum(records.c.n_instances), 0)).where(
            *conds
        )
        w = expert_weights.c
        per_expert = (
            select(w.expert, func.sum(w.weight_sum), func.sum(w.top_count), func.sum(w.n))
            .where(*flt.conditions(expert_weights))
            .group_by(w.expert)
            .order_by(w.expert)
        )
        with self.engine.connect() as conn:
            n_records, n_rows = conn.execute(totals).one()
            experts = {
                name: {
                    "mean_weight": float(total) / int(n),
                    "argmax_share": int(tops) / int(n),
                }
                for name, total, tops, n in conn.execute(per_expert)
            }
        return {"records": int(n_records), "instances": int(n_rows), "experts": experts}
