"""The trail's tamper evidence: each group commit extends a chain of HMAC links.

A link covers its group's records by an 8-byte digest of each (in their order) and names
the link before it; its MAC is keyed, so a record edited, deleted or inserted in the
database by anyone without the key breaks a digest or a link (:mod:`app.audit.verify`
finds which). Each writer connection starts a chain of its own (``iabma_audit_chains``):
a commit whose outcome is unknown (a connection lost at COMMIT) can never fork one.
"""

from __future__ import annotations

import hashlib
import hmac
import marshal
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

DIGEST_BYTES = 8  # per record: a second preimage of 64 bits is out of reach; 8 B a record
_KEY_LABEL = b"iabma-audit-chain/1"


def chain_key(hash_key: bytes) -> bytes:
    """The chain's key, derived from the trail's HMAC key (IABMA_AUDIT_HASH_KEY) so that
    one secret serves both, and a hash of an input is never a link's MAC."""
    return hmac.new(hash_key, _KEY_LABEL, hashlib.sha256).digest()


def row_digest(row: Sequence[Any]) -> bytes:
    """The digest a link keeps of one record's stored values (its columns in order).

    marshal's version 0 writes no back-references, so equal values give equal bytes
    whichever objects hold them, from the writer's row or read back from SQLite,
    PostgreSQL or Parquet; 1.6 us a record where a hand-written encoding took 15 (a
    million records verify in seconds).
    """
    try:
        data = marshal.dumps(tuple(row), 0)
    except ValueError:  # a driver's memoryview: its bytes are the value
        data = marshal.dumps(tuple(bytes(v) if isinstance(v, memoryview) else v for v in row), 0)
    return hashlib.sha256(data).digest()[:DIGEST_BYTES]


def genesis(key: bytes, chain: int) -> bytes:
    """What the first link of ``chain`` names as the link before it."""
    return hmac.new(key, b"genesis" + struct.pack("<q", chain), hashlib.sha256).digest()


@dataclass(frozen=True)
class Link:
    """One row of ``iabma_audit_links``."""

    chain: int
    seq: int  # 1, 2, ... within the chain
    created_us: int
    digests: bytes  # DIGEST_BYTES per record, in the records' order
    prev: bytes
    mac: bytes

    def values(self) -> tuple[Any, ...]:
        return (self.chain, self.seq, self.created_us, self.digests, self.prev, self.mac)

    @property
    def count(self) -> int:
        return len(self.digests) // DIGEST_BYTES

    def digest_list(self) -> list[bytes]:
        d = self.digests
        return [d[k : k + DIGEST_BYTES] for k in range(0, len(d), DIGEST_BYTES)]


LINK_COLUMNS = ("chain", "seq", "created_us", "digests", "prev", "mac")


def link_mac(
    key: bytes, chain: int, seq: int, created_us: int, digests: bytes, prev: bytes
) -> bytes:
    head = struct.pack("<qqqI", chain, seq, created_us, len(digests))
    return hmac.new(key, prev + head + digests, hashlib.sha256).digest()


def expected_mac(key: bytes, link: Link) -> bytes:
    return link_mac(key, link.chain, link.seq, link.created_us, link.digests, link.prev)


def cut_mac(key: bytes, chain: int, through_seq: int, mac_at: bytes, before_us: int) -> bytes:
    """A cut says: ``chain``'s links through ``through_seq`` (the last with MAC ``mac_at``)
    were pruned or archived, with their records older than ``before_us``. Keyed, so that
    nobody without the key can move it to hide a deletion."""
    head = b"cut" + struct.pack("<qqq", chain, through_seq, before_us)
    return hmac.new(key, head + mac_at, hashlib.sha256).digest()


class ChainHead:
    """The writer's end of its chain: the next link is built from it, and it moves only
    once that link's commit succeeded."""

    def __init__(self, key: bytes, chain: int) -> None:
        self.key = key
        self.chain = chain
        self.seq = 0
        self.mac = genesis(key, chain)

    def next_link(self, rows: Sequence[Sequence[Any]], created_us: int, width: int) -> Link:
        """The link over ``rows``' first ``width`` values (the stored columns a verifier
        reads back; a migration appends the record's old id after them)."""
        digests = b"".join(row_digest(r[:width]) for r in rows)
        seq = self.seq + 1
        mac = link_mac(self.key, self.chain, seq, created_us, digests, self.mac)
        return Link(self.chain, seq, created_us, digests, self.mac, mac)

    def advanced(self, link: Link) -> None:
        self.seq, self.mac = link.seq, link.mac
