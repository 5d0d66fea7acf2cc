"""The versions of the served bundle in the store, read-only, for the console's bundle view.

The store's writers (``iabma publish``, ``promote``, ``rollback``) own ``LATEST`` and
``HISTORY``; here they are only read. A version is a directory holding ``manifest.json``;
its creation time is read from that file without validating the rest of it, so one
unreadable version does not hide the others.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from app.bundle.manifest import LATEST_FILE, MANIFEST_FILE

HISTORY_FILE = "HISTORY"


@dataclass(frozen=True)
class StoredVersion:
    name: str
    created_at: str | None
    latest: bool
    serving: bool
    in_history: bool


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _created_at(manifest: Path) -> str | None:
    text = _read_text(manifest)
    try:
        value = json.loads(text).get("created_at") if text else None
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def stored_versions(store: Path, name: str, serving: str) -> list[StoredVersion]:
    """Every version directory of ``name`` with a manifest, newest first."""
    root = Path(store) / name
    latest = (_read_text(root / LATEST_FILE) or "").strip() or None
    history = {
        line.strip() for line in (_read_text(root / HISTORY_FILE) or "").splitlines() if line
    }
    try:
        dirs = [d for d in root.iterdir() if d.is_dir() and (d / MANIFEST_FILE).is_file()]
    except OSError:
        dirs = []
    found = [
        StoredVersion(
            name=d.name,
            created_at=_created_at(d / MANIFEST_FILE),
            latest=d.name == latest,
            serving=d.name == serving,
            in_history=d.name in history,
        )
        for d in dirs
    ]
    return sorted(found, key=lambda v: (v.created_at or "", v.name), reverse=True)
