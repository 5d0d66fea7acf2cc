"""``iabma audit-migrate``: convert a trail written before compact records (schema 1).

A server refuses to start on such a trail and names this command. Run it once with the
servers stopped: it renames the old table ``iabma_audit_log_v1``, makes the new tables,
and copies every record into them (keeping its id, to which outcomes refer), chained as
the server chains its commits. Drop ``iabma_audit_log_v1`` once you have checked the
result (``iabma audit-verify``, ``GET /weights``). The key is the server's, as for
``iabma audit-verify``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from app.cli.audit_verify import open_trail
from app.cli.errors import CommandError, option_fault
from app.cli.text import command


def add_parser(sub: Any) -> None:
    p = command(sub, "audit-migrate", "convert a schema-1 audit trail to compact records", __doc__)
    p.add_argument(
        "--audit-url", default=None, help="the trail's SQLAlchemy URL (default IABMA_AUDIT_URL)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from sqlalchemy import text

    from app.audit.migrate import OLD, migrate, needs_migration
    from app.cli.progress import ProgressBar

    engine, key = open_trail(args.audit_url)
    try:
        if not needs_migration(engine):
            raise CommandError(
                option_fault("--audit-url", args.audit_url or "IABMA_AUDIT_URL", "is not schema 1")
            )
        with engine.connect() as conn:
            total = int(conn.execute(text("SELECT count(*) FROM iabma_audit_log")).scalar_one())
        bar = ProgressBar(total, "records")
        began = time.perf_counter()
        done = migrate(engine, key, bar.update)
        bar.close()
    finally:
        engine.dispose()
    took = time.perf_counter() - began
    print(f"{done:,} of {total:,} records copied in {took:.1f} s; the old table is {OLD}")
    return 0 if done == total else 1
