"""The trail's sums per ten minutes, so an aggregate over weeks reads a row per bucket.

Sealed buckets are summed once into ``iabma_audit_buckets``; an aggregate adds those rows
and sums only the records at its edges. The sums are derived and may be dropped at any
time (docs/design.md, "Audit trail").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError, OperationalError

from app.audit.read import reading
from app.audit.store.tables import buckets, watermarks
from app.audit.store.version_rows import ReaderVersions

BUCKET_US = 600_000_000  # ten minutes
# How long after a bucket ends no record can still land in it: a record is written within
# IABMA_AUDIT_TIMEOUT_SECONDS (at most 600 s) of its time, or never (app.audit.write.writer),
# and a hung commit is cancelled half a second after that. Fixed, so that no replica's
# setting can make another seal early; with room for clocks a few minutes apart.
SEAL_US = 1_800_000_000  # thirty minutes


@dataclass
class Sums:
    """Per set of experts (JSON list): summed weights, rows on top, rows; and over all
    sets, the records and rows counted."""

    groups: dict[str, list[Any]] = field(default_factory=dict)
    records: int = 0
    instances: int = 0

    def add(self, experts: str, weight: np.ndarray, top: np.ndarray, rows: int, n: int) -> None:
        """Add ``n`` records of ``rows`` rows whose per-expert sums are ``weight``, ``top``."""
        group = self.groups.get(experts)
        if group is None:
            self.groups[experts] = [weight.astype("<f8"), top.astype("<i8"), rows]
        else:
            group[0] = group[0] + weight
            group[1] = group[1] + top
            group[2] += rows
        self.records += n
        self.instances += rows

    def add_blobs(self, experts: str, weights: list[bytes], tops: list[bytes], rows: int) -> None:
        """Add records given as their stored per-expert sums (one blob per record)."""
        self.add(experts, _column_sum(weights, "<f8"), _column_sum(tops, "<i8"), rows, len(weights))

    def json(self) -> dict[str, Any]:
        """``GET /weights``' aggregate: an expert counts over the rows of the records that
        had it."""
        totals: dict[str, list[float]] = {}
        for experts, (weight, top, rows) in self.groups.items():
            for j, name in enumerate(json.loads(experts)):
                t = totals.setdefault(name, [0.0, 0.0, 0.0])
                t[0] += float(weight[j])
                t[1] += float(top[j])
                t[2] += float(rows)
        experts_out = {
            name: {"mean_weight": w / n, "argmax_share": k / n}
            for name, (w, k, n) in sorted(totals.items())
        }
        return {"records": self.records, "instances": self.instances, "experts": experts_out}


def summed_through(engine: Engine, model: str) -> int | None:
    """The time before which every sealed bucket of ``model`` is summed, if any is."""
    with engine.connect() as conn:
        value = conn.execute(
            select(watermarks.c.through_us).where(watermarks.c.model == model)
        ).scalar()
    return None if value is None else int(value)


class _Lost(Exception):
    """Another reader moved the watermark first."""


def sum_sealed(
    engine: Engine, model: str, cut: int, progress: Callable[[int], None] | None = None
) -> int:
    """Sum ``model``'s sealed buckets before ``cut`` not summed yet; return the time before
    which all are summed now.

    Two readers may do this at once: the one whose update of the watermark finds it where
    it read it (or whose insert of it comes first) stores its sums; the other's
    transaction stores nothing. ``progress`` hears the records read so far, now and then.
    """
    start = summed_through(engine, model)
    if start is not None and start >= cut:
        return start
    versions = ReaderVersions(engine)
    where = reading.conditions(versions, model, since_us=start, until_us=cut)
    folded = _Buckets()
    with engine.connect() as conn:
        # Streamed: PostgreSQL would otherwise hand over every record at once.
        for done, (at, v, top, n, w, t) in enumerate(reading.summed(conn, versions, where), 1):
            folded.add(at, v.version, top, v.experts, n, w, t)
            if progress is not None and done % 50_000 == 0:
                progress(done)
    rows = [
        {"model": model, "bucket_us": key[0], "version": key[1], "top_expert": key[2],
         "experts": key[3], "records": k, "instances": n, "weight_sums": w, "top_counts": t}
        for key, (w, t, n, k) in folded.totals()
    ]  # fmt: skip
    try:
        with engine.begin() as conn:
            if start is None:
                conn.execute(insert(watermarks).values(model=model, through_us=cut))
                # A rebuild: the sums of a dropped watermark go with it.
                conn.execute(delete(buckets).where(buckets.c.model == model))
            else:
                moved = conn.execute(
                    update(watermarks)
                    .where(watermarks.c.model == model, watermarks.c.through_us == start)
                    .values(through_us=cut)
                ).rowcount
                if moved != 1:
                    raise _Lost
            if rows:
                conn.execute(insert(buckets), rows)
    except (_Lost, IntegrityError, OperationalError):
        # Another reader got there first (OperationalError: a serialization failure under
        # REPEATABLE READ), or the sums were dropped meanwhile: what is stored now holds.
        return summed_through(engine, model) or 0
    return cut


def bucket_rows(engine: Engine, lo: int, hi: int, flt: Any) -> list[tuple[Any, ...]]:
    """The stored sums of ``flt.model``'s buckets in ``[lo, hi)`` that match its expert and
    version, as ``(bucket_us, experts, version, records, instances, weight_sums,
    top_counts)``."""
    if lo >= hi:
        return []
    c = buckets.c
    query = select(
        c.bucket_us, c.experts, c.version, c.records, c.instances, c.weight_sums, c.top_counts
    ).where(c.model == flt.model, c.bucket_us >= lo, c.bucket_us < hi)
    if flt.expert is not None:
        query = query.where(c.top_expert == flt.expert)
    if flt.version is not None:
        query = query.where(c.version == flt.version)
    with engine.connect() as conn:
        return list(conn.execute(query).cursor.fetchall())


def add_buckets(engine: Engine, lo: int, hi: int, flt: Any, into: Sums) -> None:
    """Add the stored sums of :func:`bucket_rows` to ``into``."""
    for _time, experts, _version, n_records, n_rows, weight, top in bucket_rows(
        engine, lo, hi, flt
    ):
        into.add(
            str(experts),
            np.frombuffer(bytes(weight), "<f8"),
            np.frombuffer(bytes(top), "<i8"),
            int(n_rows),
            int(n_records),
        )


def even_edges(lo: int, hi: int, buckets: int) -> np.ndarray:
    """At most ``buckets`` buckets of equal width (in microseconds) from ``lo`` to ``hi``:
    their edges, the first ``lo`` and the last ``hi``."""
    width = max(1, -(-(hi - lo) // buckets))
    edges = np.minimum(lo + width * np.arange(buckets + 1, dtype=np.int64), hi)
    edges[-1] = hi  # the width rounded up: the last bucket ends at hi, not past it
    return np.unique(edges)


def floor_bucket(us: int) -> int:
    return us // BUCKET_US * BUCKET_US


def ceil_bucket(us: int) -> int:
    return -(-us // BUCKET_US) * BUCKET_US


class _Buckets:
    """Records summed per bucket, version, top expert and set of experts.

    Blobs wait in lists and are summed in numpy a batch at a time, so that memory stays
    bounded (a few tens of MB) however many records one scan reads.
    """

    FOLD_AT = 200_000

    def __init__(self) -> None:
        self._groups: dict[tuple[int, str, str, str], list[Any]] = {}
        self._pending = 0

    def add(
        self, created: int, version: str, top: str, experts: str, n: int, w: bytes, t: bytes
    ) -> None:
        key = (created - created % BUCKET_US, version, top, experts)
        group = self._groups.get(key)
        if group is None:
            # weights, tops waiting; rows; records; weight and top sums folded so far
            group = self._groups[key] = [[], [], 0, 0, None, None]
        group[0].append(w)
        group[1].append(t)
        group[2] += n
        group[3] += 1
        self._pending += 1
        if self._pending >= self.FOLD_AT:
            self._fold()

    def _fold(self) -> None:
        for group in self._groups.values():
            if group[0]:
                w, t = _column_sum(group[0], "<f8"), _column_sum(group[1], "<i8")
                group[4] = w if group[4] is None else group[4] + w
                group[5] = t if group[5] is None else group[5] + t
                group[0], group[1] = [], []
        self._pending = 0

    def totals(self) -> list[tuple[tuple[int, str, str, str], tuple[bytes, bytes, int, int]]]:
        """``(key, (weight sums, top counts, rows, records))`` per group."""
        self._fold()
        return [
            (key, (g[4].astype("<f8").tobytes(), g[5].astype("<i8").tobytes(), g[2], g[3]))
            for key, g in self._groups.items()
        ]


def _column_sum(blobs: list[bytes], dtype: str) -> np.ndarray:
    m = len(blobs[0]) // 8
    return np.frombuffer(b"".join(blobs), dtype).reshape(-1, m).sum(axis=0)
