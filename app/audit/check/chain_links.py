"""One kind of chain's links and cuts as the verifier reads them: each link checked
against the key and the link before it (or its chain's keyed cut), whatever the rows in
the table hold.

A row that is not a link (a NULL, a number stored as text, a digest that is no blob)
is named and left out, never the verifier's crash. Links past a chain's cut are the live
ones; links at or below it still in the table are being pruned (retention writes the cut
first, then removes records, then links), and only their rows' digests are looked up.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, Table, select

from app.audit.store.chain import Link, cut_mac, expected_mac, genesis

INT64 = (-(2**63), 2**63 - 1)
Findings = list[Any]  # lines (str), or findings whose text is made at the end


def _int(value: Any) -> int | None:
    return value if type(value) is int and INT64[0] <= value <= INT64[1] else None


def _blob(value: Any) -> bytes | None:
    if isinstance(value, memoryview):
        return bytes(value)
    return value if isinstance(value, bytes) else None


def as_link(row: Any) -> Link | None:
    """A row of a links table as a :class:`Link`, or None if it cannot be one."""
    chain, seq, created = _int(row[0]), _int(row[1]), _int(row[2])
    digests, prev, mac = _blob(row[3]), _blob(row[4]), _blob(row[5])
    if chain is None or seq is None or created is None:
        return None
    if digests is None or prev is None or mac is None:
        return None
    return Link(chain, seq, created, digests, prev, mac)


@dataclass
class Chains:
    """A kind's links, checked: ``live`` past each chain's cut, ``pruning`` at or below
    it (still in the table), and each chain's cut (the last link it removed)."""

    table: str
    label: str  # how findings name a chain of this kind: "chain", "outcome chain"
    live: dict[tuple[int, int], Link] = field(default_factory=dict)
    pruning: dict[tuple[int, int], Link] = field(default_factory=dict)
    cuts: dict[int, int] = field(default_factory=dict)
    # Per chain, its live links' places in order (where empty links are found).
    seqs: dict[int, list[int]] = field(default_factory=dict)
    _left: dict[tuple[int, int], Counter[bytes]] = field(default_factory=dict)

    def cut(self, chain: int) -> int:
        return self.cuts.get(chain, 0)

    def take_pruned(self, chain: int, seq: int, digest: bytes) -> bool:
        """Whether a row at or below ``chain``'s cut is one its link (still being pruned)
        names, and not one named already."""
        link = self.pruning.get((chain, seq))
        if link is None:
            return False
        left = self._left.get((chain, seq))
        if left is None:
            left = self._left[(chain, seq)] = Counter(link.digest_list())
        if left[digest] <= 0:
            return False
        left[digest] -= 1
        return True


def load(
    engine: Engine,
    links_t: Table,
    cuts_t: Table,
    key: bytes,
    since_us: int | None,
    findings: Findings,
    entry_bytes: int,
    label: str = "chain",
) -> Chains:
    """Read and check ``links_t`` (those committed at or after ``since_us``) from each
    chain's cut in ``cuts_t``; ``entry_bytes`` is the size of one digest entry, and
    findings name a chain ``label`` and its number."""
    found = Chains(links_t.name, label)
    c = links_t.c
    query = select(c.chain, c.seq, c.created_us, c.digests, c.prev, c.mac)
    if since_us is not None:
        query = query.where(c.created_us >= since_us)
    with engine.connect() as conn:
        rows = conn.execute(query.order_by(c.chain, c.seq)).all()
        cut_rows = conn.execute(select(cuts_t)).all()
    starts: dict[int, tuple[int, bytes]] = {}
    for cut in cut_rows:
        chain, through, before = _int(cut.chain), _int(cut.through_seq), _int(cut.before_us)
        mac_at, mac = _blob(cut.mac_at), _blob(cut.mac)
        if chain is None or through is None or before is None or mac_at is None or mac is None:
            findings.append(f"altered: a row of {cuts_t.name} is not a cut ({tuple(cut)!r:.200})")
            continue
        if cut_mac(key, chain, through, mac_at, before) != mac:
            findings.append(f"altered: the cut of {label} {chain} (not made with the key)")
        starts[chain] = (through, mac_at)
        found.cuts[chain] = through
    last: dict[int, Link] = {}
    for row in rows:
        link = as_link(row)
        if link is None or len(link.digests) % entry_bytes:
            findings.append(f"altered: a row of {links_t.name} is not a link ({_shown(row)})")
            continue
        if link.seq <= found.cut(link.chain):
            found.pruning[(link.chain, link.seq)] = link
            continue
        found.live[(link.chain, link.seq)] = link
        found.seqs.setdefault(link.chain, []).append(link.seq)
        where = f"{label} {link.chain} link {link.seq}"
        if expected_mac(key, link) != link.mac:
            findings.append(f"altered: {where} (bad MAC)")
        previous = last.get(link.chain)
        last[link.chain] = link
        if previous is not None:
            want_seq, want_mac = previous.seq, previous.mac
        elif since_us is not None:
            continue  # the window starts inside the chain; its first link is trusted
        else:
            want_seq, want_mac = starts.get(link.chain, (0, genesis(key, link.chain)))
        if link.seq != want_seq + 1:
            findings.append(
                f"deleted: {label} {link.chain} links {want_seq + 1} to {link.seq - 1} "
                "and what they covered"
            )
        elif link.prev != want_mac:
            findings.append(f"altered: {where} (bad prev)")
    return found


def _shown(row: Any) -> str:
    values = ", ".join(
        f"{len(v)} bytes" if isinstance(v, bytes | memoryview) else repr(v)[:40] for v in row
    )
    return f"chain, seq, created_us, digests, prev, mac = {values}"
