"""A chained group on SQLite: one statement for its records and its link, and what it
writes is what a verifier reads back."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from app.audit.check.verify import verify
from app.audit.store.chain import chain_key
from app.audit.write.bulk import ROWS_PER_STATEMENT, VIEW, BulkInsert
from app.audit.write.trail_db import AuditStore
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


# The database refuses a record inside the group's statement: a trigger per database, as
# a constraint refuses a row (SQLite's RAISE is a constraint failure; PostgreSQL's is given
# the check-violation state).
_REFUSE = {
    "sqlite": [
        "CREATE TRIGGER refuse BEFORE INSERT ON iabma_audit_log WHEN NEW.latency_us = 3 "
        "BEGIN SELECT RAISE(ABORT, 'refused'); END"
    ],
    "postgres": [
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.latency_us = 3 THEN RAISE EXCEPTION 'refused' USING ERRCODE = 'check_violation';"
        " END IF; RETURN NEW; END $$",
        "CREATE TRIGGER refuse BEFORE INSERT ON iabma_audit_log "
        "FOR EACH ROW EXECUTE FUNCTION refuse()",
    ],
}


def test_a_refused_record_fails_alone_and_what_is_written_verifies(trail: Trail) -> None:
    """Past one statement's rows too: the group's first statement is rolled back with the
    refused second one, so the retry writes each other record once (a record committed
    twice would come back as a duplicate), and the chain goes on in the same connection."""
    store = AuditStore(trail.url, 10.0, KEY)
    store.prepare()
    try:
        for size in (1, 3, ROWS_PER_STATEMENT + 2):
            assert store.insert([make_record(f"n{size}-{j}") for j in range(size)]) == {}
        for sql in _REFUSE["sqlite" if trail.sqlite_file else "postgres"]:
            trail.execute(sql)
        for size in (3, ROWS_PER_STATEMENT + 2):  # one statement, and past its rows
            bad = [make_record(f"bad{size}-{j}") for j in range(size)]
            bad[-1].latency_ms = 0.003
            refused = store.insert(bad)
            assert list(refused) == [size - 1] and "refused" in str(refused[size - 1])
        alone = make_record("alone")
        alone.latency_ms = 0.003
        # Nothing of the group could be written: the database's fault, the group's failure.
        with pytest.raises(Exception, match="refused"):
            store.insert([alone])
        trail.execute("DROP TRIGGER refuse" + ("" if trail.sqlite_file else " ON iabma_audit_log"))
        store.insert([make_record("after")])  # a new connection: its own chain
        report = verify(store.engine, KEY)
    finally:
        store.close()
    assert report.findings == []
    written = 1 + 3 + ROWS_PER_STATEMENT + 2 + 2 + ROWS_PER_STATEMENT + 1 + 1
    assert trail.count() == written
    assert len(set(trail.request_ids())) == written
    # The refused records left neither themselves nor a link; the groups they were in
    # went on in halves, each its own link, in the same chain until the group that failed
    # whole closed the connection.
    links = trail.rows(
        "SELECT chain, seq, length(digests) / 8 FROM iabma_audit_links ORDER BY chain, seq"
    )
    chains = [r[0] for r in links]
    assert chains[:4] == [chains[0]] * 4 and chains[-1] > chains[0]
    assert sum(r[2] for r in links) == written
    assert [r[2] for r in links[:3]] == [1, 3, ROWS_PER_STATEMENT + 2]
    assert links[-1][1:] == (1, 1)
