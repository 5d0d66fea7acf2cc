"""The chain over every table it covers, on real SQLite and PostgreSQL trails: an edit of
any one value of a record, a version row, an outcome, a link or a cut is named; a
deletion by its neighbours; rows of the wrong type are named, never a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.audit.lifecycle.retention import _write_cuts, prune
from app.audit.store.records import LOG_COLUMNS
from app.audit.store.tables import cuts
from app.audit.store.version_rows import KEY_COLUMNS
from tests.support.bundles import Bundles
from tests.support.tampering import KEY, fill, findings, other_value, serve_with_outcomes
from tests.support.trail import Trail


def _rid_of(trail: Trail, record_id: int) -> str:
    return trail.request_ids(f"where id = {record_id}")[0]


@pytest.mark.parametrize("column", [*LOG_COLUMNS, "chain", "seq"])
def test_an_edit_of_any_column_of_a_record_is_named(trail: Trail, column: str) -> None:
    fill(trail.url)
    assert findings(trail) == []
    target = int(trail.rows("select id from iabma_audit_log order by id")[7][0])
    rid = _rid_of(trail, target)
    where = f"id = {target}"
    (before,) = trail.rows(f"select {column} from iabma_audit_log where {where}")[0]
    trail.execute(
        f"update iabma_audit_log set {column} = "
        f"{other_value(trail, 'iabma_audit_log', column, where)} where {where}"
    )
    said = findings(trail)
    assert said, column
    named = [f for f in said if f"record id {target} " in f]
    assert named, (column, said)
    if column != "request_id":
        assert any(f"'{rid}'" in f for f in named), said
    # Put back, it verifies again: the finding was the edit's and nothing else's.
    trail.execute(f"update iabma_audit_log set {column} = {_literal(trail, before)} where {where}")
    assert findings(trail) == []


def _literal(trail: Trail, value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    assert isinstance(value, bytes | memoryview)
    return trail.blob(bytes(value))


@pytest.mark.parametrize("column", [*KEY_COLUMNS, "mac"])
def test_an_edit_of_a_version_row_is_named(trail: Trail, column: str) -> None:
    fill(trail.url)
    where = "id = (select min(id) from iabma_audit_versions)"
    if column == "classes":
        value = "'[1, 0]'"  # every served label would flip
    elif column == "mac":
        value = "null"
    else:
        value = other_value(trail, "iabma_audit_versions", column, where)
    trail.execute(f"update iabma_audit_versions set {column} = {value} where {where}")
    said = findings(trail)
    assert len(said) == 1 and said[0].startswith("altered: version row id "), said


def test_a_version_row_deleted_or_inserted_is_named(trail: Trail) -> None:
    fill(trail.url)
    trail.execute(
        "insert into iabma_audit_versions (model, version, route, task, input_mode, experts, "
        "classes) values ('demo', 'v1', 'predict', 'classification', 'off', '[\"a\"]', null)"
    )
    said = findings(trail)
    assert len(said) == 1 and "carries no MAC" in said[0], said
    trail.execute("delete from iabma_audit_versions where mac is null")
    trail.execute("delete from iabma_audit_versions")
    said = findings(trail)
    assert len(said) == 1 and said[0].startswith("deleted: version row id 1, which record id")


def test_a_deleted_record_is_named_by_its_neighbours_across_links(trail: Trail) -> None:
    fill(trail.url)
    ids = [int(r[0]) for r in trail.rows("select id from iabma_audit_log order by id")]
    # The first record of the second link: before it, the last of the first link.
    trail.execute(f"delete from iabma_audit_log where id = {ids[5]}")
    # The last record of the last link: nothing after it in its chain.
    trail.execute(f"delete from iabma_audit_log where id = {ids[14]}")
    said = findings(trail)
    assert len(said) == 2, said
    first, last = sorted(said)
    assert first.startswith("deleted: record 1 of 5 of chain 1 link 2"), first
    assert f"after record id {ids[4]} (request id 'g0-4')" in first, first
    assert f"before record id {ids[6]} (request id 'g1-1')" in first, first
    assert last.startswith("deleted: record 5 of 5 of chain 1 link 3"), last
    assert "'g2-3'" in last and "the newest of chain 1" in last, last
    assert "None" not in first + last


def test_a_whole_link_of_records_deleted_is_one_finding_with_neighbours(trail: Trail) -> None:
    fill(trail.url)
    trail.execute("delete from iabma_audit_log where seq = 2")
    (said,) = findings(trail)
    assert said.startswith("deleted: all 5 records of chain 1 link 2"), said
    assert "(request id 'g0-4')" in said and "(request id 'g2-0')" in said, said


def test_hostile_values_are_named_never_a_crash(trail: Trail) -> None:
    """A request id stored as text, an answer turned into text that is not UTF-8, a chain
    that is no number, a NULL where the server writes a value: each record is named."""
    fill(trail.url)
    ids = [int(r[0]) for r in trail.rows("select id from iabma_audit_log order by id")]
    if trail.sqlite_file is not None:
        trail.execute(f"update iabma_audit_log set request_id = 'g0-1' where id = {ids[1]}")
        trail.execute(
            f"update iabma_audit_log set answer = cast(x'ff00fe' as text) where id = {ids[2]}"
        )
        trail.execute(f"update iabma_audit_log set seq = 'two' where id = {ids[3]}")
        trail.execute(f"update iabma_audit_log set latency_us = 1.5 where id = {ids[6]}")
    else:
        trail.execute("alter table iabma_audit_log alter column answer drop not null")
        trail.execute("alter table iabma_audit_log alter column seq type text")
        text = "'g0-1'::text::bytea"
        trail.execute(f"update iabma_audit_log set request_id = {text} where id = {ids[1]}")
        trail.execute(f"update iabma_audit_log set answer = null where id = {ids[2]}")
        trail.execute(f"update iabma_audit_log set seq = 'two' where id = {ids[3]}")
        trail.execute(f"update iabma_audit_log set input_hash = null where id = {ids[6]}")
    said = findings(trail)
    for k in (2, 3, 6):
        assert any(f"record id {ids[k]} " in f for f in said), (k, said)
    if trail.sqlite_file is not None:
        assert any(f"record id {ids[1]} " in f and "stored as text" in f for f in said), said
    assert any("'two'" in f for f in said), said


def test_a_record_at_or_below_a_cut_is_an_insertion(trail: Trail) -> None:
    fill(trail.url)
    (first,) = trail.rows("select mac from iabma_audit_links where chain = 1 and seq = 1")[0]
    from app.audit.store.engine import make_engine

    engine = make_engine(trail.url, 10.0)
    try:
        # A cut through link 1, as retention writes it before the records go.
        _write_cuts(engine, KEY, {1: (1, bytes(first))}, 10**18)
        # Mid-pruning: the link's records still there, each one its link names: intact.
        assert findings(trail) == []
        # A cut only moves forward: an earlier end leaves it where it is.
        _write_cuts(engine, KEY, {1: (0, b"")}, 10**18)
        assert trail.rows(f"select through_seq from {cuts.name}")[0][0] == 1
    finally:
        engine.dispose()
    columns = ", ".join((*LOG_COLUMNS, "chain", "seq"))
    copied = columns.replace("request_id", trail.rid("forged"), 1)
    trail.execute(
        f"insert into iabma_audit_log ({columns}) select {copied} from iabma_audit_log "
        "where seq = 2 limit 1"
    )
    trail.execute("update iabma_audit_log set seq = 1 where request_id = " + trail.rid("forged"))
    said = findings(trail)
    assert len(said) == 1 and "at or below the chain's cut" in said[0], said
    assert "'forged'" in said[0]


@pytest.mark.parametrize("column", ["through_seq", "before_us", "mac_at", "mac"])
def test_an_edit_of_a_cut_is_named(trail: Trail, column: str, tmp_path: Path) -> None:
    fill(trail.url)
    from app.audit.store.engine import make_engine

    engine = make_engine(trail.url, 10.0)
    try:
        (mac,) = trail.rows("select mac from iabma_audit_links where chain = 1 and seq = 1")[0]
        _write_cuts(engine, KEY, {1: (1, bytes(mac))}, 10**18)
        trail.execute("delete from iabma_audit_log where seq = 1")
        trail.execute("delete from iabma_audit_links where seq = 1")
        assert findings(trail) == []
        value = other_value(trail, cuts.name, column, "chain = 1")
        trail.execute(f"update {cuts.name} set {column} = {value}")
        said = findings(trail)
        assert any("the cut of chain 1" in f for f in said), said
    finally:
        engine.dispose()


@pytest.mark.parametrize("column", ["created_us", "digests", "prev", "mac", "seq"])
def test_an_edit_of_a_link_is_named(trail: Trail, column: str) -> None:
    fill(trail.url)
    value = other_value(trail, "iabma_audit_links", column, "seq = 2")
    if column == "seq":
        value = "7"
    trail.execute(f"update iabma_audit_links set {column} = {value} where seq = 2")
    said = findings(trail)
    assert any("link 2" in f or "link 7" in f for f in said), said


OUTCOME_COLUMNS = (
    "model", "request_id", "row_index", "record_id", "record_us", "version", "received_us",
    "outcome", "experts", "weights", "scores", "poster", "chain", "seq",
)  # fmt: skip


@pytest.mark.parametrize("column", OUTCOME_COLUMNS)
def test_an_edit_of_any_column_of_an_outcome_is_named(
    bundles: Bundles, trail: Trail, tmp_path: Path, column: str
) -> None:
    serve_with_outcomes(bundles, trail, tmp_path, n=3)
    assert findings(trail) == []
    (target,) = trail.rows("select id from iabma_outcomes order by id")[3]
    where = f"id = {target}"
    value = other_value(trail, "iabma_outcomes", column, where)
    trail.execute(f"update iabma_outcomes set {column} = {value} where {where}")
    said = findings(trail)
    assert any(f"outcome id {target} " in f for f in said), (column, said)


def test_an_outcome_deleted_while_its_record_stays_is_named(
    bundles: Bundles, trail: Trail, tmp_path: Path
) -> None:
    serve_with_outcomes(bundles, trail, tmp_path, n=3)
    trail.execute("delete from iabma_outcomes where request_id = 'p1' and row_index = 1")
    (said,) = findings(trail)
    assert said.startswith("deleted: an outcome of record id") and "'p1'" in said, said
    # Inserted back as it was, by someone without the key: in no link.
    trail.execute(
        "insert into iabma_outcomes (model, request_id, row_index, record_id, record_us, "
        "version, received_us, outcome, experts, weights, scores) select model, request_id, "
        "1, record_id, record_us, version, received_us, outcome, experts, weights, scores "
        "from iabma_outcomes where request_id = 'p1' and row_index = 0"
    )
    said = findings(trail)
    assert any("inserted: outcome id" in f and "(in no link)" in f for f in said), said


def test_outcomes_leave_with_their_records_and_the_chain_still_verifies(
    bundles: Bundles, trail: Trail, tmp_path: Path
) -> None:
    serve_with_outcomes(bundles, trail, tmp_path, n=3)
    from app.audit.store.engine import make_engine

    engine = make_engine(trail.url, 10.0)
    try:
        done = prune(engine, KEY, 2**62)  # everything is older than that
    finally:
        engine.dispose()
    assert (done.records, done.outcomes) == (3, 6)
    assert trail.rows("select count(*) from iabma_outcome_links")[0][0] == 0
    assert findings(trail) == []
