"""The trail's tables across releases: a trail of schema 1 (before compact records) or 2
(before a request id named one record, sealed versions and chained outcomes) is refused
at start-up, naming ``iabma audit-migrate``, which keeps every record and its id, and
brings it to schema 3."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from app.audit.store.chain import chain_key
from app.audit.store.engine import make_engine
from app.audit.store.packing import unpack_request_id
from app.audit.store.records import LOG_COLUMNS
from app.audit.store.tables import SchemaMismatch
from app.audit.write.connection import WriterConnection
from app.audit.write.trail_db import AuditStore
from app.cli.main import main
from tests.support.bundles import TEST_HASH_KEY, Bundles
from tests.support.services import make_record
from tests.support.tampering import serve_with_outcomes
from tests.support.trail import Trail

V1 = """create table iabma_audit_log (
    id {id} primary key, request_id varchar(128) not null, created_us bigint not null,
    model varchar(128) not null, version varchar(128) not null, route varchar(32) not null,
    task varchar(16) not null, n_instances integer not null, top_expert varchar(128) not null,
    latency_ms double precision not null, experts text not null, classes text,
    weights {b} not null, prediction {b} not null, uncertainty {b} not null,
    weight_sums {b} not null, top_counts {b} not null, input_mode varchar(8) not null,
    input_hash varchar(64), input_json text, expert_outputs {b})"""
SERVER_ID = "0190a1b2c3d4e5f60718293a4b5c6d7e"
W1 = np.array([[0.25, 0.70, 0.05]])
P1 = np.array([[0.4, 0.6]])
E1 = np.array([[[0.3, 0.7], [0.45, 0.55], [0.9, 0.1]]])
U1 = np.array([[0.67, 0.6, 0.07, 0.5]])
W2 = np.array([[0.5, 0.25, 0.25], [0.1, 0.2, 0.7]])


def schema_1(trail: Trail) -> None:
    """Two records as the previous release wrote them, outcomes pointing at ids 7 and 9."""
    pg = trail.sqlite_file is None
    if trail.sqlite_file is not None:
        trail.sqlite_file.parent.mkdir(parents=True, exist_ok=True)
    trail.execute(V1.format(id="bigserial" if pg else "integer", b="bytea" if pg else "blob"))
    trail.execute("create index ix_iabma_audit_log_time on iabma_audit_log (model, created_us, id)")

    def blob(a: np.ndarray) -> str:
        return trail.blob(np.ascontiguousarray(a, "<f8").tobytes())

    experts = '\'["a", "b", "c"]\''
    for rid, (id_, w, outputs) in {
        "old-1": (7, W1, blob(E1)),
        SERVER_ID: (9, W2, "null"),
    }.items():
        n = len(w)
        trail.execute(
            "insert into iabma_audit_log values ("
            f"{id_}, '{rid}', 1700000000000000, 'demo', 'v1', 'predict', 'classification', {n},"
            f" 'b', 1.5, {experts}, '[0, 1]', {blob(w)}, {blob(np.tile(P1, (n, 1)))},"
            f" {blob(np.tile(U1, (n, 1)))}, {blob(w.sum(axis=0))}, {blob(w.sum(axis=0))},"
            f" 'hash', '{'ab' * 32}', null, {outputs})"
        )


def test_a_schema_1_trail_is_refused_then_migrated_whole(
    trail: Trail, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    schema_1(trail)
    store = AuditStore(trail.url, 10.0)
    with pytest.raises(SchemaMismatch, match="has schema 1.*iabma audit-migrate --audit-url"):
        store.prepare()
    store.close()

    assert main(["audit-migrate", "--audit-url", trail.url]) == 0
    assert "2 of 2 records copied" in capsys.readouterr().out
    assert sorted(r[0] for r in trail.rows("select id from iabma_audit_log")) == [7, 9]
    assert trail.rows("select count(*) from iabma_audit_log_v1")[0][0] == 2

    store = AuditStore(trail.url, 10.0, chain_key(TEST_HASH_KEY.encode()))
    store.prepare()  # schema 3 now: starts
    old, server = store.find("old-1"), store.find(SERVER_ID)
    store.insert([dataclasses.replace(make_record("after"), experts=("a", "b"))])
    store.close()
    assert old is not None and server is not None
    assert old["input"] == {"mode": "hash", "hmac_sha256": "ab" * 32}
    assert (old["top_expert"], old["latency_ms"], old["version"]) == ("b", 1.5, "v1")
    row = old["predictions"][0]
    assert list(row["weights"].values()) == pytest.approx(W1[0].tolist(), abs=1e-7)
    assert row["experts"]["c"]["probabilities"]["1"] == pytest.approx(0.1, abs=1e-7)
    assert row["uncertainty"]["total"] == pytest.approx(0.67, abs=1e-7)
    assert [list(r["weights"].values()) for r in server["predictions"]] == [
        pytest.approx(w, abs=1e-7) for w in W2.tolist()
    ]
    assert "experts" not in server["predictions"][0], "it had no experts' outputs"
    assert max(r[0] for r in trail.rows("select id from iabma_audit_log")) > 9
    assert main(["audit-verify", "--audit-url", trail.url]) == 0, capsys.readouterr().out
    assert main(["audit-migrate", "--audit-url", trail.url]) == 2
    assert "has schema 3 already" in capsys.readouterr().err


def schema_2_unchained(trail: Trail, bundles: Bundles, tmp_path: Path) -> None:
    """A trail as schema 2 left it: predictions and outcomes written by the app, then
    what schema 3 added taken away (no version MACs, no outcome chains or posters)."""
    serve_with_outcomes(bundles, trail, tmp_path, n=3)
    for sql in (
        "drop index ix_iabma_outcomes_link",
        "drop index ix_iabma_outcomes_record",
        "alter table iabma_outcomes drop column poster",
        "alter table iabma_outcomes drop column chain",
        "alter table iabma_outcomes drop column seq",
        "alter table iabma_audit_versions drop column mac",
        "alter table iabma_audit_chains drop column kind",
        "drop table iabma_outcome_links",
        "drop table iabma_outcome_cuts",
        "update iabma_audit_meta set value = '2' where key = 'schema'",
    ):
        trail.execute(sql)


def test_a_schema_2_trail_is_refused_then_upgraded_in_place(
    bundles: Bundles,
    trail: Trail,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    schema_2_unchained(trail, bundles, tmp_path)
    store = AuditStore(trail.url, 10.0)
    with pytest.raises(SchemaMismatch, match="has schema 2. Run `iabma audit-migrate"):
        store.prepare()
    store.close()
    assert main(["audit-migrate", "--audit-url", trail.url]) == 0
    out = capsys.readouterr().out
    assert "schema 3: 1 version rows sealed and 6 outcomes chained" in out, out
    assert main(["audit-verify", "--audit-url", trail.url]) == 0, capsys.readouterr().out
    # Running it again finds nothing to do; the server starts and writes on.
    assert main(["audit-migrate", "--audit-url", trail.url]) == 2
    assert "has schema 3 already" in capsys.readouterr().err
    serve_with_outcomes(bundles, trail, tmp_path / "again", n=1, prefix="later")
    assert main(["audit-verify", "--audit-url", trail.url]) == 0, capsys.readouterr().out
    # What the upgrade sealed is held as any other row: an edit of it is named.
    trail.execute("update iabma_audit_versions set classes = '[1, 0]'")
    trail.execute("update iabma_outcomes set outcome = outcome || ' ' where id = 1")
    assert main(["audit-verify", "--audit-url", trail.url]) == 1
    out = capsys.readouterr().out
    assert "altered: version row id" in out and "edited: outcome id 1 " in out, out


def schema_2_unkeyed(trail: Trail, key: bytes) -> None:
    """A trail as the previous release wrote it: no model ids, the request id's index not
    unique, and a request id named by several records: twice for one model (the later
    record kept apart by the upgrade), once each for two models (both keep their key)."""
    store = AuditStore(trail.url, 10.0, key)
    store.prepare()
    store.close()
    drop_index = "drop index ux_iabma_audit_log_request"
    for sql in (
        drop_index,
        "alter table iabma_audit_log drop column model_id",
        "drop table iabma_audit_models",
        "create index ix_iabma_audit_log_request_id on iabma_audit_log (request_id)",
        "update iabma_audit_meta set value = '2' where key = 'schema'",
    ):
        trail.execute(sql)
    engine = make_engine(trail.url, 10.0)
    writer = WriterConnection(engine, LOG_COLUMNS, 10.0, key, model_ids=False)
    try:
        for group in (["dup", "one", "shared"], ["dup", "dup"]):
            writer.insert([make_record(rid).log_values() for rid in group])
        other = dataclasses.replace(make_record("shared"), model="other")
        writer.insert([other.log_values()])
    finally:
        writer.close()
        engine.dispose()


def test_a_schema_2_trail_is_refused_then_upgraded_keeping_every_record(
    trail: Trail, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    key = chain_key(TEST_HASH_KEY.encode())
    schema_2_unkeyed(trail, key)
    store = AuditStore(trail.url, 10.0, key)
    with pytest.raises(SchemaMismatch, match=r"has schema 2\. Run `iabma audit-migrate"):
        store.prepare()
    store.close()

    assert main(["audit-migrate", "--audit-url", trail.url]) == 0
    out = capsys.readouterr().out
    assert "schema 3: 0 version rows sealed and 0 outcomes chained" in out, out
    assert "2 records share their request id with an earlier record of their model" in out
    assert trail.rows("select value from iabma_audit_meta where key = 'schema'") == [("3",)]
    # The first record of each id and model keeps the key; nothing was lost or changed.
    keyed = trail.rows(
        "select r.request_id, m.model from iabma_audit_log r join iabma_audit_models m "
        "on m.id = r.model_id order by r.id"
    )
    assert [(unpack_request_id(bytes(r)), m) for r, m in keyed] == [
        ("dup", "demo"), ("one", "demo"), ("shared", "demo"), ("shared", "other")
    ]  # fmt: skip
    assert trail.count() == 6
    assert main(["audit-verify", "--audit-url", trail.url]) == 0, capsys.readouterr().out

    store = AuditStore(trail.url, 10.0, key)
    store.prepare()  # schema 3 now: starts
    try:
        refused = store.insert([make_record(rid) for rid in ("dup", "one", "new")])
        assert sorted(refused) == [0, 1]
        assert store.insert([dataclasses.replace(make_record("new"), model="other")]) == {}
    finally:
        store.close()
    assert trail.count() == 8
    assert main(["audit-migrate", "--audit-url", trail.url]) == 2
    assert "has schema 3 already" in capsys.readouterr().err
