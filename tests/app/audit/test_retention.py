"""Retention on real SQLite and PostgreSQL trails: links wholly older than the cut-off go
with their records and outcomes, a link that straddles it stays whole, and the chain
still verifies."""

from __future__ import annotations

import dataclasses

import pytest

from app.audit.chain import chain_key
from app.audit.records import now_us
from app.audit.retention import DAY_US, prune
from app.audit.store import AuditStore
from app.cli.main import main
from tests.support.bundles import TEST_HASH_KEY
from tests.support.services import make_record
from tests.support.trail import Trail

KEY = chain_key(TEST_HASH_KEY.encode())


def test_old_links_go_whole_and_the_chain_still_verifies(
    trail: Trail, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IABMA_AUDIT_HASH_KEY", TEST_HASH_KEY)
    now = now_us()
    old, new = now - 10 * DAY_US, now - DAY_US
    store = AuditStore(trail.url, 10.0, KEY)
    store.prepare()
    groups = [
        [("old-a", old), ("old-b", old + 1)],
        [("old-c", old + 2)] * 1 + [("old-d", old + 3)],
        [("straddle-old", old + 4), ("straddle-new", new)],  # its link is new: it stays
        [("new-a", new + 1)],
    ]
    for group in groups:
        store.insert([dataclasses.replace(make_record(r), created_us=t) for r, t in group])
    store.close()
    trail.execute(
        "insert into iabma_outcomes (model, request_id, row_index, record_id, record_us, "
        "version, received_us, outcome, experts, weights, scores) values "
        f"('demo', 'old-a', 0, 1, {old}, 'v1', {now}, '0', '[]', {trail.blob(b'')}, "
        f"{trail.blob(b'')})"
    )

    done = prune(store.engine, KEY, now - 5 * DAY_US)
    assert (done.records, done.links, done.outcomes) == (4, 2, 1)
    assert sorted(trail.request_ids()) == ["new-a", "straddle-new", "straddle-old"]
    assert main(["audit-verify", "--audit-url", trail.url]) == 0, capsys.readouterr().out
    # Again: nothing more to remove, and a deletion after the cut is still caught.
    assert prune(store.engine, KEY, now - 5 * DAY_US).records == 0
    trail.execute(f"delete from iabma_audit_log where request_id = {trail.rid('new-a')}")
    assert main(["audit-verify", "--audit-url", trail.url]) == 1
    assert "deleted: record 1 of 1" in capsys.readouterr().out
