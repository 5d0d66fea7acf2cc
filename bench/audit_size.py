"""The trail over months: bytes per record, and ``iabma audit-verify`` over them.

Writes ``--records`` single-row records of the demo bundle (hash mode, the experts'
answers included, group commits of 500, chained as the server chains them) to a fresh
SQLite trail and a fresh PostgreSQL schema, then reports the bytes per record of each
(SQLite: the file after a checkpoint; PostgreSQL: every audit table with its indexes and
TOAST) and the time ``audit-verify`` takes over the whole trail (targets: 200 bytes, 10 s).

    .venv/bin/python bench/audit_size.py                    # 1 M records, ~6 min
    .venv/bin/python bench/audit_size.py --records 100000 --skip-postgres
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from app.audit import archive  # noqa: E402
from app.audit.chain import chain_key  # noqa: E402
from app.audit.retention import prune  # noqa: E402
from app.audit.tables import make_engine  # noqa: E402
from app.audit.verify import verify  # noqa: E402
from bench.peers.postgres import _connect, fresh_schema  # noqa: E402
from bench.speed.bundles import ensure_bundle  # noqa: E402
from bench.speed.trail import SEED_HASH_KEY, seed  # noqa: E402


def timed_verify(url: str) -> tuple[float, int, bool]:
    engine = make_engine(url, 30.0)
    try:
        t0 = time.perf_counter()
        report = verify(engine, chain_key(SEED_HASH_KEY))
        return time.perf_counter() - t0, report.records, report.intact
    finally:
        engine.dispose()


def sqlite_size(version_dir: Path, n: int, work: Path) -> dict[str, float]:
    db = work / "audit.db"
    t0 = time.perf_counter()
    seed(version_dir, f"sqlite:///{db}", n, 30, np.random.default_rng(0), rows=1)
    wrote = time.perf_counter() - t0
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = db.stat().st_size
    took, checked, intact = timed_verify(f"sqlite:///{db}")
    assert checked == n and intact
    return {"bytes_per_record": size / n, "write_s": wrote, "verify_s": took,
            **move_out(f"sqlite:///{db}", n, work)}  # fmt: skip


def move_out(url: str, n: int, work: Path) -> dict[str, float]:
    """Archive (write, check, delete) the older half of the trail, then prune the rest:
    records per second of each."""
    engine = make_engine(url, 30.0)
    key = chain_key(SEED_HASH_KEY)
    try:
        with engine.connect() as conn:
            lo, hi = conn.exec_driver_sql(
                "SELECT min(created_us), max(created_us) FROM iabma_audit_log"
            ).one()
        middle = (int(lo) + int(hi)) // 2
        t0 = time.perf_counter()
        written, ends = archive.write(engine, middle, work / "archive")
        report = archive.check(work / "archive", key)
        assert report.intact and report.records == written.records
        gone = archive.delete_archived(engine, key, middle, ends)
        archived_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        pruned = prune(engine, key, int(hi) + 1)
        pruned_s = time.perf_counter() - t1
        assert gone + pruned.records == n, (gone, pruned.records)
    finally:
        engine.dispose()
    return {"archive_per_s": gone / archived_s, "prune_per_s": pruned.records / pruned_s,
            "archived": gone, "pruned": pruned.records}  # fmt: skip


def postgres_size(version_dir: Path, n: int) -> dict[str, float]:
    with fresh_schema() as url:
        t0 = time.perf_counter()
        seed(version_dir, url, n, 30, np.random.default_rng(0), rows=1)
        wrote = time.perf_counter() - t0
        schema = url.rsplit("%3D", 1)[1]
        with _connect() as conn:
            conn.execute(f'VACUUM ANALYZE "{schema}".iabma_audit_log')
            row = conn.execute(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace s "
                "ON s.oid = c.relnamespace WHERE s.nspname = %s AND c.relkind = 'r'",
                (schema,),
            ).fetchone()
        assert row is not None
        took, checked, intact = timed_verify(url)
        assert checked == n and intact
        return {"bytes_per_record": int(row[0]) / n, "write_s": wrote, "verify_s": took,
                **move_out(url, n, Path(tempfile.mkdtemp(prefix="audit-size-pg-")))}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--skip-postgres", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="audit-size-") as tmp:
        work = Path(tmp)
        version_dir = ensure_bundle(REPO / "models_store", "demo")
        results = {"sqlite": sqlite_size(version_dir, args.records, work)}
        if not args.skip_postgres:
            results["postgresql"] = postgres_size(version_dir, args.records)
    print(f"{args.records:,} single-row records of the demo bundle, hash mode, chained:")
    for name, r in results.items():
        print(
            f"  {name:<10} {r['bytes_per_record']:6.1f} bytes/record   write {r['write_s']:6.1f} s"
            f"   audit-verify {r['verify_s']:5.1f} s"
        )
        if "archive_per_s" in r:
            print(
                f"  {name:<10} archive+check+delete {r['archived']:,.0f} records at "
                f"{r['archive_per_s']:,.0f}/s; "
                f"prune {r['pruned']:,.0f} at {r['prune_per_s']:,.0f}/s"
            )


if __name__ == "__main__":
    main()
