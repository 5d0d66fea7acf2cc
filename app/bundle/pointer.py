"""Which version of a bundle is served: the ``LATEST`` pointer and its ``HISTORY`` stack.

``LATEST`` is only replaced by an atomic rename; publishing or promoting pushes a version
on ``HISTORY``, rolling back pops it. Both change under a lock on ``.pointer.lock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.bundle.loader import BundleError, open_bundle
from app.bundle.manifest import LATEST_FILE, MANIFEST_FILE, check_safe_name

HISTORY_FILE = "HISTORY"
LOCK_FILE = ".pointer.lock"


class RolloutError(ValueError):
    """A promotion or rollback that cannot be made; the message says why."""


@dataclass(frozen=True)
class Move:
    name: str
    old: str | None
    new: str

    def describe(self) -> str:
        return f"{self.name}: {self.old or '(none)'} -> {self.new}"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    with (root / LOCK_FILE).open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def current(root: Path) -> str | None:
    latest = root / LATEST_FILE
    return latest.read_text(encoding="utf-8").strip() or None if latest.is_file() else None


def history(root: Path) -> list[str]:
    """The versions ``LATEST`` has named, oldest first; the current one last."""
    file = root / HISTORY_FILE
    if not file.is_file():
        return []
    return [v for v in (line.strip() for line in file.read_text("utf-8").splitlines()) if v]


def _point(root: Path, version: str, stack: list[str]) -> None:
    _write_atomic(root / HISTORY_FILE, "".join(v + "\n" for v in stack))
    _write_atomic(root / LATEST_FILE, version + "\n")


def publish_latest(root: Path, version: str) -> Move:
    """Point ``LATEST`` at ``version`` (already verified by its writer) and record it."""
    with _locked(root):
        old = current(root)
        stack = history(root) or ([old] if old else [])
        if not stack or stack[-1] != version:
            stack.append(version)
        _point(root, version, stack)
    return Move(root.name, old, version)


def _root(store: Path, name: str) -> Path:
    try:
        check_safe_name(name, "--name")
    except ValueError as exc:
        raise RolloutError(str(exc)) from None
    root = Path(store) / name
    if not root.is_dir():
        raise RolloutError(f"no bundle named {name!r} under {store}")
    return root


def verify(root: Path, version: str) -> None:
    """Open the version as a server would: manifest, checksums and every graph."""
    try:
        check_safe_name(version, "VERSION")
    except ValueError as exc:
        raise RolloutError(str(exc)) from None
    path = root / version
    if not path.is_dir():
        known = ", ".join(sorted(p.name for p in root.iterdir() if (p / MANIFEST_FILE).is_file()))
        raise RolloutError(f"version {version!r} does not exist under {root}; there are: {known}")
    try:
        open_bundle(path)
    except BundleError as exc:
        raise RolloutError(f"version {version!r} fails verification: {exc}") from None


def promote(store: Path, name: str, version: str) -> Move:
    """Verify ``version`` and make it the one every server follows."""
    root = _root(store, name)
    verify(root, version)
    return publish_latest(root, version)


def rollback(store: Path, name: str) -> Move:
    """Serve again the version ``LATEST`` named before the current one."""
    root = _root(store, name)
    with _locked(root):
        old = current(root)
        stack = history(root)
        if old is None:
            raise RolloutError(f"{root / LATEST_FILE} is missing: nothing is served to roll back")
        if not stack or stack[-1] != old:
            stack.append(old)  # LATEST was moved by hand; roll back from where it is
        if len(stack) < 2:
            raise RolloutError(
                f"{name!r} has no earlier version in {root / HISTORY_FILE}; "
                "name the one to serve with: iabma promote"
            )
        stack.pop()
        target = stack[-1]
        verify(root, target)
        _point(root, target, stack)
    return Move(name, old, target)
