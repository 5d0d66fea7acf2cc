"""``iabma audit-archive``: move old audit records to Parquet files, and check them.

``--before T --out DIR`` writes the records of every chain link wholly before T: one file
per day and version (``DIR/<day>/<version>.parquet``), the links over them and a manifest
of row counts and SHA-256 checksums; then checks them all against the key. ``--delete``
then removes the archived records from the trail, with their outcomes (which go to
``DIR/outcomes.parquet``): ``GET /weights?request_id=`` of one, and an outcome posted for
it, answer 410 naming the day; the chain stays verifiable from where the archive ends.
``--verify DIR`` checks an archive again. Exit 1 when a check fails. The files read as
they are: ``duckdb -c "SELECT version, top_expert, count(*) FROM 'DIR/*/*.parquet'
GROUP BY ALL"``, or ``pandas.read_parquet(DIR)``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from app.cli.audit_verify import open_trail, parse_time, trail_key
from app.cli.text import command
from app.errors import CommandError, option_fault


def add_parser(sub: Any) -> None:
    p = command(sub, "audit-archive", "move old audit records to Parquet, and check them", __doc__)
    p.add_argument("--audit-url", default=None, help="the trail (default IABMA_AUDIT_URL)")
    p.add_argument("--before", default=None, help="ISO 8601 time: archive records before it")
    p.add_argument("--out", type=Path, default=None, help="the archive's directory")
    p.add_argument("--delete", action="store_true", help="then remove them from the trail")
    p.add_argument("--verify", type=Path, default=None, metavar="DIR", help="check an archive")
    p.set_defaults(run=run)


def _report(report: Any, what: str, seconds: float) -> int:
    for line in report.findings[:1000]:
        print(line)
    verdict = "intact" if report.intact else f"{len(report.findings):,} problems"
    rate = report.records / seconds if seconds > 0 else 0.0
    print(f"{what}: {report.records:,} records in {report.links:,} links checked in "
          f"{seconds:.1f} s ({rate:,.0f}/s): {verdict}")  # fmt: skip
    return 0 if report.intact else 1


def run(args: argparse.Namespace) -> int:
    try:
        from app.audit.lifecycle import archive
    except ModuleNotFoundError as exc:  # pyarrow or an ADBC driver: the `archive` extra
        raise CommandError(
            f"needs the `archive` extra ({exc.name} is not installed): pip install 'iabma[archive]'"
        ) from None

    if args.verify is not None:
        if not (args.verify / archive.MANIFEST).is_file():
            raise CommandError(option_fault("--verify", str(args.verify), "holds no manifest.json"))
        _, key = trail_key(args.audit_url)
        t0 = time.perf_counter()
        return _report(archive.check(args.verify, key), str(args.verify), time.perf_counter() - t0)
    if args.before is None or args.out is None:
        raise CommandError("--before and --out are required (or --verify DIR)")
    before = parse_time("--before", args.before)
    if (args.out / archive.MANIFEST).exists():
        raise CommandError(option_fault("--out", str(args.out), "holds an archive already"))
    engine, key = open_trail(args.audit_url, mover=args.delete)
    try:
        t0 = time.perf_counter()
        written, ends = archive.write(engine, before, args.out)
        wrote = time.perf_counter() - t0
        print(
            f"wrote {written.records:,} records in {len(written.files)} files and their "
            f"{written.outcomes:,} outcomes in {wrote:.1f} s"
        )
        code = _report(archive.check(args.out, key), str(args.out), time.perf_counter() - t0)
        if code != 0 or not args.delete:
            return code
        t1 = time.perf_counter()
        gone = archive.delete_archived(engine, key, before, ends, written.outcomes_through)
        took = time.perf_counter() - t1
        print(f"deleted {gone:,} archived records from the trail in {took:.1f} s")
        return 0 if gone == written.records else 1
    finally:
        engine.dispose()
