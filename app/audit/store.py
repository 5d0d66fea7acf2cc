"""Reading and writing the trail through SQLAlchemy Core; every method is blocking.

The writer thread calls :meth:`AuditStore.insert` with a whole group of records (one
transaction); request handlers call the readers through a worker thread.

Paging: records come newest first, ordered by ``(time, id)``. The cursor is the
base64url text of ``"<created_us>.<id>"`` of the last record on the page; the next page
holds the records strictly before it. Aggregates cover every record that matches the
filter (``since`` inclusive, ``until`` exclusive, ``expert``), not only the page.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, or_, select

from app.audit.records import AuditRecord, record_json
from app.audit.tables import create_tables, expert_weights, make_engine, records
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

    def conditions(self) -> list[Any]:
        c = records.c
        out: list[Any] = [c.model == self.model]
        if self.since_us is not None:
            out.append(c.created_us >= self.since_us)
        if self.until_us is not None:
            out.append(c.created_us < self.until_us)
        if self.expert is not None:
            out.append(c.top_expert == self.expert)
        return out


class AuditStore:
    def __init__(self, url: str, timeout_seconds: float) -> None:
        self.engine = make_engine(url, timeout_seconds)
        self.timeout_seconds = timeout_seconds

    def prepare(self) -> None:
        """Create the tables, retrying while the database is still starting up."""
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
        self.engine.dispose()

    def insert(self, batch: Sequence[AuditRecord]) -> None:
        """One transaction for the whole group: all of it is committed, or none."""
        rows = [r.record_row() for r in batch]
        with self.engine.begin() as conn:
            ids = (
                conn.execute(
                    records.insert().returning(records.c.id, sort_by_parameter_order=True), rows
                )
                .scalars()
                .all()
            )
            weights = [w for rec, rid in zip(batch, ids, strict=True) for w in rec.expert_rows(rid)]
            conn.execute(expert_weights.insert(), weights)

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
            .select_from(expert_weights.join(records, w.record_id == records.c.id))
            .where(*conds)
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
