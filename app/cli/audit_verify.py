"""``iabma audit-verify``: check the audit trail against its tamper-evident chain.

Every group commit of the server extends a chain of HMAC links over its records, and
every outcome post one over its outcomes (docs/design.md, "Tamper evidence"). This walks
the chains and names every record, outcome or version row edited, deleted or inserted in
the database outside the server; it exits 1 if there is any, 0 if the trail is intact.
The key is the server's: IABMA_AUDIT_HASH_KEY (or _FILE), or the key file beside a
SQLite trail. ``--since`` checks the links committed from that time on.

``--checkpoints FILE --public-key KEY`` also holds the trail against the checkpoints the
servers signed (a checkpoint file, or a captured log): a chain's newest links deleted with
their records, or a whole chain, are named. That part needs only the public key, which
cannot sign a checkpoint; without the HMAC key it is all that is checked.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from app.cli.text import command
from app.errors import CommandError, option_fault

MAX_SHOWN = 1000


def add_parser(sub: Any) -> None:
    p = command(sub, "audit-verify", "check the audit trail against its HMAC chain", __doc__)
    p.add_argument(
        "--audit-url", default=None, help="the trail's SQLAlchemy URL (default IABMA_AUDIT_URL)"
    )
    p.add_argument("--since", default=None, help="ISO 8601 time: check links from then on")
    p.add_argument(
        "--checkpoints",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="signed checkpoints: IABMA_AUDIT_CHECKPOINT_FILE or a captured log (repeatable)",
    )
    p.add_argument(
        "--public-key",
        type=Path,
        action="append",
        default=[],
        metavar="PEM",
        help="the public key the checkpoints are signed with (repeatable, for keys rotated)",
    )
    p.set_defaults(run=run)


def parse_time(option: str, text: str) -> int:
    """An ISO 8601 time (a naive one is UTC) as microseconds since the epoch."""
    from datetime import UTC, datetime

    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(
            option_fault(option, text, "is not an ISO 8601 time, e.g. 2026-01-31T00:00:00Z")
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    delta = stamp - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def trail_key(audit_url: str | None) -> tuple[Any, bytes]:
    """The settings for the option (or IABMA_AUDIT_URL), and the trail's chain key."""
    from app.audit.store.chain import chain_key
    from app.audit.store.hashkey import audit_hash_key
    from app.errors import StartupRefused
    from app.settings import SettingsError, load_settings

    shown = audit_url or "IABMA_AUDIT_URL"
    try:
        settings = load_settings(**({"audit_url": audit_url} if audit_url else {}))
        key = audit_hash_key(settings, make=False)
    except (SettingsError, StartupRefused) as exc:
        raise CommandError(option_fault("--audit-url", shown, str(exc))) from None
    return settings, chain_key(key)


def open_trail(audit_url: str | None, mover: bool = False) -> tuple[Any, bytes]:
    """The trail's engine and its chain key, from the option or IABMA_AUDIT_URL
    (``mover``: for deleting, :func:`app.audit.store.engine.make_engine` says why)."""
    settings, key = trail_key(audit_url)
    return _engine(audit_url, settings, mover), key


def _engine(audit_url: str | None, settings: Any, mover: bool = False) -> Any:
    from sqlalchemy import inspect

    from app.audit.store.engine import make_engine
    from app.audit.store.tables import records

    engine = make_engine(settings.audit_url, settings.audit_timeout_seconds, mover)
    if not inspect(engine).has_table(records.name):
        engine.dispose()
        shown = audit_url or "IABMA_AUDIT_URL"
        raise CommandError(option_fault("--audit-url", shown, "holds no audit trail"))
    return engine


def _public_keys(args: argparse.Namespace) -> list[Any]:
    from app.audit.check.checkpoints import public_key

    if bool(args.checkpoints) != bool(args.public_key):
        given, missing = (
            ("--checkpoints", "--public-key")
            if args.checkpoints
            else ("--public-key", "--checkpoints")
        )
        raise CommandError(f"{given} needs {missing}: checkpoints are read with their public key")
    keys = []
    for path in args.public_key:
        try:
            keys.append(public_key(path))
        except (OSError, ValueError) as exc:
            raise CommandError(option_fault("--public-key", str(path), str(exc))) from None
    for path in args.checkpoints:
        if not path.is_file():
            raise CommandError(option_fault("--checkpoints", str(path), "is not a file"))
    return keys


def run(args: argparse.Namespace) -> int:
    from sqlalchemy import func, select

    from app.audit.check import checkpoints
    from app.audit.check.verify import Report, verify
    from app.audit.store.tables import records
    from app.cli.progress import ProgressBar
    from app.settings import SettingsError, load_settings

    since = parse_time("--since", args.since) if args.since else None
    keys = _public_keys(args)
    key: bytes | None = None
    try:
        engine, key = open_trail(args.audit_url)
    except CommandError:
        if not keys:
            raise
        try:  # the public key alone: the checkpoints are what can be checked
            settings = load_settings(**({"audit_url": args.audit_url} if args.audit_url else {}))
        except SettingsError as exc:
            raise CommandError(
                option_fault("--audit-url", args.audit_url or "", str(exc))
            ) from None
        engine = _engine(args.audit_url, settings)
    began = time.perf_counter()
    try:
        report = Report()
        if key is not None:
            with engine.connect() as conn:
                total = int(conn.execute(select(func.count()).select_from(records)).scalar_one())
            bar = ProgressBar(total, "records")
            try:
                report = verify(engine, key, since, bar.update)
            finally:
                bar.close()
        held = 0
        if keys:
            heads = checkpoints.read(args.checkpoints, keys, report.entries)
            held = checkpoints.check(engine, heads, report.entries)
    finally:
        engine.dispose()
    took = time.perf_counter() - began
    findings = report.findings
    for line in findings[:MAX_SHOWN]:
        print(line)
    if len(findings) > MAX_SHOWN:
        print(f"... and {len(findings) - MAX_SHOWN:,} more")
    verdict = "intact" if report.intact else f"{len(findings):,} problems"
    if keys:
        print(f"{held:,} chains held against their signed checkpoints")
    if key is None:
        print("the records, outcomes and links were not checked themselves (no HMAC key)")
        print(f"checked in {took:.1f} s: {verdict}")
    else:
        print(
            f"{report.records:,} records in {report.links:,} links checked in {took:.1f} s "
            f"({report.outcomes:,} outcomes): {verdict}"
        )
    return 0 if report.intact else 1
