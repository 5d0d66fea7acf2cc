"""``iabma audit-verify`` on real SQLite and PostgreSQL trails: intact, then with a
record's answer edited, one deleted and two inserted in the database (one with a request
id of the wrong type), each named; exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.audit.store.records import LOG_COLUMNS
from app.cli.main import main
from tests.support.bundles import TEST_HASH_KEY, Bundles, make_settings
from tests.support.harness import AsgiHarness
from tests.support.tampering import fill
from tests.support.trail import Trail


def verify(url: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["audit-verify", "--audit-url", url, *extra])
    return code, capsys.readouterr().out


def test_the_command_names_all_four_of_an_edit_a_deletion_and_two_insertions(
    trail: Trail, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer edited, one record deleted, and two inserted (one
    with a request id that is text, not bytes): exit 1, each of the four named."""
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    fill(trail.url)
    code, out = verify(trail.url, capsys)
    assert code == 0, out
    assert "15 records in 3 links checked" in out and "intact" in out
    trail.execute(
        "update iabma_audit_log set answer = (select answer from iabma_audit_log where "
        f"request_id = {trail.rid('g0-0')}) where request_id = {trail.rid('g1-2')}"
    )
    trail.execute(f"delete from iabma_audit_log where request_id = {trail.rid('g2-1')}")
    columns = ", ".join((*LOG_COLUMNS, "chain", "seq"))
    for value in (trail.rid("forged"), "'typed-as-text'"):
        copied = columns.replace("request_id", value, 1)
        trail.execute(
            f"insert into iabma_audit_log ({columns}) select {copied} from iabma_audit_log "
            f"where request_id = {trail.rid('g0-3')}"
        )
    code, out = verify(trail.url, capsys)
    assert code == 1, out
    lines = [line for line in out.splitlines() if line[:8] in ("edited: ", "deleted:", "inserted")]
    assert len(lines) == 4, out
    assert any(line.startswith("edited:") and "'g1-2'" in line for line in lines), out
    assert any(
        line.startswith("deleted: record 2 of 5") and "'g2-0'" in line and "'g2-2'" in line
        for line in lines
    ), out
    assert any(line.startswith("inserted:") and "'forged'" in line for line in lines), out
    assert any(line.startswith("inserted:") and "typed-as-text" in line for line in lines), out


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
