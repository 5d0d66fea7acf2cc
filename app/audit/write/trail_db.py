"""Reading and writing the trail through SQLAlchemy Core; every method blocks.

The writer thread inserts whole groups; request handlers read records (newest first,
with an opaque cursor) and aggregates over every record matching a filter.
"""

from __future__ import annotations

import base64
import binascii
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import IO, Any

from sqlalchemy import and_, or_, select

from app.audit.read import reading, rollup
from app.audit.store.engine import lock_sqlite, make_engine
from app.audit.store.packing import pack_request_id
from app.audit.store.records import LOG_COLUMNS, AuditRecord, now_us, record_json
from app.audit.store.tables import SchemaMismatch, archived, create_tables, records
from app.audit.store.version_rows import ReaderVersions
from app.audit.write.apart import Refused
from app.audit.write.connection import WriterConnection
from app.audit.write.outcome_chain import OutcomeChains
from app.audit.write.outcome_rows import Growth
from app.errors import Archived, Fault, InvalidInput

_CURSOR = re.compile(r"^(\d{1,19})\.(\d{1,19})$")
INT64_MAX = 2**63 - 1  # both columns are 64-bit; a larger number would fail in the driver


def encode_cursor(created_us: int, record_id: int) -> str:
    return base64.urlsafe_b64encode(f"{created_us}.{record_id}".encode()).decode().rstrip("=")


def decode_cursor(text: str) -> tuple[int, int]:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    match = _CURSOR.fullmatch(raw)  # match's $ would take "1.1\n"
    created_us, record_id = (int(match.group(1)), int(match.group(2))) if match else (-1, -1)
    if not (0 <= created_us <= INT64_MAX and 0 <= record_id <= INT64_MAX):
        raise InvalidInput(
            [Fault("invalid_value", "cursor", "not a cursor returned by GET /weights")]
        )
    return created_us, record_id


@dataclass(frozen=True)
class RecordFilter:
    model: str
    since_us: int | None = None
    until_us: int | None = None
    expert: str | None = None
    version: str | None = None  # the audit console's filter; GET /weights has none
    limit: int = 100
    cursor: tuple[int, int] | None = None

    def conditions(self, versions: ReaderVersions) -> list[Any]:
        return reading.conditions(
            versions, self.model, self.version, self.expert, self.since_us, self.until_us
        )


class AuditStore:
    def __init__(self, url: str, timeout_seconds: float, chain_key: bytes | None = None) -> None:
        """With ``chain_key`` (:func:`app.audit.store.chain.chain_key`) every group commit
        extends the tamper-evident chain; the server always passes one."""
        self.url = url
        self.engine = make_engine(url, timeout_seconds)
        self.timeout_seconds = timeout_seconds
        # One roll-up at a time here: a second reader waits for it, then reads its sums,
        # rather than scanning the same records beside it (three at once took 30-43 s
        # where one took 11 s, on 1.1 million records).
        self._rollup = threading.Lock()
        self._lock: IO[str] | None = None
        self._writer = WriterConnection(self.engine, LOG_COLUMNS, timeout_seconds, chain_key)
        self.outcome_growth = Growth()  # app.audit.write.outcome_rows
        # Outcomes are chained like records, under a key derived from the same one.
        self.chain_key = chain_key
        self.outcome_chains = OutcomeChains(chain_key) if chain_key is not None else None
        self.versions = ReaderVersions(self.engine)

    def prepare(self) -> None:
        """Claim a SQLite trail for this process, then create the tables, retrying while
        the database is still starting up."""
        self._lock = lock_sqlite(self.url)
        deadline = time.monotonic() + self.timeout_seconds
        while True:
            try:
                create_tables(self.engine)
                return
            except SchemaMismatch:
                raise  # no wait makes it another schema
            except Exception:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def close(self) -> None:
        self._writer.close()
        self.engine.dispose()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def insert(self, batch: Sequence[AuditRecord]) -> Refused:
        """:meth:`insert_rows` for records, building their rows here."""
        return self.insert_rows([r.log_values() for r in batch])

    def insert_rows(
        self, rows: Sequence[tuple[Any, ...]], give_up_at: float | None = None
    ) -> Refused:
        """The group of :meth:`AuditRecord.log_values` rows on the writer thread's own
        connection (:mod:`app.audit.write.connection`), one transaction unless the database
        refuses some rows: those, by place, are not written (:mod:`app.audit.write.apart`)."""
        return self._writer.insert(rows, give_up_at)

    def probe(self) -> None:
        """A probe commit on the writer's connection (:mod:`app.audit.write.health`)."""
        self._writer.probe()

    def cancel_insert(self) -> None:
        """From any thread: cancel the writer's statement running now, if any."""
        self._writer.cancel()

    def find(self, request_id: str) -> dict[str, Any] | None:
        """The most recent record with this request id (ids sent by clients may repeat)."""
        c = records.c
        query = select(records).where(c.request_id == pack_request_id(request_id))
        query = query.order_by(c.created_us.desc(), c.id.desc()).limit(1)
        with self.engine.connect() as conn:
            row = conn.execute(query).first()
            if row is None:
                day = conn.execute(
                    select(archived.c.day).where(
                        archived.c.request_id == pack_request_id(request_id)
                    )
                ).scalar()
                if day is not None:
                    raise Archived(
                        f"the audit record of request id {request_id!r} was archived in the "
                        f"Parquet files of {day} (iabma audit-archive)",
                        field="request_id",
                    )
        return None if row is None else record_json(row, self.versions.get(row.version_id))

    def page(self, flt: RecordFilter) -> tuple[list[dict[str, Any]], str | None]:
        c = records.c
        query = select(records).where(*flt.conditions(self.versions))
        if flt.cursor is not None:
            us, rid = flt.cursor
            query = query.where(or_(c.created_us < us, and_(c.created_us == us, c.id < rid)))
        query = query.order_by(c.created_us.desc(), c.id.desc()).limit(flt.limit + 1)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        more = len(rows) > flt.limit
        rows = rows[: flt.limit]
        cursor = encode_cursor(rows[-1].created_us, rows[-1].id) if more else None
        return [record_json(r, self.versions.get(r.version_id)) for r in rows], cursor

    def aggregate(self, flt: RecordFilter, now: int | None = None) -> dict[str, Any]:
        """Each expert's mean weight and top share over every row of every matching record.

        Whole sealed buckets inside the window come from their stored sums, the records at
        its edges from the trail (:meth:`summed_span`). Records of versions with the same
        experts are summed as one array; an expert counts over the rows of the records
        that had it.
        """
        first, last, edges = self.summed_span(flt, now)
        sums = rollup.Sums()
        rollup.add_buckets(self.engine, first, last, flt, sums)
        for since, until in edges:
            self._add_records(replace(flt, since_us=since, until_us=until), sums)
        return sums.json()

    def summed_span(
        self, flt: RecordFilter, now: int | None = None
    ) -> tuple[int, int, list[tuple[int | None, int | None]]]:
        """Sum ``flt.model``'s sealed buckets not summed yet (:mod:`app.audit.read.rollup`), then
        split the filter's window: ``[first, last)`` is read from the stored sums (empty
        when ``first == last``), and each ``(since, until)`` window left is read from the
        records."""
        cut = rollup.floor_bucket((now_us() if now is None else now) - rollup.SEAL_US)
        first = 0 if flt.since_us is None else rollup.ceil_bucket(flt.since_us)
        last = cut if flt.until_us is None else min(cut, rollup.floor_bucket(flt.until_us))
        if first >= last:
            return first, first, [(flt.since_us, flt.until_us)]
        with self._rollup:
            through = rollup.sum_sealed(self.engine, flt.model, cut)
        last = max(first, min(last, through))
        edges: list[tuple[int | None, int | None]] = []
        if flt.since_us is not None and flt.since_us < first:
            edges.append((flt.since_us, first))
        if flt.until_us is None or last < flt.until_us:
            edges.append((last, flt.until_us))
        return first, last, edges

    def _add_records(self, flt: RecordFilter, into: rollup.Sums) -> None:
        groups: dict[str, tuple[list[bytes], list[bytes], list[int]]] = {}
        with self.engine.connect() as conn:
            for _at, version, _top, n, sums, tops in reading.summed(
                conn, self.versions, flt.conditions(self.versions)
            ):
                group = groups.setdefault(version.experts, ([], [], []))
                group[0].append(sums)
                group[1].append(tops)
                group[2].append(n)
        for experts, (sums_l, tops_l, ns) in groups.items():
            into.add_blobs(experts, sums_l, tops_l, sum(ns))
