"""Removing records older than ``IABMA_AUDIT_RETENTION_DAYS``, with their outcomes, in
the background and in small batches, leaving the chain verifiable.

The unit is the link (:mod:`app.audit.chain`): a chain's links whose newest record is
older than the cut-off go, with their records. First a keyed cut is written per chain
(what ``audit-verify`` starts from), then the records go in batches of :data:`BATCH`, each
its own short transaction (on SQLite a commit waits at most one batch, a few ms; on
PostgreSQL deletes take no lock an insert waits on, and batches are larger), then the
links.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Table, and_, delete, false, insert, or_, select

from app.audit.chain import cut_mac
from app.audit.engine import make_engine
from app.audit.tables import cuts, links, outcomes, records

log = logging.getLogger("iabma.audit")
BATCH = 2_000
# PostgreSQL's deletes take no lock that a commit waits on (a row lock on rows nobody
# writes again): a larger batch only makes fewer, cheaper round trips and commits.
PG_BATCH = 50_000


@dataclass
class Pruned:
    records: int = 0
    outcomes: int = 0
    links: int = 0


def _ends(engine: Engine, before_us: int) -> dict[int, tuple[int, bytes]]:
    """Per chain, its last link older than ``before_us``: (seq, mac). A chain's links are
    in time order, so those older form a prefix of it."""
    c = links.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(c.chain, c.seq, c.mac).where(c.created_us < before_us).order_by(c.chain, c.seq)
        ).all()
    ends: dict[int, tuple[int, bytes]] = {}
    for row in rows:
        ends[int(row[0])] = (int(row[1]), bytes(row[2]))
    return ends


def _write_cuts(
    engine: Engine, key: bytes, ends: dict[int, tuple[int, bytes]], before: int
) -> None:
    with engine.begin() as conn:
        for chain, (seq, mac) in ends.items():
            conn.execute(delete(cuts).where(cuts.c.chain == chain))
            conn.execute(
                insert(cuts).values(
                    chain=chain,
                    through_seq=seq,
                    before_us=before,
                    mac_at=mac,
                    mac=cut_mac(key, chain, seq, mac, before),
                )
            )


# SQLite: after each batch the write lock stays free for as long as the batch held it,
# and this long at least. A commit of the server that comes during a batch waits in
# SQLite's busy handler, which looks again after 1, 3, 8, 18, 33 ms...: batches back to
# back took the lock again before it looked, and the commit waited for all of them (186
# ms for 100,000 records archived, p99 of /predict 150 ms against 9 idle). With a pause,
# it waits for one batch. The deletes take twice as long; the records are read and
# written, the most of the archive's time, without the lock.
MIN_GAP_S = 0.003


@contextmanager
def paced(engine: Engine) -> Iterator[Any]:
    """A transaction of one SQLite batch, then the server's turn at the write lock."""
    t0 = time.monotonic()
    with engine.begin() as conn:
        yield conn
    held = time.monotonic() - t0
    # The deletes fill the WAL; past 1,000 pages SQLite checkpoints in whichever
    # connection commits next, often the server's, on a request's time. Moving the pages
    # into the database here, without the write lock, keeps most of that off /predict;
    # and since the lock is free meanwhile, the checkpoint is part of the server's turn.
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
    checkpoint = time.monotonic() - t0 - held
    time.sleep(max(held - checkpoint, MIN_GAP_S))


def range_end(conn: Any, t: Table, where: list[Any], order: Any, low: Any, size: int) -> Any:
    """PostgreSQL: where a batch of ``size`` rows from ``low`` on ends (exclusive), by
    ``order``; None when fewer are left. Rows of one time never straddle two batches."""
    since = [] if low is None else [order >= low]
    q = select(order).where(*where, *since).order_by(order).offset(size).limit(1)
    end = conn.execute(q).scalar()
    if end is None:
        return None
    return end if low is None or end > low else low + 1


def _in_batches(engine: Engine, t: Table, where: list[Any], order: Any) -> int:
    """Delete the rows matching ``where``, a batch at a time (:data:`BATCH`, or
    :data:`PG_BATCH` on PostgreSQL), oldest first."""
    done = 0
    if engine.dialect.name != "postgresql":
        while True:
            ids = select(t.c.id).where(*where).order_by(order).limit(BATCH)
            with paced(engine) as conn:
                n = conn.execute(delete(t).where(t.c.id.in_(ids.scalar_subquery()))).rowcount
            done += n
            if n < BATCH:
                return done
    # PostgreSQL: a range of the time index at a time. By ids picked in a subquery, the
    # planner joins them to the whole table; and a scan from the oldest would walk again
    # every row deleted before it, which stays in the index until vacuum.
    low = None
    while True:
        with engine.begin() as conn:
            end = range_end(conn, t, where, order, low, PG_BATCH)
            span = [] if low is None else [order >= low]
            span += [] if end is None else [order < end]
            done += conn.execute(delete(t).where(*where, *span)).rowcount
        if end is None:
            return done
        low = end


def prune(
    engine: Engine, key: bytes, before_us: int, progress: Callable[[int], None] | None = None
) -> Pruned:
    """Remove what is older than ``before_us``: records of links wholly before it (and
    records in no link), their outcomes, and those links."""
    out = Pruned()
    ends = _ends(engine, before_us)
    if ends:
        _write_cuts(engine, key, ends, before_us)
    c = records.c
    covered = [and_(c.chain == chain, c.seq <= seq) for chain, (seq, _) in ends.items()]
    mine = or_(c.chain.is_(None), *covered) if covered else or_(c.chain.is_(None), false())
    out.records = _in_batches(engine, records, [c.created_us < before_us, mine], c.created_us)
    if progress is not None:
        progress(out.records)
    o = outcomes.c
    out.outcomes = _in_batches(engine, outcomes, [o.record_us < before_us], o.record_us)
    with engine.begin() as conn:
        for chain, (seq, _) in ends.items():
            out.links += conn.execute(
                delete(links).where(links.c.chain == chain, links.c.seq <= seq)
            ).rowcount
    return out


DAY_US = 86_400_000_000
FIRST_AFTER_S = 10.0
EVERY_S = 300.0


async def run(
    url: str,
    timeout_seconds: float,
    key: bytes,
    days: float,
    now_us: Callable[[], int],
    every_s: float = EVERY_S,
) -> None:
    """The server's task: prune the trail at ``url`` now and then, on a worker thread, for
    ever, through an engine of its own whose commits do not wait for the disk
    (:func:`app.audit.engine.make_engine`'s ``mover``)."""
    import asyncio

    engine = make_engine(url, timeout_seconds, mover=True)
    try:
        await asyncio.sleep(min(FIRST_AFTER_S, every_s))
        await _rounds(engine, key, days, now_us, every_s)
    finally:
        engine.dispose()


async def _rounds(
    engine: Engine, key: bytes, days: float, now_us: Callable[[], int], every_s: float
) -> None:
    import asyncio

    while True:
        before = now_us() - round(days * DAY_US)
        try:
            done = await asyncio.to_thread(prune, engine, key, before)
        except Exception as exc:  # the next round tries again; serving goes on
            log.error("audit retention failed: %s", exc)
        else:
            if done.records or done.outcomes:
                log.info(
                    "audit retention removed %d records, %d outcomes, %d links",
                    done.records, done.outcomes, done.links,
                )  # fmt: skip
        await asyncio.sleep(every_s)
