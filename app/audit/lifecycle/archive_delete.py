"""``iabma audit-archive --delete``: removing what :mod:`app.audit.lifecycle.archive` wrote and
checked, in batches, each request id noted for the 410 of ``GET /weights`` and ``POST
/feedback``, each record's outcomes with it (those the archive wrote: an outcome posted
since stays, and ``iabma refit`` leaves it out).

No record crosses into Python: each batch, oldest first, is picked, noted and deleted by
the database (fetched, noted and deleted one by one, 500,000 records took 3 s on SQLite and
50 s on PostgreSQL).
"""

from __future__ import annotations

from sqlalchemy import Engine, delete, text

from app.audit.lifecycle.retention import DAY_US, _write_cuts, paced, prune_outcome_links, range_end
from app.audit.store.records import now_us
from app.audit.store.tables import archived, links, outcomes, records


def covered_sql(ends: dict[int, tuple[int, bytes]]) -> str:
    """The records of each chain's links through its end (ints from the trail itself)."""
    each = [f"(chain = {int(ch)} AND seq <= {int(seq)})" for ch, (seq, _) in ends.items()]
    return "(" + " OR ".join(each) + ")"


# Records a transaction of --delete: on SQLite a commit of the server waits for one, 3-4
# ms; on PostgreSQL a delete takes no lock that an insert waits on, and larger
# transactions cost fewer round trips and commits.
DELETE_BATCH = {"sqlite": 2_000, "postgresql": 50_000}
# The day of a record's file, as day_of() names it, in each database's SQL.
_DAY_SQL = {
    "sqlite": f"date((created_us / {DAY_US}) * 86400, 'unixepoch')",
    "postgresql": f"to_char(date '1970-01-01' + (created_us / {DAY_US})::int, 'YYYY-MM-DD')",
}


def delete_archived(
    engine: Engine,
    key: bytes,
    before_us: int,
    ends: dict[int, tuple[int, bytes]],
    outcomes_through: int = 0,
) -> int:
    """Remove what :func:`write` archived: the cuts first, then, batch by batch, a note of
    each request id (for the 410), the records' outcomes (those up to the id
    ``outcomes_through``, the archive's) and the records; then their links, and the
    outcome links no outcome names any more."""
    if not ends:
        return 0
    _write_cuts(engine, key, ends, before_us)
    dialect = engine.dialect.name
    batch, day = DELETE_BATCH.get(dialect, 5_000), _DAY_SQL[dialect]
    log, notes = records.name, archived.name
    theirs = f"DELETE FROM {outcomes.name} WHERE id <= {int(outcomes_through)} AND record_id IN"
    where = f"created_us < {int(before_us)} AND {covered_sql(ends)}"
    done = 0
    if dialect == "postgresql":
        # A range of the time index at a time (app.audit.lifecycle.retention._in_batches says why),
        # in one statement: the notes are exactly the records deleted.
        low, c = None, records.c
        while True:
            with engine.begin() as conn:
                end = range_end(conn, records, [text(where)], c.created_us, low, batch)
                span = "" if low is None else f" AND created_us >= {int(low)}"
                span += "" if end is None else f" AND created_us < {int(end)}"
                done += conn.exec_driver_sql(
                    f"WITH gone AS (DELETE FROM {log} WHERE {where}{span} "
                    "RETURNING id, request_id, created_us), "
                    f"theirs AS ({theirs} (SELECT id FROM gone)) "
                    f"INSERT INTO {notes} (request_id, day) SELECT request_id, {day} FROM gone"
                ).rowcount
            if end is None:
                break
            low = end
    else:
        pick = f"SELECT id FROM {log} WHERE {where} ORDER BY created_us LIMIT {batch}"
        while True:
            with paced(engine) as conn:  # then the server's turn at the lock
                # The same pick twice in one transaction, which holds the write lock from
                # the first statement on: the same records.
                conn.exec_driver_sql(
                    f"INSERT INTO {notes} (request_id, day) SELECT request_id, {day} "
                    f"FROM {log} WHERE id IN ({pick})"
                )
                conn.exec_driver_sql(f"{theirs} ({pick})")
                n = conn.exec_driver_sql(f"DELETE FROM {log} WHERE id IN ({pick})").rowcount
            done += n
            if n < batch:
                break
    with engine.begin() as conn:
        for chain, (seq, _) in ends.items():
            conn.execute(delete(links).where(links.c.chain == chain, links.c.seq <= seq))
    prune_outcome_links(engine, key, now_us())
    return done
