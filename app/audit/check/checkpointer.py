"""The server's side of :mod:`app.audit.check.checkpoints`: every ``IABMA_AUDIT_CHECKPOINT_
SECONDS`` and at shutdown, sign the heads of the chains this process writes (its
records' writer's and its outcome chains) and write them outside the database: a line
appended to ``IABMA_AUDIT_CHECKPOINT_FILE`` (fsynced) and a log line.

A head is signed only once this process has checked every link up to it against the key
and the link before it, reading the links it has not checked yet: a link rewritten in
the database before the checkpoint is logged as an error, and never signed. Each worker
signs its own chains, so workers sharing a file each append their lines.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Engine, select

from app.audit.check.chain_links import as_link
from app.audit.check.checkpoints import Head, private_key, signed
from app.audit.store.chain import chain_key, expected_mac, genesis, outcome_key
from app.audit.store.engine import make_engine
from app.audit.store.hashkey import audit_hash_key
from app.audit.store.records import iso_from_us, now_us
from app.audit.store.tables import CHAIN_TABLES, OUTCOMES, RECORDS, chains
from app.audit.write.outcome_chain import owner
from app.errors import StartupRefused
from app.settings import Settings

log = logging.getLogger("iabma.audit")
# Checkpoints reach the log stream whatever IABMA_LOG_LEVEL says.
stream = logging.getLogger("iabma.audit.checkpoint")
stream.setLevel(logging.INFO)


@dataclass
class _Chain:
    kind: str
    key: bytes
    seq: int
    mac: bytes


class Checkpointer:
    """Signs this process's chains' heads; :meth:`tick` once, :meth:`run` for ever."""

    def __init__(
        self,
        engine: Engine,
        chain_key: bytes,
        signing: Ed25519PrivateKey,
        path: Path | None,
        since_us: int,
        who: str | None = None,
    ) -> None:
        """The chains of ``who`` (this process) started at or after ``since_us``."""
        self.engine = engine
        self.keys = {RECORDS: chain_key, OUTCOMES: outcome_key(chain_key)}
        self.signing = signing
        self.path = path
        self.since_us = since_us
        self.owner = who or owner()
        self.chains: dict[int, _Chain] = {}
        self._signed: dict[int, int] = {}  # per chain, the seq of the last checkpoint

    def tick(self, final: bool = False) -> str | None:
        """Check the links written since the last tick and sign the heads; the line
        written, or None when no head moved (a final one is always written)."""
        self._discover()
        for chain, state in self.chains.items():
            self._advance(chain, state)
        heads = {c: s for c, s in self.chains.items() if s.seq > 0}
        moved = any(self._signed.get(c) != s.seq for c, s in heads.items())
        if not moved and not final:
            return None
        at = now_us()
        doc = {
            "at": iso_from_us(at),
            "at_us": at,
            "owner": self.owner,
            "final": final,
            "heads": [Head(s.kind, c, s.seq, s.mac, at).json() for c, s in sorted(heads.items())],
        }
        line = signed(doc, self.signing)
        if self.path is not None:
            _append(self.path, line)
        stream.info(line)
        self._signed = {c: s.seq for c, s in heads.items()}
        return line

    def _discover(self) -> None:
        """This process's chains not known yet (all of them, not those past the newest
        known: two started together may commit out of their ids' order)."""
        c = chains.c
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(c.id, c.kind)
                .where(c.owner == self.owner, c.started_us >= self.since_us)
                .order_by(c.id)
            ).all()
        for row in rows:
            chain, kind = int(row[0]), str(row[1])
            if chain not in self.chains and kind in self.keys:
                key = self.keys[kind]
                self.chains[chain] = _Chain(kind, key, 0, genesis(key, chain))

    def _advance(self, chain: int, state: _Chain) -> None:
        """Move ``state`` over the chain's links after it that check out."""
        table = CHAIN_TABLES[state.kind][0]
        c = table.c
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(c.chain, c.seq, c.created_us, c.digests, c.prev, c.mac)
                .where(c.chain == chain, c.seq > state.seq)
                .order_by(c.seq)
            ).all()
        for row in rows:
            link = as_link(row)
            ok = link is not None and link.seq == state.seq + 1 and link.prev == state.mac
            if not ok or link is None or expected_mac(state.key, link) != link.mac:
                log.error(
                    "audit checkpoint: %s chain %d link %s does not follow link %d as written "
                    "(altered in the database?); its head stays at link %d",
                    state.kind, chain, row[1], state.seq, state.seq,
                )  # fmt: skip
                return
            state.seq, state.mac = link.seq, link.mac

    async def run(self, every_s: float) -> None:
        """Tick every ``every_s`` seconds, on a worker thread, until cancelled."""
        while True:
            await asyncio.sleep(every_s)
            try:
                await asyncio.to_thread(self.tick)
            except Exception as exc:  # the next tick tries again; serving goes on
                log.error("audit checkpoint failed: %s", exc)

    async def close(self) -> None:
        """The final checkpoint, then the engine."""
        try:
            await asyncio.to_thread(self.tick, True)
        except Exception as exc:
            log.error("audit checkpoint at shutdown failed: %s", exc)
        finally:
            self.engine.dispose()


def _append(path: Path, line: str) -> None:
    """One write of the whole line to the file's end, then to the disk: lines of workers
    sharing the file never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def make(url: str, timeout_seconds: float, **kw: Any) -> Checkpointer:
    """A checkpointer on an engine of its own (it outlives the service's at shutdown)."""
    return Checkpointer(make_engine(url, timeout_seconds), **kw)


def from_settings(settings: Settings, since_us: int) -> Checkpointer | None:
    """The server's checkpointer (of its chains started at or after ``since_us``), or
    None without ``IABMA_AUDIT_SIGNING_KEY``; a setting it cannot use refuses the start."""
    if not settings.audit_enabled or not settings.audit_chain:
        return None
    if settings.audit_signing_key is None:
        if settings.audit_checkpoint_file is not None:
            raise StartupRefused(
                "IABMA_AUDIT_CHECKPOINT_FILE is set but IABMA_AUDIT_SIGNING_KEY (or _FILE) is "
                "not: give the Ed25519 key that signs the checkpoints (iabma audit-keygen)"
            )
        log.info("no IABMA_AUDIT_SIGNING_KEY: the audit chains' heads are not checkpointed")
        return None
    try:
        signing = private_key(settings.audit_signing_key.get_secret_value())
    except ValueError as exc:
        raise StartupRefused(f"IABMA_AUDIT_SIGNING_KEY: {exc}") from None
    path = settings.audit_checkpoint_file
    if path is not None:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        except OSError as exc:
            raise StartupRefused(
                f"IABMA_AUDIT_CHECKPOINT_FILE: cannot append to {str(path)!r}: {exc}"
            ) from None
    chain = chain_key(audit_hash_key(settings))
    return make(
        settings.audit_url,
        settings.audit_timeout_seconds,
        chain_key=chain,
        signing=signing,
        path=path,
        since_us=since_us,
    )
