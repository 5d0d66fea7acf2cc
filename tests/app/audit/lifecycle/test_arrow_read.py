"""Records read as Arrow through ADBC, on real SQLite and PostgreSQL trails: every value
as stored, NULLs included, whatever the parts' size; SQLite's driver, which types a
column by its first values, is not misled by a first part whose inputs are all NULL.
On SQLite the reading child's failure is told, it runs at the lowest priority, and an
early stop ends it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sqlalchemy import text

from app.audit.lifecycle.archive_table import STORED, STORED_SCHEMA
from app.audit.lifecycle.arrow_read import stored_parts
from app.audit.store.chain import chain_key
from app.audit.store.engine import make_engine
from app.audit.write.trail_db import AuditStore
from tests.support.bundles import TEST_HASH_KEY
from tests.support.services import make_record
from tests.support.trail import Trail


def test_parts_hold_every_value_as_stored(trail: Trail) -> None:
    store = AuditStore(trail.url, 10.0, chain_key(TEST_HASH_KEY.encode()))
    store.prepare()
    # Inputs off (both NULL) first, then hashed, then in full: the first parts of two
    # records hold only NULLs in input_hash and input_json.
    modes = ["off"] * 3 + ["hash"] * 2 + ["full"] * 2
    store.insert(
        [
            dataclasses.replace(make_record(f"r{k}"), created_us=1_000 + k, input_mode=mode)
            for k, mode in enumerate(modes)
        ]
    )
    store.close()
    engine = make_engine(trail.url, 10.0)
    try:
        with engine.connect() as conn:
            want = [
                tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                for row in conn.execute(
                    text(f"SELECT {', '.join(STORED)} FROM iabma_audit_log ORDER BY created_us")
                )
            ]
        for size in (2, 3, 100):
            parts = list(stored_parts(engine, "created_us >= 0", size))
            assert all(p.schema == STORED_SCHEMA for p in parts)
            assert [p.num_rows for p in parts][:-1] == [size] * (len(parts) - 1)
            got = [tuple(r.values()) for p in parts for r in p.to_pylist()]
            assert got == want, size
        assert [r[STORED.index("input_json")] is None for r in want] == [True] * 5 + [False] * 2
        assert list(stored_parts(engine, "created_us < 0", 2)) == []
    finally:
        engine.dispose()


def test_a_failed_read_names_the_trail_and_the_cause(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'empty.db'}", 10.0)
    try:
        with pytest.raises(RuntimeError, match=r"empty\.db failed: .*no such table"):
            list(stored_parts(engine, "created_us >= 0", 10))
    finally:
        engine.dispose()


def test_the_reading_child_yields_the_cpu_and_ends_when_stopped(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    store = AuditStore(url, 10.0, chain_key(TEST_HASH_KEY.encode()))
    store.prepare()
    store.insert([dataclasses.replace(make_record(f"r{k}"), created_us=k) for k in range(50)])
    store.close()
    engine = make_engine(url, 10.0)
    others = set(_children())  # what earlier tests of this process may still have running
    parts = stored_parts(engine, "created_us >= 0", 5)
    assert next(parts).num_rows == 5
    (child,) = [pid for pid in _children() if pid not in others and _reads(pid)]
    # At the lowest priority: its core is the server's when the server needs it.
    nice = int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[16])
    assert nice == 19
    parts.close()
    assert child not in _children()  # killed and reaped, not left blocked on a pipe
    engine.dispose()


def _children() -> list[int]:
    """This process's children, of all its threads. A thread may end while they are read
    (one of an earlier test's pools): its file is gone, and it has none."""
    found = []
    for task in Path("/proc/self/task").iterdir():
        try:
            found += [int(pid) for pid in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _reads(pid: int) -> bool:
    """Whether ``pid`` runs the archive's reading child."""
    try:
        return b"arrow_child.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
