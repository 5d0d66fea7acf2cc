"""``iabma audit-verify`` on real SQLite and PostgreSQL trails: intact, then with one
record edited, one deleted and one inserted in the database, each named; exit 1."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from app.audit.chain import chain_key
from app.audit.records import LOG_COLUMNS, now_us
from app.audit.store import AuditStore
from app.cli.main import main
from tests.support.bundles import TEST_HASH_KEY, Bundles, make_settings
from tests.support.harness import AsgiHarness
from tests.support.services import make_record
from tests.support.trail import Trail


def fill(url: str) -> None:
    """Three group commits of five records, as the writer makes them."""
    rng = np.random.default_rng(7)
    store = AuditStore(url, 10, chain_key(TEST_HASH_KEY.encode()))
    store.prepare()
    try:
        for g in range(3):
            store.insert(
                [
                    dataclasses.replace(
                        make_record(f"g{g}-{i}"),
                        created_us=now_us(),
                        weights=rng.dirichlet([1, 1], size=1),
                    )
                    for i in range(5)
                ]
            )
    finally:
        store.close()


def verify(url: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["audit-verify", "--audit-url", url, *extra])
    return code, capsys.readouterr().out


def test_edits_deletions_and_insertions_are_each_named(
    trail: Trail, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    fill(trail.url)
    code, out = verify(trail.url, capsys)
    assert code == 0, out
    assert "15 records in 3 links checked" in out and "intact" in out

    trail.execute(
        f"update iabma_audit_log set latency_us = 99 where request_id = {trail.rid('g1-2')}"
    )
    trail.execute(f"delete from iabma_audit_log where request_id = {trail.rid('g0-3')}")
    columns = ", ".join(c for c in (*LOG_COLUMNS, "chain", "seq"))
    copied = columns.replace("request_id", trail.rid("forged"), 1)
    trail.execute(
        f"insert into iabma_audit_log ({columns}) "
        f"select {copied} from iabma_audit_log where request_id = {trail.rid('g2-4')}"
    )
    code, out = verify(trail.url, capsys)
    assert code == 1, out
    lines = [line for line in out.splitlines() if ":" in line and "checked" not in line]
    assert len(lines) == 3, out
    assert any(line.startswith("edited:") and "'g1-2'" in line for line in lines), out
    assert any(
        line.startswith("deleted: record 4 of 5") and "'g0-2'" in line and "'g0-4'" in line
        for line in lines
    ), out
    assert any(line.startswith("inserted:") and "'forged'" in line for line in lines), out


def test_a_forged_link_and_a_wrong_key_are_caught(
    trail: Trail, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    fill(trail.url)
    # Someone edits a record and rewrites its link's digest without the key.
    trail.execute("update iabma_audit_links set created_us = created_us + 1 where seq = 2")
    code, out = verify(trail.url, capsys)
    assert code == 1 and "altered: chain" in out and "link 2 (bad MAC)" in out, out
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", "another-key-0123456789abcdef")
    code, out = verify(trail.url, capsys)
    assert code == 1 and out.count("(bad MAC)") == 3, out


def test_a_bad_since_is_named(trail: Trail, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit-verify", "--audit-url", trail.url, "--since", "yesterday"]) == 2
    assert "--since='yesterday' is not an ISO 8601 time" in capsys.readouterr().err


def test_a_server_without_its_chain_writes_records_verify_names(
    bundles: Bundles,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """IABMA_AUDIT_CHAIN=false is for measuring the chain's cost: its records are still
    written and read back, and audit-verify names every one of them."""
    file = tmp_path / "audit.db"
    url = f"sqlite:///{file}"
    settings = make_settings(
        bundles.store, tmp_path, audit_url=url, audit_chain=False, audit_hash_key=TEST_HASH_KEY
    )
    with AsgiHarness(settings) as app:
        for k in range(3):
            r = app.post("/predict", json={"instances": [{"x1": 0.1 * k, "x2": 0.2}]})
            assert r.status_code == 200
        assert app.get("/weights", params={"request_id": r.json()["request_id"]}).is_success
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    code, out = verify(url, capsys)
    assert code == 1, out
    assert out.count("(in no link)") == 3, out
