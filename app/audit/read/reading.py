"""Reading records back in bulk: the rows matching a filter, and each record's weight
sums for the aggregates (:mod:`app.audit.read.rollup`, the console's timeline), computed from
the packed weights a batch at a time."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, false, or_, select

from app.audit.store import packing
from app.audit.store.tables import records
from app.audit.store.version_rows import ReaderVersions, Version

BATCH = 20_000
# (created_us, version, top expert, rows, weight sums (m,) <f8 bytes, top counts (m,) <i8)
Summed = tuple[int, Version, str, int, bytes, bytes]


def conditions(
    versions: ReaderVersions,
    model: str,
    version: str | None = None,
    expert: str | None = None,
    since_us: int | None = None,
    until_us: int | None = None,
) -> list[Any]:
    """SQL conditions on ``iabma_audit_log`` for a model's records (of one version, whose
    top expert is ``expert``) in ``[since_us, until_us)``."""
    c = records.c
    chosen = [v for v in versions.of_model(model) if version is None or v.version == version]
    out: list[Any] = []
    if expert is None:
        out.append(c.version_id.in_([v.id for v in chosen]) if chosen else false())
    else:
        on_top = [
            (c.version_id == v.id) & (c.top == v.expert_names.index(expert))
            for v in chosen
            if expert in v.expert_names
        ]
        out.append(or_(*on_top) if on_top else false())
    if since_us is not None:
        out.append(c.created_us >= since_us)
    if until_us is not None:
        out.append(c.created_us < until_us)
    return out


def summed(conn: Connection, versions: ReaderVersions, where: Sequence[Any]) -> Iterator[Summed]:
    """Each matching record's weight sums, streamed."""
    c = records.c
    query = select(c.created_us, c.version_id, c.top, c.n_instances, c.answer).where(*where)
    rows: Iterable[Any] = conn.execution_options(stream_results=True, yield_per=BATCH).execute(
        query
    )
    batch: list[Any] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH:
            yield from _sums(batch, versions)
            batch = []
    if batch:
        yield from _sums(batch, versions)


def _sums(batch: list[Any], versions: ReaderVersions) -> Iterator[Summed]:
    by_version: dict[int, list[Any]] = {}
    for row in batch:
        by_version.setdefault(int(row[1]), []).append(row)
    for vid, rows in by_version.items():
        v = versions.get(vid)
        names = v.expert_names
        sums, tops = packing.weight_sums(
            [r[4] for r in rows], [int(r[3]) for r in rows], len(names)
        )
        for k, r in enumerate(rows):
            yield (
                int(r[0]), v, names[int(r[2])], int(r[3]),
                sums[k].astype("<f8").tobytes(), tops[k].astype("<i8").tobytes(),
            )  # fmt: skip
