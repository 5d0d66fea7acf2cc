"""``iabma audit-sums`` on a real SQLite trail: the sums a read would make, made ahead."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from app.audit.read import rollup
from app.audit.store.records import AuditRecord, now_us
from app.audit.write.trail_db import AuditStore, RecordFilter
from app.cli.main import main
from tests.support.services import make_record

HOUR = 3_600_000_000


def records(n: int, hours: float) -> list[AuditRecord]:
    rng = np.random.default_rng(0)
    now = now_us()
    return [
        dataclasses.replace(
            make_record(f"r{i}"),
            created_us=now - int(rng.uniform(0, hours) * HOUR),
            weights=rng.dirichlet([1, 1], size=2),
            prediction=np.full((2, 2), 0.5),
            uncertainty=np.zeros((2, 4)),
            instances=[{}, {}],
        )
        for i in range(n)
    ]


def test_the_sums_are_made_ahead_and_then_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "audit.db"
    url = f"sqlite:///{db}"
    store = AuditStore(url, 10)
    store.prepare()
    store.insert(records(300, hours=6))
    before = store.aggregate(RecordFilter("demo"))
    # The aggregate above made sums; drop them, as after an upgrade.
    with sqlite3.connect(db) as conn:
        conn.execute("delete from iabma_audit_rollup")
    code = main(["audit-sums", "--name", "demo", "--audit-url", url])
    out = capsys.readouterr().out
    assert code == 0, out
    with sqlite3.connect(db) as conn:
        (through,) = conn.execute("select through_us from iabma_audit_rollup").fetchone()
        (summed,) = conn.execute("select sum(records) from iabma_audit_buckets").fetchone()
        (sealed,) = conn.execute(
            f"select count(*) from iabma_audit_log where created_us < {through}"
        ).fetchone()
    assert summed == sealed > 150 and through % rollup.BUCKET_US == 0
    assert f"demo: {sealed:,} records to sum" in out and "is summed" in out
    assert store.aggregate(RecordFilter("demo")) == before
    store.close()


def test_a_database_without_a_trail_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    assert main(["audit-sums", "--name", "demo", "--audit-url", url]) == 2
    err = capsys.readouterr().err
    assert "iabma audit-sums: error: --audit-url" in err and "holds no audit trail" in err
