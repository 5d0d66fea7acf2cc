"""The console's reads of the audit trail that ``GET /weights`` does not make; all blocking.

- :func:`timeline`: each expert's mean weight and argmax share per time bucket, over every
  record matching a filter, summed from the same stored ten-minute sums and records as
  :meth:`AuditStore.aggregate` (so the buckets add up to its aggregate), and the same per
  version.
- :func:`version_changes`: how often the gate's top expert changed between versions, over
  the inputs seen under both (matched by the trail's keyed input hash).
- :func:`count`: how many records match a filter.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from sqlalchemy import func, select

from app.audit.read import reading, rollup
from app.audit.store.records import iso_from_us
from app.audit.store.tables import records
from app.audit.write.trail_db import AuditStore, RecordFilter

MAX_BUCKETS = 24


@dataclass
class Totals:
    """Per expert: summed weight, rows on top, rows of the records that had the expert."""

    weight: dict[str, float] = field(default_factory=dict)
    top: dict[str, float] = field(default_factory=dict)
    rows: dict[str, float] = field(default_factory=dict)
    records: int = 0
    instances: int = 0

    def add(self, names: list[str], weight: np.ndarray, top: np.ndarray, n: int, k: int) -> None:
        for j, name in enumerate(names):
            self.weight[name] = self.weight.get(name, 0.0) + float(weight[j])
            self.top[name] = self.top.get(name, 0.0) + float(top[j])
            self.rows[name] = self.rows.get(name, 0.0) + n
        self.records += k
        self.instances += n

    def json(self, experts: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in experts:
            rows = self.rows.get(name, 0.0)
            out[name] = (
                {"mean_weight": self.weight[name] / rows, "argmax_share": self.top[name] / rows}
                if rows
                else None
            )
        return {"records": self.records, "instances": self.instances, "experts": out}


def count(store: AuditStore, flt: RecordFilter) -> int:
    query = select(func.count()).select_from(records).where(*flt.conditions(store.versions))
    with store.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def _whole_edges(lo: int, hi: int, buckets: int) -> np.ndarray:
    """At most ``buckets`` buckets from ``lo`` to ``hi`` whose inner edges fall on the
    stored sums' ten minutes, so that each stored bucket lies inside one of them."""
    step = rollup.BUCKET_US
    base = rollup.floor_bucket(lo)
    width = -(-(hi - base) // (buckets * step)) * step
    return np.array([lo, *range(base + width, hi, width), hi], dtype=np.int64)


def _fetch(store: AuditStore, query: Any) -> list[tuple[Any, ...]]:
    """Plain DBAPI tuples: at 10k records, building SQLAlchemy rows costs more than the scan."""
    with store.engine.connect() as conn:
        return list(conn.execute(query).cursor.fetchall())


def _span(store: AuditStore, flt: RecordFilter) -> tuple[int, int] | None:
    """The times of the first and the last matching record, each read off an index."""
    c = records.c
    query = select(c.created_us).where(*flt.conditions(store.versions)).limit(1)
    first = _fetch(store, query.order_by(c.created_us))
    last = _fetch(store, query.order_by(c.created_us.desc()))
    return (int(first[0][0]), int(last[0][0])) if first and last else None


def _record_pieces(store: AuditStore, flt: RecordFilter) -> list[tuple[Any, ...]]:
    """The matching records as :func:`rollup.bucket_rows` gives stored sums: one record each."""
    with store.engine.connect() as conn:
        return [
            (at, v.experts, v.version, 1, n, w, t)
            for at, v, _top, n, w, t in reading.summed(
                conn, store.versions, flt.conditions(store.versions)
            )
        ]


def _groups(experts: tuple[str, ...], versions: tuple[str, ...]) -> dict[tuple[str, str], Any]:
    """Each (experts, version) pair's record positions; one pair is the common case."""
    pairs: dict[tuple[str, str], int] = {}
    codes = [pairs.setdefault(pair, len(pairs)) for pair in zip(experts, versions, strict=True)]
    if len(pairs) == 1:
        return {next(iter(pairs)): slice(None)}
    array = np.asarray(codes)
    return {pair: np.flatnonzero(array == code) for pair, code in pairs.items()}


def _take(values: tuple[Any, ...], pick: Any) -> Any:
    return values[pick] if isinstance(pick, slice) else [values[i] for i in pick]


def timeline(
    store: AuditStore, flt: RecordFilter, buckets: int = MAX_BUCKETS, now: int | None = None
) -> dict[str, Any]:
    """Up to ``buckets`` buckets from ``since`` (or the first record) to ``until`` (or just
    past the last); each holds its records' totals, as ``Totals.json``.

    Over ``buckets`` times ten minutes or more, the inner edges fall on the stored sums'
    ten minutes (so the first and the last bucket may be shorter than the others), and the
    sums are read where ``GET /weights`` reads them (:meth:`AuditStore.summed_span`), so
    that weeks of trail cost a row per ten minutes; the records are read only at the
    window's edges. A shorter window reads its records, in buckets of equal width.
    """
    span = _span(store, flt)
    if span is None:
        return {"experts": [], "buckets": [], "versions": {}, "overall": Totals().json([])}
    lo = flt.since_us if flt.since_us is not None else span[0]
    hi = flt.until_us if flt.until_us is not None else span[1] + 1
    # Read up to the last edge only: a record committed meanwhile lies past it.
    flt = replace(flt, until_us=hi)
    if hi - lo >= buckets * rollup.BUCKET_US:
        lo = lo if flt.since_us is not None else rollup.floor_bucket(lo)
        edges = _whole_edges(lo, hi, buckets)
        first, last, windows = store.summed_span(flt, now)
        pieces = rollup.bucket_rows(store.engine, first, last, flt)
        for since, until in windows:
            pieces += _record_pieces(store, replace(flt, since_us=since, until_us=until))
    else:
        pieces = _record_pieces(store, flt)
        edges = rollup.even_edges(lo, hi, max(1, min(buckets, len(pieces))))
    return _binned(pieces, edges)


def _binned(pieces: list[tuple[Any, ...]], edges: np.ndarray) -> dict[str, Any]:
    if not pieces:
        return {"experts": [], "buckets": [], "versions": {}, "overall": Totals().json([])}
    # In time order, so that experts are listed as they first appear, whichever table
    # (stored sums or records) each piece came from.
    pieces = sorted(pieces, key=lambda piece: int(piece[0]))
    times_l, experts_l, versions_l, count_l, n_l, sums_l, tops_l = zip(*pieces, strict=True)
    all_times = np.asarray(times_l, dtype=np.int64)
    all_count = np.asarray(count_l, dtype=np.int64)
    all_n = np.asarray(n_l, dtype=np.float64)
    all_keys = np.clip(np.searchsorted(edges, all_times, side="right") - 1, 0, len(edges) - 2)
    groups = _groups(experts_l, versions_l)
    experts: list[str] = []
    for names_text, _version in groups:
        experts.extend(e for e in json.loads(names_text) if e not in experts)
    per_bucket = [Totals() for _ in range(len(edges) - 1)]
    per_version: dict[str, Totals] = {}
    overall = Totals()
    size = len(per_bucket)
    # Each group's pieces are summed as one array per bucket, with no per-piece Python.
    for (names_text, version), pick in groups.items():
        names = json.loads(names_text)
        m = len(names)
        weight = np.frombuffer(b"".join(_take(sums_l, pick)), "<f8").reshape(-1, m)
        top = np.frombuffer(b"".join(_take(tops_l, pick)), "<i8").reshape(-1, m)
        keys, n, k = all_keys[pick], all_n[pick], all_count[pick]
        w = np.column_stack([np.bincount(keys, weight[:, j], size) for j in range(m)])
        t = np.column_stack([np.bincount(keys, top[:, j], size) for j in range(m)])
        rows_in = np.bincount(keys, n, size)
        count = np.bincount(keys, k, size)
        for b in np.flatnonzero(count):
            per_bucket[b].add(names, w[b], t[b], int(rows_in[b]), int(count[b]))
        summed = (names, weight.sum(axis=0), top.sum(axis=0), int(n.sum()), int(k.sum()))
        per_version.setdefault(version, Totals()).add(*summed)
        overall.add(*summed)
    return {
        "experts": experts,
        "buckets": [
            {"start": iso_from_us(int(edges[i])), "end": iso_from_us(int(edges[i + 1]))}
            | t.json(experts)
            for i, t in enumerate(per_bucket)
        ],
        "versions": {v: t.json(experts) for v, t in sorted(per_version.items())},
        "overall": overall.json(experts),
    }


def version_changes(store: AuditStore, flt: RecordFilter) -> list[dict[str, Any]]:
    """For each pair of consecutive versions (in order of first record): the inputs seen
    under both, and how many of them had a different top expert under the later one.

    Inputs are matched by their keyed hash, which the trail keeps unless
    ``IABMA_AUDIT_PAYLOAD=off``; the last record of an input under a version counts.
    """
    c = records.c
    query = (
        select(c.version_id, c.input_hash, c.top)
        .where(*flt.conditions(store.versions), c.input_hash.is_not(None))
        .order_by(c.created_us, c.id)
    )
    order: list[str] = []
    seen: dict[str, dict[bytes, str]] = {}
    for vid, digest, top_at in _fetch(store, query):
        v = store.versions.get(int(vid))
        version, top = v.version, v.expert_names[int(top_at)]
        if version not in seen:
            order.append(version)
            seen[version] = {}
        seen[version][digest] = top
    out = []
    for old, new in itertools.pairwise(order):
        shared = seen[old].keys() & seen[new].keys()
        changed = sum(seen[old][d] != seen[new][d] for d in shared)
        out.append(
            {
                "from": old,
                "to": new,
                "inputs": len(shared),
                "changed": changed,
                "share": changed / len(shared) if shared else None,
            }
        )
    return out
