"""``iabma promote`` and ``iabma rollback``: move a bundle's ``LATEST`` for the whole fleet.

Every worker of every replica checks ``LATEST`` every ``IABMA_RELOAD_INTERVAL_SECONDS``
and loads the version it names in the background, so moving the pointer is the rollout.
Promotion verifies the version first (manifest, checksums, graphs), as a server would.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.cli.errors import CommandError
from app.cli.text import help_text


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "promote",
        help="verify a version and point LATEST at it; every server follows",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--store", type=Path, default=Path("models_store"))
    p.add_argument("--name", required=True, help="bundle name")
    p.add_argument("version", metavar="VERSION", help="the version directory to serve")
    p.set_defaults(run=run_promote)

    r = sub.add_parser(
        "rollback",
        help="point LATEST back at the version it named before",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("--store", type=Path, default=Path("models_store"))
    r.add_argument("--name", required=True, help="bundle name")
    r.set_defaults(run=run_rollback)


def run_promote(args: argparse.Namespace) -> int:
    from app.bundle.pointer import RolloutError, promote

    try:
        move = promote(args.store, args.name, args.version)
    except RolloutError as exc:
        raise CommandError(str(exc)) from None
    print(move.describe())
    return 0


def run_rollback(args: argparse.Namespace) -> int:
    from app.bundle.pointer import RolloutError, rollback

    try:
        move = rollback(args.store, args.name)
    except RolloutError as exc:
        raise CommandError(str(exc)) from None
    print(move.describe())
    return 0
