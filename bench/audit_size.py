"""The trail over months: bytes per record, and ``iabma audit-verify`` over them.

Writes ``--records`` single-row records of the demo bundle (hash mode, the experts'
answers included, group commits of 500, chained as the server chains them) to a fresh
SQLite trail and a fresh PostgreSQL schema, then reports the bytes per record of each
(SQLite: the file after a checkpoint; PostgreSQL: every audit table with its indexes and
TOAST) and the time ``audit-verify`` takes over the whole trail (targets: 200 bytes, 10 s);
then archives (write, check, delete) the older half and prunes the rest, in records/s
(target 100,000). On a copy of the SQLite trail, ``/predict``'s p99 under wrk idle and
while another process archives and prunes it (``bench/speed/trail_load.py``; target:
within 10%). Figures go to ``<out>/audit_size-<UTC>.json`` and ``.md``, and the terminal.

    .venv/bin/python bench/audit_size.py                    # 1 M records, ~6 min
    .venv/bin/python bench/audit_size.py --records 100000 --skip-postgres --skip-load
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from app.audit.check.verify import verify  # noqa: E402
from app.audit.lifecycle import archive  # noqa: E402
from app.audit.lifecycle.retention import prune  # noqa: E402
from app.audit.store.chain import chain_key  # noqa: E402
from app.audit.store.engine import make_engine  # noqa: E402
from bench.peers.postgres import _connect, fresh_schema  # noqa: E402
from bench.speed.bundles import ensure_bundle  # noqa: E402
from bench.speed.report import write_results  # noqa: E402
from bench.speed.trail import SEED_HASH_KEY, seed, span  # noqa: E402
from bench.speed.trail_load import p99_while_moving  # noqa: E402


def timed_verify(url: str) -> tuple[float, int, bool]:
    engine = make_engine(url, 30.0)
    try:
        t0 = time.perf_counter()
        report = verify(engine, chain_key(SEED_HASH_KEY))
        return time.perf_counter() - t0, report.records, report.intact
    finally:
        engine.dispose()


def sqlite_size(version_dir: Path, n: int, work: Path, keep: Path | None) -> dict[str, float]:
    """``keep``: where to copy the seeded trail (for the load test)."""
    db = work / "audit.db"
    t0 = time.perf_counter()
    seed(version_dir, f"sqlite:///{db}", n, 30, np.random.default_rng(0), rows=1)
    wrote = time.perf_counter() - t0
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = db.stat().st_size
    if keep is not None:
        shutil.copyfile(db, keep)
    took, checked, intact = timed_verify(f"sqlite:///{db}")
    assert checked == n and intact
    return {"bytes_per_record": size / n, "write_s": wrote, "verify_s": took,
            **move_out(f"sqlite:///{db}", n, work)}  # fmt: skip


def move_out(url: str, n: int | None, work: Path) -> dict[str, float]:
    """Archive (write, check, delete) the older half of the trail, then prune the rest:
    records per second of each (``n``: the records the trail must have held), as
    ``iabma audit-archive --delete`` and retention do it."""
    engine = make_engine(url, 30.0, mover=True)
    key = chain_key(SEED_HASH_KEY)
    try:
        middle, hi = span(engine)
        t0 = time.perf_counter()
        written, ends = archive.write(engine, middle, work / "archive")
        report = archive.check(work / "archive", key)
        assert report.intact and report.records == written.records
        gone = archive.delete_archived(engine, key, middle, ends)
        archived_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        pruned = prune(engine, key, hi + 1)
        pruned_s = time.perf_counter() - t1
        assert n is None or gone + pruned.records == n, (gone, pruned.records)
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


def markdown(report: dict) -> str:
    lines = [
        f"{report['records']:,} single-row records of the demo bundle, hash mode, chained "
        f"({report['started_utc']}):",
        "",
        "| trail | bytes/record | write s | audit-verify s | archive+check+delete /s | prune /s |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for name, r in report["trails"].items():
        lines.append(
            f"| {name} | {r['bytes_per_record']:.1f} | {r['write_s']:.1f} | {r['verify_s']:.1f} "
            f"| {r['archive_per_s']:,.0f} ({r['archived']:,.0f}) "
            f"| {r['prune_per_s']:,.0f} ({r['pruned']:,.0f}) |"
        )
    loads = report.get("load", [])
    if loads:
        first = loads[0]
        lines += [
            "",
            f"/predict under wrk ({first['seconds']:g} s a load) on a seeded trail (SQLite: a "
            f"copy), idle vs while another process (nice {first['mover_nice']}) archived the "
            "older half and pruned the rest (its rates under that load):",
            "",
            "| trail | connections | idle req/s | idle p99 ms | during req/s | during p99 ms "
            "| p99 ratio (target <= 1.10) | archive /s | prune /s | failures |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for r in loads:
            i, d, m = r["idle"], r["during"], r["move_out"]
            lines.append(
                f"| {r.get('trail', 'sqlite')} | {r['connections']} | {i['req_per_s']:,.0f} "
                f"| {i['p99']:.2f} "
                f"| {d['req_per_s']:,.0f} | {d['p99']:.2f} | {r['p99_ratio']:.2f} "
                f"| {m['archive_per_s']:,.0f} | {m['prune_per_s']:,.0f} "
                f"| {i['failures'] + d['failures']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--skip-postgres", action="store_true")
    p.add_argument("--skip-load", action="store_true", help="no p99 under wrk")
    p.add_argument("--load-seconds", type=float, default=10.0)
    p.add_argument("--load-connections", default="2,8", help="wrk connections, comma list")
    p.add_argument("--mover-nice", type=int, default=0, help="niceness of the archiver")
    p.add_argument("--store", type=Path, default=REPO / "models_store")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--move-out", metavar="URL", help=argparse.SUPPRESS)  # trail_load's mover
    args = p.parse_args()
    if args.move_out:
        with tempfile.TemporaryDirectory(prefix="audit-move-") as tmp:
            print(json.dumps(move_out(args.move_out, None, Path(tmp))), flush=True)
        return
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report: dict = {"benchmark": "audit_size", "started_utc": started, "records": args.records}
    with tempfile.TemporaryDirectory(prefix="audit-size-") as tmp:
        work = Path(tmp)
        version_dir = ensure_bundle(args.store, "demo")
        keep = None if args.skip_load else work / "load.db"
        trails = {"sqlite": sqlite_size(version_dir, args.records, work, keep)}
        if not args.skip_postgres:
            trails["postgresql"] = postgres_size(version_dir, args.records)
        report["trails"] = trails
        if keep is not None:
            report["load"] = []
            for conns in [int(c) for c in args.load_connections.split(",")]:
                trail = work / f"load-{conns}.db"  # each load moves out a fresh copy
                shutil.copyfile(keep, trail)
                report["load"].append({"trail": "sqlite", **p99_while_moving(
                    args.store, f"sqlite:///{trail}", work, args.load_seconds, conns,
                    warmup=2.0, nice=args.mover_nice,
                )})  # fmt: skip
                if args.skip_postgres:
                    continue
                with fresh_schema() as url:  # seeded afresh: the mover empties it
                    seed(version_dir, url, args.records, 30, np.random.default_rng(0), rows=1)
                    report["load"].append({"trail": "postgresql", **p99_while_moving(
                        args.store, url, work, args.load_seconds, conns,
                        warmup=2.0, nice=args.mover_nice,
                    )})  # fmt: skip
    write_results(args.out, f"audit_size-{started}", report, markdown(report))


if __name__ == "__main__":
    main()
