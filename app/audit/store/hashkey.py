"""The trail's key: inputs are kept as an HMAC-SHA256 of it (``hash`` mode), and the
tamper-evident chain is keyed by a key derived from it (:mod:`app.audit.store.chain`).

From ``IABMA_AUDIT_HASH_KEY`` (or ``_FILE``); a SQLite trail without one gets a random key
kept beside it, a PostgreSQL trail refuses to start (docs/design.md, "Audit trail").
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
from pathlib import Path

from sqlalchemy.engine import make_url

from app.errors import StartupRefused
from app.settings import Settings

log = logging.getLogger("iabma.audit")
MIN_KEY_CHARS = 16
KEY_SUFFIX = ".hmac-key"


def key_file_for(sqlite_database: str) -> Path:
    trail = Path(sqlite_database)
    return trail.with_name(trail.name + KEY_SUFFIX)


def audit_hash_key(settings: Settings, make: bool = True) -> bytes:
    """The key to hash inputs with; raises :class:`StartupRefused` when there is none.
    ``make=False`` (a command checking a trail) never makes a new one for SQLite."""
    if settings.audit_hash_key is not None:
        key = settings.audit_hash_key.get_secret_value()
        if len(key) < MIN_KEY_CHARS:
            raise StartupRefused(
                f"IABMA_AUDIT_HASH_KEY is {len(key)} characters; use at least "
                f"{MIN_KEY_CHARS}, e.g. the output of: python -c "
                "'import secrets; print(secrets.token_hex(32))'"
            )
        return key.encode("utf-8")
    url = make_url(settings.audit_url)
    if url.get_backend_name() != "sqlite":
        raise StartupRefused(
            "IABMA_AUDIT_HASH_KEY is not set: every replica writing to one PostgreSQL trail "
            "must hash inputs and seal its chain with the same key. Set IABMA_AUDIT_HASH_KEY (or "
            "IABMA_AUDIT_HASH_KEY_FILE) to one secret, e.g. the output of: python -c "
            "'import secrets; print(secrets.token_hex(32))'"
        )
    assert url.database is not None  # normalise_audit_url refuses in-memory trails
    path = key_file_for(url.database)
    if not make and not path.exists():
        raise StartupRefused(
            f"no key: IABMA_AUDIT_HASH_KEY (or _FILE) is not set and {path} does not exist"
        )
    return local_key(path)


def local_key(path: Path) -> bytes:
    """The key kept at ``path``, made there first if there is none. Written to a file of its
    own and then linked into place, so that workers starting together never read a key
    file before the whole key is in it: the first link wins and the others read its key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        key = secrets.token_hex(32)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(key + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.link(tmp, path)
        except FileExistsError:
            pass
        else:
            _sync_dir(path.parent)
            log.info("made an audit hash key at %s (keep it with the trail)", path)
            return key.encode("utf-8")
        finally:
            os.unlink(tmp)
    key = path.read_text(encoding="utf-8").strip()
    if len(key) < MIN_KEY_CHARS:
        raise StartupRefused(
            f"the audit hash key file {path} holds {len(key)} characters; remove it to "
            "have a new key made, or set IABMA_AUDIT_HASH_KEY"
        )
    if path.stat().st_mode & 0o077:
        log.warning("the audit hash key file %s is readable by others; chmod 600 it", path)
    return key.encode("utf-8")


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
