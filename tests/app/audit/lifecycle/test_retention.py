"""Retention on real SQLite and PostgreSQL trails: links wholly older than the cut-off go
with their records and outcomes, a link that straddles it stays whole, and the chain
still verifies."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.audit.lifecycle.retention import DAY_US, prune
from app.audit.store.chain import chain_key
from app.audit.store.records import now_us
from app.audit.write.trail_db import AuditStore
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


def test_the_servers_task_prunes_on_its_own_engine(trail: Trail) -> None:
    """``retention.run`` (IABMA_AUDIT_RETENTION_DAYS) removes what is older than its days,
    round after round, and gives its engine back when cancelled."""
    import asyncio
    import time

    from app.audit.lifecycle import retention

    now = now_us()
    store = AuditStore(trail.url, 10.0, KEY)
    store.prepare()
    store.insert([dataclasses.replace(make_record("old"), created_us=now - 10 * DAY_US)])
    store.insert([dataclasses.replace(make_record("new"), created_us=now)])

    def late_gone() -> bool:
        return not trail.rows(f"select 1 from iabma_audit_log where created_us < {now}")

    async def until_pruned() -> None:
        task = asyncio.create_task(retention.run(trail.url, 10.0, KEY, 5.0, now_us, 0.01))
        deadline = time.monotonic() + 30
        while trail.request_ids() != ["new"]:
            assert time.monotonic() < deadline, trail.request_ids()
            assert not task.done(), task
            await asyncio.sleep(0.01)
        # A group written old after the first round goes in a later one.
        store.insert([dataclasses.replace(make_record("late"), created_us=now - 9 * DAY_US)])
        while trail.request_ids() != ["new"] or not late_gone():
            assert time.monotonic() < deadline, trail.request_ids()
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(until_pruned())
    store.close()


def test_the_movers_sqlite_commits_do_not_wait_for_the_disk(tmp_path: Path) -> None:
    """The server's group commits reach the disk before answering (FULL); retention's and
    the archive's deletes need not (NORMAL), so no fsync of theirs queues the server's."""
    from app.audit.store.engine import make_engine

    url = f"sqlite:///{tmp_path / 'audit.db'}"
    for mover, want in ((False, 2), (True, 1)):
        engine = make_engine(url, 5.0, mover=mover)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == want
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        engine.dispose()


def test_a_staged_versions_shadow_groups_age_out_with_the_records(trail: Trail) -> None:
    from app.audit.store import shadow_table

    now = now_us()
    store = AuditStore(trail.url, 10.0, KEY)
    store.prepare()
    shadow_table.ensure(store.engine)
    for rid, at in (("old", now - 10 * DAY_US), ("new", now - DAY_US)):
        shadow_table.write(
            store.engine,
            shadow_table.ShadowGroup("demo", "v1", "v2", 2, [rid], [at], [1], bytes(8 * 3)),
        )
    from sqlalchemy import select

    done = prune(store.engine, KEY, now - 5 * DAY_US)
    with store.engine.connect() as conn:
        left = conn.execute(select(shadow_table.shadow.c.request_ids)).scalars().all()
    store.close()
    assert done.shadow_groups == 1 and left == ["new"]
