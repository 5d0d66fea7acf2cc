"""``iabma audit-sums``: make the audit trail's ten-minute sums before anyone asks for them.

``GET /weights`` and the console's timeline add up stored sums per ten minutes of trail
(``iabma_audit_buckets``) instead of reading every record. The first read after an
upgrade, or after the sums were dropped, makes the sums it lacks in one pass over the
records (about 4 s per million records on two cores) while its caller waits; on a trail
of tens of millions of records that can outlast a proxy's timeout. Run this beforehand, or
from cron: it reads ``IABMA_AUDIT_URL`` as the server does, may run beside live servers
(whichever of them sums a bucket first stores it, once), and shows its progress.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from app.cli.progress import ProgressBar
from app.cli.text import command
from app.errors import CommandError, option_fault


def add_parser(sub: Any) -> None:
    p = command(
        sub,
        "audit-sums",
        "make the audit trail's ten-minute sums ahead of the first GET /weights",
        __doc__,
    )
    p.add_argument("--name", required=True, help="the model whose records to sum")
    p.add_argument(
        "--audit-url", default=None, help="the trail's SQLAlchemy URL (default IABMA_AUDIT_URL)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from sqlalchemy import func, inspect, select

    from app.audit.read import reading, rollup
    from app.audit.store.records import iso_from_us, now_us
    from app.audit.store.tables import records
    from app.audit.write.trail_db import AuditStore
    from app.settings import SettingsError, load_settings

    try:
        settings = load_settings(**({"audit_url": args.audit_url} if args.audit_url else {}))
    except SettingsError as exc:
        shown = args.audit_url or "IABMA_AUDIT_URL"
        raise CommandError(option_fault("--audit-url", shown, str(exc))) from None
    store = AuditStore(settings.audit_url, settings.audit_timeout_seconds)
    try:
        if not inspect(store.engine).has_table(records.name):
            raise CommandError(option_fault("--audit-url", _shown(store), "holds no audit trail"))
        # Sealed buckets only, as a read would: records may still land in the others.
        cut = rollup.floor_bucket(now_us() - rollup.SEAL_US)
        start = rollup.summed_through(store.engine, args.name) or 0
        where = reading.conditions(store.versions, args.name, since_us=start, until_us=cut)
        query = select(func.count()).select_from(records).where(*where)
        with store.engine.connect() as conn:
            total = int(conn.execute(query).scalar_one())
        print(f"{args.name}: {total:,} records to sum, up to {iso_from_us(cut)}")
        began = time.perf_counter()
        bar = ProgressBar(total, "records")
        through = rollup.sum_sealed(store.engine, args.name, cut, bar.update if total else None)
        bar.close()
        took = time.perf_counter() - began
        before = iso_from_us(through)
        print(f"{args.name}: every sealed bucket before {before} is summed ({took:.1f} s)")
    finally:
        store.close()
    return 0


def _shown(store: Any) -> str:
    return str(store.engine.url.render_as_string(hide_password=True))
