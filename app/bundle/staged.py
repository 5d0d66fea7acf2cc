"""The ``STAGED`` pointer: a version scored in shadow beside the one ``LATEST`` serves.

``STAGED`` sits beside ``LATEST``, is replaced by the same atomic rename under the same
lock, and every worker follows it as it follows ``LATEST``. Staging refuses a version the
served one's requests cannot feed (:func:`check_feedable`), naming why; live promotion
(:func:`promote_staged`) moves ``LATEST`` to it, clears ``STAGED`` and appends the
evidence to ``EVIDENCE`` (JSON lines) beside ``HISTORY``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.bundle.loader import BundleError, read_manifest
from app.bundle.manifest import Manifest, check_safe_name
from app.bundle.pointer import (
    Move,
    RolloutError,
    _locked,
    _root,
    _write_atomic,
    current,
    fsync_dir,
    publish_latest,
    verify,
)

STAGED_FILE = "STAGED"
EVIDENCE_FILE = "EVIDENCE"


def staged(root: Path) -> str | None:
    """The version ``STAGED`` names under the bundle directory ``root``, if any."""
    file = Path(root) / STAGED_FILE
    try:
        return file.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def check_feedable(served: Manifest, candidate: Manifest) -> None:
    """Refuse ``candidate`` unless what a request to ``served`` carries feeds its graphs.

    Requests are validated against the served version's features, so every input the
    staged gate and experts read must be one of them, of the same type and categories,
    with the same missing token; the task and classes must match for the two versions'
    answers to be scored on the same outcomes.
    """
    why: list[str] = []
    if candidate.name != served.name:
        why.append(f"it belongs to bundle {candidate.name!r}, not {served.name!r}")
    if candidate.task != served.task:
        why.append(f"its task is {candidate.task}, the served one's is {served.task}")
    elif list(candidate.target.classes or []) != list(served.target.classes or []):
        why.append(
            f"its classes {candidate.target.classes} differ from the served {served.target.classes}"
        )
    if candidate.missing_token != served.missing_token:
        why.append("its missing-value token differs from the served version's")
    have = {f.input: f for f in served.features}
    for f in candidate.features:
        mine = have.get(f.input)
        if mine is None:
            readers = [e.name for e in candidate.experts if f.input in e.inputs]
            who = f"expert {', '.join(readers)}" if readers else "its gate"
            why.append(f"{who} reads feature {f.name!r}, which served requests do not carry")
        elif (mine.dtype, mine.categories, mine.other) != (f.dtype, f.categories, f.other):
            why.append(f"feature {f.name!r} is typed or encoded differently from the served one")
    if why:
        raise RolloutError(f"version {candidate.version!r} cannot be staged: " + "; ".join(why))


def _manifest(root: Path, version: str, what: str) -> Manifest:
    try:
        return read_manifest(root / version)
    except BundleError as exc:
        raise RolloutError(f"{what} version {version!r}: {exc}") from None


def stage(store: Path, name: str, version: str) -> Move:
    """Verify ``version`` as a server would, check that served requests feed it, and
    point ``STAGED`` at it."""
    root = _root(store, name)
    verify(root, version)
    served = current(root)
    if served is None:
        raise RolloutError(f"nothing is served for {name!r} (no LATEST): promote a version first")
    if served == version:
        raise RolloutError(f"version {version!r} is the one served: nothing to compare it with")
    check_feedable(_manifest(root, served, "the served"), _manifest(root, version, "the staged"))
    with _locked(root):
        old = staged(root)
        _write_atomic(root / STAGED_FILE, version + "\n")
    return Move(name, old, version)


def unstage(store: Path, name: str) -> Move | None:
    """Remove ``STAGED``; None when nothing was staged."""
    root = _root(store, name)
    with _locked(root):
        old = staged(root)
        if old is None:
            return None
        (root / STAGED_FILE).unlink()
        fsync_dir(root)
    return Move(name, old, "(none)")


def promote_staged(store: Path, name: str, evidence: dict[str, Any]) -> Move:
    """Point ``LATEST`` at the staged version, clear ``STAGED``, and append ``evidence``
    (with the move) to ``EVIDENCE``; the caller has decided the evidence suffices."""
    root = _root(store, name)
    version = staged(root)
    if version is None:
        raise RolloutError(f"no version of {name!r} is staged: stage one with iabma stage")
    check_safe_name(version, f"version in {root / STAGED_FILE}")
    verify(root, version)
    move = publish_latest(root, version)
    with _locked(root):
        if staged(root) == version:
            (root / STAGED_FILE).unlink()
        line = json.dumps({"from": move.old, "to": version, **evidence}, sort_keys=True)
        with (root / EVIDENCE_FILE).open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        fsync_dir(root)
    return move


def evidence_log(root: Path) -> list[dict[str, Any]]:
    """The live promotions recorded beside ``HISTORY``, oldest first."""
    file = Path(root) / EVIDENCE_FILE
    if not file.is_file():
        return []
    return [json.loads(line) for line in file.read_text("utf-8").splitlines() if line.strip()]
