"""The outcomes table under concurrent writers, on SQLite and PostgreSQL: each row takes
one outcome whoever races for it, repeats are told apart from conflicts, and a conflict
stores nothing of its batch."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from app.audit.read.scores import Served
from app.audit.write import outcome_rows
from app.audit.write.trail_db import AuditStore
from tests.support.trail import Trail

ROWS = 200


def record(rid: str) -> Served:
    return Served(1, rid, 0, "v1", "classification", ROWS, '["a", "b"]', "[0, 1]", b"", b"", b"")


def batch(outcome: str, rows: range) -> list[outcome_rows.NewOutcome]:
    w, s = np.zeros(2).tobytes(), np.zeros((3, 3)).tobytes()
    return [outcome_rows.NewOutcome("req", r, outcome, record("req"), w, s) for r in rows]


def test_racing_writers_store_each_row_once(trail: Trail) -> None:
    store = AuditStore(trail.url, 10.0)
    store.prepare()
    start = threading.Barrier(4)

    def send(k: int) -> outcome_rows.Stored:
        # Overlapping halves: rows 0-99 are raced by every writer, the rest by two each.
        mine = range(0, ROWS) if k % 2 else range(0, ROWS // 2)
        start.wait()
        return outcome_rows.store(store.engine, "demo", batch("1", mine), 123)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(send, range(4)))
    store.close()
    accepted = sum(len(r.accepted) for r in results)
    duplicates = sum(len(r.duplicates) for r in results)
    assert accepted == ROWS
    assert duplicates == 2 * ROWS + 2 * (ROWS // 2) - ROWS
    assert not any(r.conflicts for r in results)
    assert trail.rows("select count(*), count(distinct row_index) from iabma_outcomes") == [
        (ROWS, ROWS)
    ]


def test_a_conflict_stores_nothing_of_its_batch(trail: Trail) -> None:
    store = AuditStore(trail.url, 10.0)
    store.prepare()
    first = outcome_rows.store(store.engine, "demo", batch("1", range(0, 10)), 1)
    assert first.accepted == list(range(10))
    # Rows 5-14 with another outcome: 5-9 conflict, so 10-14 are not stored either.
    clash = outcome_rows.store(store.engine, "demo", batch("0", range(5, 15)), 2)
    assert [k for k, _ in clash.conflicts] == list(range(5)) and clash.conflicts[0][1] == "1"
    assert trail.rows("select count(*) from iabma_outcomes") == [(10,)]
    # Another model's rows are its own.
    other = outcome_rows.store(store.engine, "other", batch("0", range(0, 10)), 3)
    assert len(other.accepted) == 10
    store.close()
