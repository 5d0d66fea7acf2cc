"""``iabma audit-migrate``: upgrade a trail written by an earlier release (schema 1 or 2).

A server refuses to start on such a trail and names this command. Run it once with the
servers stopped. Schema 1 (before compact records): it renames the old table
``iabma_audit_log_v1``, makes the new tables, and copies every record into them (keeping
its id, to which outcomes refer), chained as the server chains its commits; drop
``iabma_audit_log_v1`` once you have checked the result (``iabma audit-verify``,
``GET /weights``). Schema 2: in one transaction, a request id comes to name one record of
a model; records that shared an id with an earlier one of their model are kept, and
counted. The key is the server's, as for ``iabma audit-verify``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from app.cli.audit_verify import open_trail
from app.cli.errors import CommandError, option_fault
from app.cli.text import command


def add_parser(sub: Any) -> None:
    p = command(sub, "audit-migrate", "upgrade an audit trail of schema 1 or 2", __doc__)
    p.add_argument(
        "--audit-url", default=None, help="the trail's SQLAlchemy URL (default IABMA_AUDIT_URL)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from sqlalchemy import text

    from app.audit.migrate import OLD, found_schema, migrate, unkeyed, upgrade
    from app.audit.tables import SCHEMA_VERSION
    from app.cli.progress import ProgressBar

    engine, key = open_trail(args.audit_url)
    try:
        schema = found_schema(engine)
        if schema not in (1, 2):
            found = "holds no trail" if schema is None else f"is schema {schema} already"
            raise CommandError(
                option_fault("--audit-url", args.audit_url or "IABMA_AUDIT_URL", found)
            )
        with engine.connect() as conn:
            total = int(conn.execute(text("SELECT count(*) FROM iabma_audit_log")).scalar_one())
        began = time.perf_counter()
        if schema == 1:
            bar = ProgressBar(total, "records")
            done = migrate(engine, key, bar.update)
            bar.close()
            kept = unkeyed(engine)
        else:
            kept = upgrade(engine)
            done = total
    finally:
        engine.dispose()
    took = time.perf_counter() - began
    if schema == 1:
        print(f"{done:,} of {total:,} records copied in {took:.1f} s; the old table is {OLD}")
    else:
        print(f"{total:,} records upgraded to schema {SCHEMA_VERSION} in {took:.1f} s")
    if kept:
        print(
            f"{kept:,} records share their request id with an earlier record of their model; "
            "kept as they were, without the key (model_id NULL)"
        )
    return 0 if done == total else 1
