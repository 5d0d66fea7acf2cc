"""``iabma audit-migrate``: bring an audit trail of an earlier schema to this release's.

A server refuses to start on such a trail and names this command. Run it once with the
servers stopped. A trail written before compact records (schema 1): it renames the old
table ``iabma_audit_log_v1``, makes the new tables, and copies every record into them
(keeping its id, to which outcomes refer), chained as the server chains its commits;
drop ``iabma_audit_log_v1`` once you have checked the result (``iabma audit-verify``,
``GET /weights``). A trail of schema 2 is upgraded in place: a request id comes to name
one record of a model (records that shared an id with an earlier one of their model are
kept, and counted), each version row is sealed, the outcomes are chained (what they say
is taken as found), and the outcome chains' tables are made. An interrupted upgrade can
run again. The key is the server's, as for ``iabma audit-verify``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from app.cli.audit_verify import open_trail
from app.cli.text import command
from app.errors import CommandError, option_fault


def add_parser(sub: Any) -> None:
    p = command(sub, "audit-migrate", "bring an audit trail to this release's schema", __doc__)
    p.add_argument(
        "--audit-url", default=None, help="the trail's SQLAlchemy URL (default IABMA_AUDIT_URL)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from sqlalchemy import text

    from app.audit.lifecycle.migrate import OLD, found_schema, migrate, unkeyed
    from app.audit.lifecycle.upgrade import upgrade
    from app.audit.store.tables import SCHEMA_VERSION
    from app.cli.progress import ProgressBar

    engine, key = open_trail(args.audit_url)
    shown = args.audit_url or "IABMA_AUDIT_URL"
    code = 0
    try:
        schema = found_schema(engine)
        if schema is None or schema >= SCHEMA_VERSION:
            found = "holds no trail" if schema is None else f"has schema {schema} already"
            raise CommandError(option_fault("--audit-url", shown, found))
        if schema == 1:
            with engine.connect() as conn:
                total = int(conn.execute(text("SELECT count(*) FROM iabma_audit_log")).scalar_one())
            began = time.perf_counter()
            bar = ProgressBar(total, "records")
            done = migrate(engine, key, bar.update)
            bar.close()
            took = time.perf_counter() - began
            print(f"{done:,} of {total:,} records copied in {took:.1f} s; the old table is {OLD}")
            code = 0 if done == total else 1
        began = time.perf_counter()
        made = upgrade(engine, key)
        took = time.perf_counter() - began
        print(
            f"schema {SCHEMA_VERSION}: {made.versions:,} version rows sealed and "
            f"{made.outcomes:,} outcomes chained in {took:.1f} s"
        )
        kept = unkeyed(engine)
        if kept:
            print(
                f"{kept:,} records share their request id with an earlier record of their "
                "model; kept as they were, without the key (model_id NULL)"
            )
    finally:
        engine.dispose()
    return code
