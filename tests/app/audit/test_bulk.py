"""A chained group on SQLite: one statement for its records and its link, and what it
writes is what a verifier reads back."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from app.audit.bulk import ROWS_PER_STATEMENT, VIEW, BulkInsert
from app.audit.chain import chain_key
from app.audit.store import AuditStore
from app.audit.verify import verify
from tests.support.bundles import TEST_HASH_KEY
from tests.support.services import make_record
from tests.support.trail import Trail

KEY = chain_key(TEST_HASH_KEY.encode())


def _statements(store: AuditStore, sizes: list[int]) -> list[list[str]]:
    """The statements each group of ``sizes`` records ran. SQLite traces a statement again
    for each row its triggers take, so a run of the same text is one statement."""
    store.insert([make_record("first")])  # opens the writer's connection
    dbapi = store._writer._conn.dbapi_connection
    ran: list[str] = []
    dbapi.set_trace_callback(lambda sql: ran.append(sql))
    groups = []
    try:
        for k, size in enumerate(sizes):
            ran.clear()
            store.insert([make_record(f"g{k}-{j}") for j in range(size)])
            groups.append([sql for sql, _ in itertools.groupby(ran)])
    finally:
        dbapi.set_trace_callback(None)
    return groups


@pytest.mark.parametrize("key", [KEY, None], ids=["chain", "no-chain"])
def test_a_group_is_one_statement_with_or_without_its_link(
    tmp_path: Path, key: bytes | None
) -> None:
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}", 10.0, key)
    store.prepare()
    try:
        one, eight, large = _statements(store, [1, 8, ROWS_PER_STATEMENT + 1])
    finally:
        store.close()
    target = VIEW if key else "iabma_audit_log"
    for group in (one, eight):
        assert len(group) == 1 and group[0].startswith(f"INSERT INTO {target} ")
    # Past one statement's rows, a transaction holds the group's statements together.
    assert [s.split(" (")[0] for s in large] == [
        "BEGIN",
        f"INSERT INTO {target}",
        f"INSERT INTO {target}",
        "COMMIT",
    ]


def test_numbered_parameters_run_on_across_the_rows() -> None:
    bulk = BulkInsert("t", ["a", "b"], "$", first=4)
    assert bulk.sql(2) == "INSERT INTO t (a, b) VALUES ($4, $5), ($6, $7)"
    assert (
        BulkInsert("t", ["a", "b"], "%s").sql(2) == "INSERT INTO t (a, b) VALUES (%s, %s), (%s, %s)"
    )


# The database refuses a record inside the group's statement: a trigger per database.
_REFUSE = {
    "sqlite": [
        "CREATE TRIGGER refuse BEFORE INSERT ON iabma_audit_log WHEN NEW.latency_us = 3 "
        "BEGIN SELECT RAISE(ABORT, 'refused'); END"
    ],
    "postgres": [
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.latency_us = 3 THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$",
        "CREATE TRIGGER refuse BEFORE INSERT ON iabma_audit_log "
        "FOR EACH ROW EXECUTE FUNCTION refuse()",
    ],
}


def test_what_the_statement_writes_verifies_and_a_failed_one_writes_nothing(
    trail: Trail,
) -> None:
    store = AuditStore(trail.url, 10.0, KEY)
    store.prepare()
    try:
        for size in (1, 3, ROWS_PER_STATEMENT + 2):
            store.insert([make_record(f"n{size}-{j}") for j in range(size)])
        for sql in _REFUSE["sqlite" if trail.sqlite_file else "postgres"]:
            trail.execute(sql)
        for size in (3, ROWS_PER_STATEMENT + 2):  # one statement, and past its rows
            bad = [make_record(f"bad{size}-{j}") for j in range(size)]
            bad[-1].latency_ms = 0.003
            with pytest.raises(Exception, match="refused"):
                store.insert(bad)
        trail.execute("DROP TRIGGER refuse" + ("" if trail.sqlite_file else " ON iabma_audit_log"))
        store.insert([make_record("after")])  # a new connection: its own chain
        report = verify(store.engine, KEY)
    finally:
        store.close()
    assert report.findings == []
    assert trail.count() == 1 + 3 + ROWS_PER_STATEMENT + 2 + 1
    # The failed groups left neither their records nor their links; after each failure
    # the writer's next connection started a chain of its own.
    links = trail.rows(
        "SELECT chain, seq, length(digests) / 8 FROM iabma_audit_links ORDER BY chain, seq"
    )
    first, last = links[0][0], links[-1][0]
    assert [tuple(r) for r in links] == [
        (first, 1, 1), (first, 2, 3), (first, 3, ROWS_PER_STATEMENT + 2), (last, 1, 1)
    ]  # fmt: skip
    assert last > first
