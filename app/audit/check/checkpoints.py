"""Signed checkpoints of the chains' heads, kept outside the database: what they say, how
they are signed (Ed25519), read back and held against a trail.

A chain's head lives in the database it protects, so deleting a chain's newest links
with their records, or a whole chain, leaves a trail that verifies: a chain that seems
to have stopped. A checkpoint is a JSON line, signed with a key the database never sees,
naming each chain's newest link (its place and MAC) at a moment; it goes to a file and
to the log stream (:mod:`app.audit.check.checkpointer` writes them). Anyone holding the public
key can then hold a trail against them: a checkpointed link missing from the trail (and
not behind its chain's cut) was deleted; one whose MAC differs was rewritten. The public
key cannot sign one.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from sqlalchemy import Engine, func, select

from app.audit.store.records import iso_from_us
from app.audit.store.tables import CHAIN_TABLES, RECORDS

MARK = "iabma_audit_checkpoint"
FORMAT = 1


def key_id(public: Ed25519PublicKey) -> str:
    """A short name of a public key: the first 16 hex digits of the SHA-256 of its bytes."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def private_key(pem: str) -> Ed25519PrivateKey:
    """An Ed25519 private key from its PEM (``openssl genpkey -algorithm ed25519``)."""
    try:
        key = serialization.load_pem_private_key(pem.encode("utf-8"), password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(
            f"a {type(key).__name__.removesuffix('PrivateKey')} key; give an Ed25519 one"
        )
    return key


def public_key(path: Path) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM file (``openssl pkey -pubout``)."""
    data = path.read_bytes()
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise ValueError(f"{path} holds no PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{path} holds a {type(key).__name__} key; give an Ed25519 one")
    return key


def _payload(doc: dict[str, Any]) -> bytes:
    body = {k: v for k, v in doc.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def signed(doc: dict[str, Any], key: Ed25519PrivateKey) -> str:
    """``doc`` with its key's id and signature, as one JSON line (no newline)."""
    doc = {MARK: FORMAT, **doc, "key_id": key_id(key.public_key())}
    doc["signature"] = base64.b64encode(key.sign(_payload(doc))).decode("ascii")
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Head:
    """A chain's newest link as a checkpoint names it."""

    kind: str  # RECORDS or OUTCOMES
    chain: int
    seq: int
    mac: bytes
    at_us: int  # the checkpoint's time

    def json(self) -> dict[str, Any]:
        return {"kind": self.kind, "chain": self.chain, "seq": self.seq, "mac": self.mac.hex()}


def _doc_of(line: str) -> dict[str, Any] | None:
    """The checkpoint a line holds: a checkpoint line, or a log line (JSON or text) whose
    message is one; None for any other line."""
    start = line.find("{")
    if start < 0 or MARK not in line:
        return None
    try:
        found = json.loads(line[start:])
    except ValueError:
        return None
    if isinstance(found, dict) and MARK not in found and isinstance(found.get("message"), str):
        return _doc_of(found["message"])
    return found if isinstance(found, dict) and MARK in found else None


def read(paths: Iterable[Path], keys: list[Ed25519PublicKey], findings: list[Any]) -> list[Head]:
    """Every head named by a checkpoint in ``paths`` that one of ``keys`` signed; a line
    that claims to be a checkpoint and is not signed so is a finding."""
    by_id = {key_id(k): k for k in keys}
    heads: list[Head] = []
    for path in paths:
        good = 0
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                doc = _doc_of(line)
                if doc is None:
                    continue
                found = _heads(doc, by_id)
                if found is None:
                    findings.append(
                        f"checkpoints: {path} line {n} is not a checkpoint signed by the "
                        "public key given (altered, or signed by another key)"
                    )
                    continue
                heads += found
                good += 1
        if not good:
            findings.append(f"checkpoints: {path} holds no checkpoint signed by the public key")
    return heads


def _heads(doc: dict[str, Any], keys: dict[str, Ed25519PublicKey]) -> list[Head] | None:
    key = keys.get(str(doc.get("key_id")))
    try:
        signature = base64.b64decode(str(doc.get("signature")), validate=True)
        if key is None or doc.get(MARK) != FORMAT:
            return None
        key.verify(signature, _payload(doc))
        at = int(doc["at_us"])
        return [
            Head(str(h["kind"]), int(h["chain"]), int(h["seq"]), bytes.fromhex(h["mac"]), at)
            for h in doc["heads"]
        ]
    except (InvalidSignature, ValueError, KeyError, TypeError):
        return None


def newest(heads: Iterable[Head]) -> dict[tuple[str, int], Head]:
    """Per chain, the newest link any checkpoint names."""
    out: dict[tuple[str, int], Head] = {}
    for h in heads:
        if h.kind in CHAIN_TABLES and (
            (h.kind, h.chain) not in out or out[h.kind, h.chain].seq < h.seq
        ):
            out[(h.kind, h.chain)] = h
    return out


def check(engine: Engine, heads: Iterable[Head], findings: list[Any]) -> int:
    """Hold the trail against ``heads``: each chain's newest checkpointed link must be in
    it with the MAC signed, or behind the chain's cut. The number of chains checked."""
    wanted = newest(heads)
    for (kind, chain), head in sorted(wanted.items()):
        links_t, cuts_t = CHAIN_TABLES[kind]
        label = "chain" if kind == RECORDS else "outcome chain"
        when = f"checkpointed at {iso_from_us(head.at_us)}"
        with engine.connect() as conn:
            mac = conn.execute(
                select(links_t.c.mac).where(links_t.c.chain == chain, links_t.c.seq == head.seq)
            ).scalar()
            top = conn.execute(
                select(func.max(links_t.c.seq)).where(links_t.c.chain == chain)
            ).scalar()
            cut = conn.execute(select(cuts_t.c.through_seq).where(cuts_t.c.chain == chain)).scalar()
        if mac is not None:
            if bytes(mac) != head.mac:
                findings.append(f"altered: {label} {chain} link {head.seq}, not the link {when}")
            continue
        if isinstance(cut, int) and cut >= head.seq:
            continue  # pruned or archived behind a cut (its MAC is checked with the key)
        what = "records" if kind == RECORDS else "outcomes"
        if top is None and cut is None:
            findings.append(
                f"deleted: {label} {chain}, every link and its {what} ({when} through link "
                f"{head.seq})"
            )
        else:
            last = top if isinstance(top, int) else cut
            findings.append(
                f"deleted: {label} {chain} links {int(last or 0) + 1} to {head.seq} and their "
                f"{what} ({when})"
            )
    return len(wanted)
