"""Removing records older than ``IABMA_AUDIT_RETENTION_DAYS``, with their outcomes, in
the background and in small batches, leaving the chain verifiable.

The unit is the link (:mod:`app.audit.store.chain`): a chain's links whose newest record is
older than the cut-off go, with their records. First a keyed cut is written per chain
(what ``audit-verify`` starts from; a cut only ever moves forward), then the records go
in batches of :data:`BATCH`, each its own short transaction with their outcomes (on
SQLite a commit waits at most one batch, a few ms; on PostgreSQL deletes take no lock an
insert waits on, and batches are larger), then the links. An outcome chain's oldest links
go once no outcome of theirs is left, behind a cut of their own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Table, and_, delete, exists, false, func, insert, or_, select

from app.audit.store import shadow_table
from app.audit.store.chain import cut_mac, outcome_key
from app.audit.store.engine import make_engine
from app.audit.store.tables import cuts, links, outcome_cuts, outcome_links, outcomes, records

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
    shadow_groups: int = 0


def _ends(engine: Engine, before_us: int, table: Table = links) -> dict[int, tuple[int, bytes]]:
    """Per chain, its last link older than ``before_us``: (seq, mac). A chain's links are
    in time order, so those older form a prefix of it."""
    c = table.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(c.chain, c.seq, c.mac).where(c.created_us < before_us).order_by(c.chain, c.seq)
        ).all()
    ends: dict[int, tuple[int, bytes]] = {}
    for row in rows:
        ends[int(row[0])] = (int(row[1]), bytes(row[2]))
    return ends


def _write_cuts(
    engine: Engine,
    key: bytes,
    ends: dict[int, tuple[int, bytes]],
    before: int,
    table: Table = cuts,
) -> None:
    """Move each chain's cut forward to its end in ``ends``; never back (a run with an
    earlier cut-off, or another replica's, would re-open links already pruned). Either
    way the cut then stands at or past each end."""
    c = table.c
    with engine.begin() as conn:
        found = {
            int(row[0]): int(row[1])
            for row in conn.execute(
                select(c.chain, c.through_seq).where(c.chain.in_(list(ends)))
            ).all()
        }
        for chain, (seq, mac) in ends.items():
            if found.get(chain, 0) >= seq:
                continue
            conn.execute(delete(table).where(c.chain == chain))
            conn.execute(
                insert(table).values(
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


def _with_outcomes(conn: Any, ids: Any) -> int:
    """Delete the outcomes of the records ``ids`` selects: an outcome leaves with its
    record, in the same transaction."""
    o = outcomes.c
    return int(conn.execute(delete(outcomes).where(o.record_id.in_(ids))).rowcount)


def _in_batches(
    engine: Engine, t: Table, where: list[Any], order: Any, done: Pruned | None = None
) -> int:
    """Delete the rows matching ``where``, a batch at a time (:data:`BATCH`, or
    :data:`PG_BATCH` on PostgreSQL), oldest first; with ``done``, ``t`` is the records and
    their outcomes go with each batch (counted there)."""
    n_done = 0
    if engine.dialect.name != "postgresql":
        while True:
            ids = select(t.c.id).where(*where).order_by(order).limit(BATCH).scalar_subquery()
            with paced(engine) as conn:
                if done is not None:
                    done.outcomes += _with_outcomes(conn, ids)
                n = conn.execute(delete(t).where(t.c.id.in_(ids))).rowcount
            n_done += n
            if n < BATCH:
                return n_done
    # PostgreSQL: a range of the time index at a time. By ids picked in a subquery, the
    # planner joins them to the whole table; and a scan from the oldest would walk again
    # every row deleted before it, which stays in the index until vacuum.
    low = None
    while True:
        with engine.begin() as conn:
            end = range_end(conn, t, where, order, low, PG_BATCH)
            span = [] if low is None else [order >= low]
            span += [] if end is None else [order < end]
            if done is not None:
                done.outcomes += _with_outcomes(conn, select(t.c.id).where(*where, *span))
            n_done += conn.execute(delete(t).where(*where, *span)).rowcount
        if end is None:
            return n_done
        low = end


def prune(
    engine: Engine, key: bytes, before_us: int, progress: Callable[[int], None] | None = None
) -> Pruned:
    """Remove what is older than ``before_us``: records of links wholly before it (and
    records in no link) with their outcomes, those links, outcomes left by records removed
    otherwise, the outcome links with no outcome left, and the shadow's groups."""
    out = Pruned()
    ends = _ends(engine, before_us)
    if ends:
        _write_cuts(engine, key, ends, before_us)
    c = records.c
    covered = [and_(c.chain == chain, c.seq <= seq) for chain, (seq, _) in ends.items()]
    mine = or_(c.chain.is_(None), *covered) if covered else or_(c.chain.is_(None), false())
    where = [c.created_us < before_us, mine]
    out.records = _in_batches(engine, records, where, c.created_us, out)
    if progress is not None:
        progress(out.records)
    o = outcomes.c
    orphan = ~exists().where(records.c.id == o.record_id)
    out.outcomes += _in_batches(engine, outcomes, [o.record_us < before_us, orphan], o.record_us)
    with engine.begin() as conn:
        for chain, (seq, _) in ends.items():
            out.links += conn.execute(
                delete(links).where(links.c.chain == chain, links.c.seq <= seq)
            ).rowcount
    out.links += prune_outcome_links(engine, key, before_us)
    if shadow_table.exists(engine):  # a staged version's scores age with the records
        sh = shadow_table.shadow.c
        out.shadow_groups = _in_batches(
            engine, shadow_table.shadow, [sh.last_us < before_us], sh.last_us
        )
    return out


def prune_outcome_links(engine: Engine, key: bytes, before_us: int) -> int:
    """Remove each outcome chain's oldest links committed before ``before_us`` that no
    outcome names any more (outcomes leave with their records), behind a keyed cut."""
    ends = _ends(engine, before_us, outcome_links)
    if not ends:
        return 0
    o = outcomes.c
    # The links were read first: a link committed since, with its outcomes, is not in them.
    with engine.connect() as conn:
        first = {
            chain: conn.execute(select(func.min(o.seq)).where(o.chain == chain)).scalar()
            for chain in ends
        }
        empty: dict[int, tuple[int, bytes]] = {}
        lc = outcome_links.c
        for chain, (seq, _mac) in ends.items():
            left = first[chain]
            through = seq if left is None else min(seq, int(left) - 1)
            if through < 1:
                continue
            mac = conn.execute(select(lc.mac).where(lc.chain == chain, lc.seq == through)).scalar()
            if mac is not None:
                empty[chain] = (through, bytes(mac))
    if not empty:
        return 0
    _write_cuts(engine, outcome_key(key), empty, before_us, outcome_cuts)
    gone = 0
    with engine.begin() as conn:
        for chain, (seq, _) in empty.items():
            gone += conn.execute(
                delete(outcome_links).where(lc.chain == chain, lc.seq <= seq)
            ).rowcount
    return gone


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
    (:func:`app.audit.store.engine.make_engine`'s ``mover``)."""
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
