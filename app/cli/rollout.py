"""``iabma promote`` and ``iabma rollback``: move a bundle's ``LATEST`` for the whole fleet.

Every worker of every replica checks ``LATEST`` every ``IABMA_RELOAD_INTERVAL_SECONDS``
and loads the version it names in the background, so moving the pointer is the rollout.
Promotion verifies the version first (manifest, checksums, graphs), as a server would.
``--if-better-live`` promotes the version ``STAGED`` names instead, only on the evidence of
the outcomes it was scored on in shadow (see ``iabma stage --help``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.cli import stage
from app.cli.text import command
from app.errors import CommandError


def add_parsers(sub: Any) -> None:
    p = command(
        sub,
        "promote",
        "verify a version and point LATEST at it; every server follows",
        __doc__,
    )
    p.add_argument("--store", type=Path, default=Path("models_store"))
    p.add_argument("--name", required=True, help="bundle name")
    p.add_argument("version", metavar="VERSION", nargs="?", help="the version directory to serve")
    stage.add_live_arguments(p)
    p.set_defaults(run=run_promote)

    r = command(sub, "rollback", "point LATEST back at the version it named before", __doc__)
    r.add_argument("--store", type=Path, default=Path("models_store"))
    r.add_argument("--name", required=True, help="bundle name")
    r.set_defaults(run=run_rollback)


def run_promote(args: argparse.Namespace) -> int:
    from app.bundle.pointer import promote

    if args.if_better_live:
        return stage.run_promote_live(args)
    if args.version is None:
        raise CommandError("give the VERSION to promote, or --if-better-live for the staged one")
    move = stage.moved(promote, args.store, args.name, args.version)
    print(move.describe())
    return 0


def run_rollback(args: argparse.Namespace) -> int:
    from app.bundle.pointer import rollback

    move = stage.moved(rollback, args.store, args.name)
    print(move.describe())
    return 0
