"""One record's fault fails its own request alone: a row that cannot be built, a row the
database refuses, a request id its model's records hold already (in the trail, or earlier
in the same group), on SQLite and PostgreSQL; and the input orjson cannot write as sent."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from typing import Any

import orjson
import psycopg
import pytest

from app.audit.check.verify import verify
from app.audit.store.chain import chain_key
from app.audit.store.records import AuditRecord, canonical_json
from app.audit.write.apart import Apart, DuplicateId
from app.audit.write.trail_db import AuditStore
from app.audit.write.writer import AuditWriter
from app.errors import DuplicateRequest, InternalError, status_of
from app.metrics import ServiceMetrics
from tests.support.bundles import TEST_HASH_KEY
from tests.support.services import PG_DSN, make_record, schema_of, wait_for
from tests.support.trail import Trail

KEY = chain_key(TEST_HASH_KEY.encode())


def test_an_integer_beyond_64_bits_is_kept_as_the_number_read() -> None:
    # Python's parser keeps 100000000000000000000 as an int, orjson's reads a float: the
    # record is the same whichever parsed the body, and orjson can write both.
    as_int = [{"x": 10**20, "y": -(10**20), "c": 10**400, "n": None, "z": 2**64 - 1}]
    as_float = [{"x": 1e20, "y": -1e20, "c": "1" + "0" * 400, "n": None, "z": 2**64 - 1}]
    assert canonical_json(as_int) == canonical_json(as_float)
    assert json.loads(canonical_json(as_int)) == as_float
    strict = json.loads(b'[{"z": 18446744073709551615, "y": -100000000000000000000}]')
    fast = orjson.loads(b'[{"z": 18446744073709551615, "y": -100000000000000000000}]')
    assert canonical_json(strict) == canonical_json(fast)


def _overflowing(rid: str) -> AuditRecord:
    """A record whose latency no integer column holds: SQLite's driver refuses it, and
    PostgreSQL's column (a data error)."""
    return dataclasses.replace(make_record(rid), latency_ms=1e16)


def test_the_trail_refuses_a_taken_id_per_model_and_the_rest_of_the_group_lands(
    trail: Trail,
) -> None:
    store = AuditStore(trail.url, 10.0, KEY)
    store.prepare()
    try:
        assert store.insert([make_record("taken"), make_record("mine")]) == {}
        group = [
            make_record("a"),
            make_record("taken"),  # in the trail already
            make_record("b"),
            make_record("a"),  # earlier in this group
            dataclasses.replace(make_record("taken"), model="other"),  # another model's
            _overflowing("poison"),
            make_record("c"),
        ]
        refused = store.insert(group)
        assert sorted(refused) == [1, 3, 5]
        assert isinstance(refused[1], DuplicateId) and isinstance(refused[3], DuplicateId)
        assert not isinstance(refused[5], DuplicateId)
        # Alone in its group, a refused row is the group's failure (a database fault looks
        # so too); a duplicate alone is still only refused.
        with pytest.raises(Exception, match="(?i)int|range"):
            store.insert([_overflowing("poison")])
        assert list(store.insert([make_record("mine")])) == [0]
        report = verify(store.engine, KEY)
    finally:
        store.close()
    assert report.findings == []
    assert sorted(trail.request_ids()) == ["a", "b", "c", "mine", "taken", "taken"]
    models = trail.rows(
        "select m.model from iabma_audit_log r join iabma_audit_models m on m.id = r.model_id "
        f"where r.request_id = {trail.rid('taken')} order by r.id"
    )
    assert [m for (m,) in models] == ["demo", "other"]


def test_each_request_gets_its_own_answer_from_one_group(trail: Trail) -> None:
    """Records queued together commit together; those refused get their own fault and the
    others their commit, counted under their version."""
    waiting = [0]
    records = [
        make_record("g-1"),
        dataclasses.replace(make_record("g-2"), instances=[{"x": {1, 2}}]),  # a set: no JSON
        make_record("g-3"),
        make_record("g-1"),
        _overflowing("g-5"),
        make_record("g-6"),
        make_record("g-7"),
    ]

    async def main() -> tuple[list[Any], dict[Any, float], int]:
        store = AuditStore(trail.url, 10.0, KEY)
        store.prepare()
        metrics = ServiceMetrics()
        writer = AuditWriter(
            store, metrics, lambda: ("demo", "v1"), 16, 10.0, 5.0, lambda: waiting[0]
        )
        writer.start()
        await writer.submit(make_record("g-7"))  # in the trail before the group
        waiting[0] = len(records)
        futures = []
        for rec in records:  # the group waits for every record the test still holds
            waiting[0] -= 1
            futures.append(writer.submit(rec))
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
        await writer.close()
        store.close()
        links = trail.count()
        return outcomes, dict(metrics.audit_records.pending), links

    outcomes, counted, written = asyncio.run(main())
    ok, build, _, dup, unwritable, _, dup_in_trail = outcomes
    assert ok is None and outcomes[2] is None and outcomes[5] is None
    assert isinstance(build, InternalError) and "could not be built" in str(build)
    assert isinstance(unwritable, InternalError) and "refused by the database" in str(unwritable)
    for dup_ in (dup, dup_in_trail):
        assert isinstance(dup_, DuplicateRequest) and status_of(dup_) == 409
        assert dup_.fault.field == "header X-Request-ID"
    assert "request id 'g-1' already names an audited prediction of model 'demo'" in str(dup)
    assert written == 4 and sorted(trail.request_ids()) == ["g-1", "g-3", "g-6", "g-7"]
    assert counted == {("demo", "v1"): 4}
    # The group went on in halves around the refused record, in one chain: no new
    # connection was needed.
    links = trail.rows("select chain, length(digests) / 8 from iabma_audit_links order by seq")
    assert len({chain for chain, _ in links}) == 1 and sum(n for _, n in links) == 4


def test_two_replicas_writing_the_same_ids_in_opposite_order_cannot_deadlock(
    pg_url: str,
) -> None:
    """Replica A's group holds ids a1 then a2, B's a2 then a1. Inserted in that order, each
    would take its first id and wait for the other's, until PostgreSQL's deadlock detector
    failed one group whole (a second later: 503s for every request in it). Each group
    goes in key order, so the later one waits for the first, then finds the ids taken.

    A third transaction holds z1 and z2 so that both groups stand inside their statements
    at once, whatever the scheduling."""
    trail = Trail(pg_url, None)
    stores = [AuditStore(pg_url, 10.0, KEY) for _ in range(3)]
    for store in stores:
        store.prepare()
    stores[2].insert([make_record("warm")])
    groups = [["a1", "z1", "a2"], ["a2", "z2", "a1"]]
    copy = (
        "insert into iabma_audit_log (request_id, created_us, version_id, n_instances, top, "
        "latency_us, answer, model_id) select {}, created_us, version_id, n_instances, top, "
        f"latency_us, answer, model_id from iabma_audit_log where request_id = {trail.rid('warm')}"
    )
    schema = schema_of(pg_url)
    pids = [s._writer._ready().dbapi_connection.info.backend_pid for s in stores[:2]]
    waiting = (
        "select count(*) from pg_stat_activity where wait_event_type = 'Lock' "
        f"and pid in ({pids[0]}, {pids[1]})"
    )
    outcomes: list[Any] = [None, None]

    def write(k: int) -> None:
        try:
            outcomes[k] = stores[k].insert([make_record(rid) for rid in groups[k]])
        except Exception as exc:
            outcomes[k] = exc

    try:
        with psycopg.connect(PG_DSN) as blocker, psycopg.connect(PG_DSN, autocommit=True) as watch:
            blocker.execute(f'set search_path to "{schema}"')
            for rid in ("z1", "z2"):
                blocker.execute(copy.format(trail.rid(rid)))
            threads = [threading.Thread(target=write, args=(k,)) for k in (0, 1)]
            for t in threads:
                t.start()
            wait_for(
                lambda: watch.execute(waiting).fetchone() == (2,),
                10.0,
                "both groups to wait inside their statements",
            )
            blocker.rollback()
            for t in threads:
                t.join(30)
    finally:
        for store in stores:
            store.close()
    assert all(isinstance(o, dict) for o in outcomes), outcomes
    refused = [set(groups[k][j] for j in o) for k, o in enumerate(outcomes)]
    assert sorted(map(sorted, refused)) == [[], ["a1", "a2"]]
    assert all(isinstance(e, DuplicateId) for o in outcomes for e in o.values())
    assert sorted(trail.request_ids()) == ["a1", "a2", "warm", "z1", "z2"]


class IntegrityError(Exception):
    """Named as sqlite3's and psycopg's are: a row the database refused."""


@pytest.mark.parametrize("bad_at", [[17], [5, 6, 30]])
def test_halving_finds_the_refused_rows_in_few_attempts(bad_at: list[int]) -> None:
    rows = [(f"r{k:02d}".encode(), 1) for k in range(32)]
    bad = {rows[k] for k in bad_at}
    attempts: list[int] = []
    commits: list[Any] = []

    def write(part: Any) -> None:
        attempts.append(len(part))
        if bad & set(part):
            raise IntegrityError("refused")
        commits.append(part)

    refused = Apart((0, 1), ordered=False).write(rows, write, lambda keys: set())
    assert sorted(refused) == bad_at
    assert all(isinstance(e, IntegrityError) for e in refused.values())
    assert sorted(r for part in commits for r in part) == sorted(set(rows) - bad)
    if len(bad_at) == 1:  # the whole, then at each of 5 levels a half that fails, one that lands
        assert (len(attempts), len(commits)) == (11, 5)
    else:
        assert len(attempts) <= 3 * 11


def test_taken_and_repeated_ids_are_refused_and_the_rest_goes_in_key_order() -> None:
    rows = [(b"c", 1), (b"a", 1), (b"b", 1), (b"a", 1), (b"a", 2), (b"d", 1)]
    held = {(b"d", 1)}
    parts: list[Any] = []

    def write(part: Any) -> None:
        parts.append(list(part))
        if held & set(part):
            raise IntegrityError("duplicate key")

    def taken(keys: list[tuple[bytes, int]]) -> set[tuple[bytes, int]]:
        return held & set(keys)

    refused = Apart((0, 1), ordered=True).write(rows, write, taken)
    assert sorted(refused) == [3, 5] and all(isinstance(e, DuplicateId) for e in refused.values())
    assert parts == [
        [(b"a", 1), (b"a", 2), (b"b", 1), (b"c", 1), (b"d", 1)],
        [(b"a", 1), (b"a", 2), (b"b", 1), (b"c", 1)],
    ]


def test_a_group_nothing_of_which_could_be_written_fails_whole() -> None:
    def refuse(part: Any) -> None:
        raise IntegrityError("every row refused")

    rows = [(b"a", 1), (b"b", 1), (b"a", 1)]
    with pytest.raises(IntegrityError, match="every row"):
        Apart((0, 1), ordered=False).write(rows, refuse, lambda keys: set())

    def outage(part: Any) -> None:
        raise ConnectionError("server closed the connection")

    with pytest.raises(ConnectionError):  # not a row's fault: no halving
        Apart((0, 1), ordered=False).write(rows, outage, lambda keys: set())
