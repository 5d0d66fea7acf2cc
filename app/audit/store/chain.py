"""The trail's tamper evidence: each group commit extends a chain of HMAC links.

A link covers its group's records by an 8-byte digest of each (in their order) and names
the link before it; its MAC is keyed, so a record edited, deleted or inserted in the
database by anyone without the key breaks a digest or a link (:mod:`app.audit.check.verify`
finds which). Each writer connection starts a chain of its own (``iabma_audit_chains``):
a commit whose outcome is unknown (a connection lost at COMMIT) can never fork one.
Outcomes are chained alike under a key of their own, each entry naming its record
(:data:`ENTRY_BYTES`), and each row of ``iabma_audit_versions`` carries a MAC of its id
and values (:func:`version_mac`).
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
# Per outcome in an outcome link: its record's id (little-endian int64), then its digest.
ENTRY_BYTES = 8 + DIGEST_BYTES
_KEY_LABEL = b"iabma-audit-chain/1"
_OUTCOME_LABEL = b"iabma-outcome-chain/1"
_VERSION_LABEL = b"iabma-audit-version/1"


def chain_key(hash_key: bytes) -> bytes:
    """The chain's key, derived from the trail's HMAC key (IABMA_AUDIT_HASH_KEY) so that
    one secret serves both, and a hash of an input is never a link's MAC."""
    return hmac.new(hash_key, _KEY_LABEL, hashlib.sha256).digest()


def outcome_key(key: bytes) -> bytes:
    """The key of the outcome chains, derived from the chain key: a link of one kind can
    never pass for a link of the other."""
    return hmac.new(key, _OUTCOME_LABEL, hashlib.sha256).digest()


def row_digest(row: Sequence[Any]) -> bytes:
    """The digest a link keeps of one record's stored values (its columns in order).

    marshal's version 0 writes no back-references, so equal values give equal bytes
    whichever objects hold them, from the writer's row or read back from SQLite,
    PostgreSQL or Parquet; 1.6 us a record where a hand-written encoding took 15 (a
    million records verify in seconds). A value of a type the server never writes (one
    read back from a hostile row) gets a digest no stored row can have.
    """
    try:
        data = marshal.dumps(tuple(row), 0)
    except ValueError:  # a driver's memoryview: its bytes are the value
        values = tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
        try:
            data = marshal.dumps(values, 0)
        except ValueError:
            data = b"\x00not-marshalled:" + repr(values).encode("utf-8", "replace")
    return hashlib.sha256(data).digest()[:DIGEST_BYTES]


def entry(record_id: int, digest: bytes) -> bytes:
    """An outcome's entry in its link: its record's id, then its digest."""
    return struct.pack("<q", record_id) + digest


def entries(digests: bytes) -> list[tuple[int, bytes]]:
    """An outcome link's entries as ``(record id, digest)``."""
    return [
        (struct.unpack_from("<q", digests, k)[0], digests[k + 8 : k + ENTRY_BYTES])
        for k in range(0, len(digests) - ENTRY_BYTES + 1, ENTRY_BYTES)
    ]


def version_mac(key: bytes, version_id: int, values: Sequence[Any]) -> bytes:
    """The MAC of a row of ``iabma_audit_versions``: its id and its key's values (model,
    version, route, task, input mode, experts, classes), so that neither a value nor the
    id it sits under can change unseen."""
    data = marshal.dumps((int(version_id), *values), 0)
    return hmac.new(key, _VERSION_LABEL + data, hashlib.sha256).digest()


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
        return self.link_over(b"".join(row_digest(r[:width]) for r in rows), created_us)

    def link_over(self, digests: bytes, created_us: int) -> Link:
        """The next link, over ``digests`` as they are to be stored."""
        seq = self.seq + 1
        mac = link_mac(self.key, self.chain, seq, created_us, digests, self.mac)
        return Link(self.chain, seq, created_us, digests, self.mac, mac)

    def advanced(self, link: Link) -> None:
        self.seq, self.mac = link.seq, link.mac
