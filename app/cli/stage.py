"""``iabma stage`` and ``iabma unstage``: score a version in shadow beside the served one;
and ``iabma promote --if-better-live``: promote it on the realised outcomes.

``STAGED`` sits beside ``LATEST``; every worker follows it, runs the staged gate on the
served experts' outputs for each request, and keeps the staged answer in the trail. The
answer each user gets stays the served version's. Staging refuses a version that served
requests cannot feed (a feature they do not carry), naming why.

``--if-better-live`` reads the trail (``IABMA_AUDIT_URL``) and promotes the staged
version only when, over at least ``--min-rows`` outcome rows scored under both versions,
its mean NLL is lower than the served one's by more than the paired standard error of
that difference (and by more than 1e-6 nats, the graphs' float rounding); otherwise it
says which rule failed. ``EVIDENCE``, beside ``HISTORY``,
records the figures that promoted it. Exit code 3: not promoted, and why is printed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from app.cli.text import command
from app.errors import CommandError, option_fault

DEFAULT_MIN_ROWS = 200
# An advantage below this (nats per row) is the graphs' float32 rounding, not evidence: the
# served version staged as itself differs from itself by ~1e-9, with an SE smaller still.
FLOAT_NOISE = 1e-6
_Move = TypeVar("_Move")


def moved(move: Callable[..., _Move], *args: Any) -> _Move:
    """Run a pointer move (:mod:`app.bundle.pointer`, :mod:`app.bundle.staged`); its
    refusal becomes the CLI's one-line error."""
    from app.bundle.pointer import RolloutError

    try:
        return move(*args)
    except RolloutError as exc:
        raise CommandError(str(exc)) from None


def add_parsers(sub: Any) -> None:
    summary = "point STAGED at a version: every server scores it in shadow"
    p = command(sub, "stage", summary, __doc__)
    p.add_argument("--store", type=Path, default=Path("models_store"))
    p.add_argument("--name", required=True, help="bundle name")
    p.add_argument("version", metavar="VERSION", help="the version directory to stage")
    p.set_defaults(run=run_stage)

    u = command(sub, "unstage", "remove STAGED: the servers stop the shadow", __doc__)
    u.add_argument("--store", type=Path, default=Path("models_store"))
    u.add_argument("--name", required=True, help="bundle name")
    u.set_defaults(run=run_unstage)


def add_live_arguments(p: argparse.ArgumentParser) -> None:
    """``iabma promote``'s options for promotion on live evidence."""
    p.add_argument(
        "--if-better-live",
        action="store_true",
        help="promote the staged version (no VERSION) if its realised paired NLL advantage "
        "exceeds its SE on at least --min-rows outcome rows",
    )
    p.add_argument(
        "--min-rows",
        type=int,
        default=DEFAULT_MIN_ROWS,
        help=f"outcome rows scored under both versions needed (default {DEFAULT_MIN_ROWS})",
    )
    p.add_argument(
        "--audit-url", default=None, help="the trail's SQLAlchemy URL (default IABMA_AUDIT_URL)"
    )


def run_stage(args: argparse.Namespace) -> int:
    from app.bundle.staged import stage

    move = moved(stage, args.store, args.name, args.version)
    print(f"staged {move.describe()}")
    return 0


def run_unstage(args: argparse.Namespace) -> int:
    from app.bundle.staged import unstage

    move = moved(unstage, args.store, args.name)
    print(f"unstaged {move.old}" if move else f"{args.name}: nothing was staged")
    return 0


def _g(x: float | None, digits: int) -> str:
    return "none" if x is None else f"{x:.{digits}g}"


def decide(block: dict[str, Any], min_rows: int) -> str | None:
    """Why the evidence does not promote, or None when it does."""
    rows, diff, se = block["rows"], block["nll_diff"], block["paired_se"]
    if rows < min_rows:
        return f"only {rows} outcome rows are scored under both versions; --min-rows is {min_rows}"
    if se is None or diff is None:
        return "too few rows to estimate the paired SE"
    if not -diff > se:
        return (
            f"the staged version's NLL advantage {-diff:.6g} does not exceed its paired SE {se:.6g}"
        )
    if not -diff > FLOAT_NOISE:
        return f"the staged version's NLL advantage {-diff:.3g} is float rounding (< 1e-6)"
    return None


def run_promote_live(args: argparse.Namespace) -> int:
    from app.audit.read.shadow_scores import compare
    from app.audit.write.trail_db import AuditStore
    from app.bundle.loader import BundleError, read_manifest
    from app.bundle.pointer import current
    from app.bundle.staged import promote_staged, staged
    from app.settings import SettingsError, load_settings

    if args.version is not None:
        raise CommandError(option_fault("VERSION", args.version, "--if-better-live takes none"))
    if args.min_rows < 2:
        raise CommandError(option_fault("--min-rows", str(args.min_rows), "must be at least 2"))
    root = Path(args.store) / args.name
    served, candidate = current(root), staged(root)
    if candidate is None or served is None:
        raise CommandError(f"{args.name}: nothing is staged under {root}: stage one first")
    try:
        settings = load_settings(**({"audit_url": args.audit_url} if args.audit_url else {}))
        old, new = read_manifest(root / served), read_manifest(root / candidate)
    except SettingsError as exc:
        shown = args.audit_url or "IABMA_AUDIT_URL"
        raise CommandError(option_fault("--audit-url", shown, str(exc))) from None
    except BundleError as exc:
        raise CommandError(str(exc)) from None
    store = AuditStore(settings.audit_url, settings.audit_timeout_seconds)
    try:
        block = compare(store.engine, args.name, old, new)
    finally:
        store.close()
    figures = (
        f"{block['rows']} rows, NLL served {_g(block['served_nll'], 6)}, staged "
        f"{_g(block['staged_nll'], 6)}, difference {_g(block['nll_diff'], 4)} "
        f"(SE {_g(block['paired_se'], 2)})"
    )
    why = decide(block, args.min_rows)
    if why is not None:
        print(f"not promoted: {why}; {figures}")
        return 3
    keep = ("rows", "served_nll", "staged_nll", "nll_diff", "paired_se", "since", "until")
    evidence = {"rule": "if-better-live", "min_rows": args.min_rows, **{k: block[k] for k in keep}}
    move = moved(promote_staged, args.store, args.name, evidence)
    print(f"{move.describe()}: better live on {figures}")
    return 0
