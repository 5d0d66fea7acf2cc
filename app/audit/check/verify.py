"""Walking the chains of :mod:`app.audit.store.chain` over the live trail (``iabma
audit-verify``): every link checked against the key and the link before it, every record
against its link's digest, every version row against its MAC, every outcome against its
link (:mod:`app.audit.check.verify_outcomes`); each record edited, deleted or inserted outside
the server is named, a deleted one by its neighbours in its chain.

Rows are read as stored, whatever they hold: a value of another type than the server
writes (a request id stored as text, an answer turned into text that is not UTF-8, a
NULL) changes the row's digest and is named, never the verifier's crash.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlalchemy import Engine

from app.audit.check import chain_links
from app.audit.check.as_stored import check_versions, raw_rows, shown_id
from app.audit.store.chain import DIGEST_BYTES, Link, row_digest
from app.audit.store.records import LOG_COLUMNS, iso_from_us
from app.audit.store.tables import cuts, links, records

# A record's time is before its link's: by at most the commit timeout (600 s at most).
LINK_LAG_US = 660_000_000
FETCH = 20_000
_RID = 3 + LOG_COLUMNS.index("request_id")
_AT = 3 + LOG_COLUMNS.index("created_us")
_VERSION = 3 + LOG_COLUMNS.index("version_id")


@dataclass
class Report:
    records: int = 0
    links: int = 0
    outcomes: int = 0
    entries: list[Any] = field(default_factory=list)  # lines, or deletions made at the end

    @property
    def findings(self) -> list[str]:
        return [str(e) for e in self.entries]

    @property
    def intact(self) -> bool:
        return not self.entries


class Rec(NamedTuple):
    """A record as found: its id, its digest, its request id as stored (a tuple: one is
    made for every record read)."""

    id: int
    digest: bytes
    rid: Any

    def __str__(self) -> str:
        return f"record id {self.id} (request id {shown_id(self.rid)})"


UNKNOWN = object()  # a neighbour not looked for (an archive's check)


@dataclass
class Deleted:
    """Records missing from a link, named by their place and their neighbours in their
    chain; the one after may be known only once the chain's next record is read."""

    what: str
    where: str
    chain: int
    before: Rec | None
    after: Any = UNKNOWN

    def __str__(self) -> str:
        first = f"after {self.before}" if self.before else f"the first of chain {self.chain}"
        if self.after is UNKNOWN:
            return f"deleted: {self.what} of {self.where} ({first})"
        then = f"before {self.after}" if self.after else f"the newest of chain {self.chain}"
        return f"deleted: {self.what} of {self.where} ({first}; {then})"


def _where(link: Link, table: str = "") -> str:
    of = f" of {table}" if table else ""
    return f"chain {link.chain} link {link.seq}{of}, committed {iso_from_us(link.created_us)}"


def compare(
    link: Link, found: list[Rec], entries: list[Any], before: Rec | None = None
) -> list[Deleted]:
    """Align a link's digests with its records (in id order) and name what differs;
    ``before`` is the chain's record before them. The deletions at the end, whose next
    record is the chain's next, are returned."""
    if b"".join(r.digest for r in found) == link.digests:
        return []  # the common case, without a step per record
    want = link.digest_list()
    where = _where(link)
    if not found:
        what = f"all {len(want)} records" if len(want) > 1 else "record 1 of 1"
        gone = Deleted(what, where, link.chain, before)
        entries.append(gone)
        return [gone]
    tail: list[Deleted] = []
    i = j = 0
    while i < len(want) or j < len(found):
        if i < len(want) and j < len(found) and found[j].digest == want[i]:
            i, j = i + 1, j + 1
            continue
        later_want = want[i + 1 :]
        later_found = [r.digest for r in found[j + 1 :]]
        if j >= len(found) or (i < len(want) and found[j].digest in later_want):
            gone = Deleted(
                f"record {i + 1} of {len(want)}",
                where,
                link.chain,
                found[j - 1] if j > 0 else before,
                found[j] if j < len(found) else UNKNOWN,
            )
            entries.append(gone)
            if j >= len(found):
                tail.append(gone)
            i += 1
        elif i >= len(want) or want[i] in later_found:
            entries.append(f"inserted: {found[j]} into {where}")
            j += 1
        else:
            entries.append(f"edited: {found[j]} of {where}")
            i, j = i + 1, j + 1
    return tail


@dataclass
class _Scan:
    """One chain as its records are read in id order (a chain's records are in the order
    of its links: each commit of a chain follows the one before)."""

    last: Rec | None = None  # the chain's newest record compared so far
    seq: int | None = None  # the link whose records are being gathered
    group: list[Rec] = field(default_factory=list)
    opened_after: Rec | None = None
    through: int = 0  # the chain's links up to this one are compared
    waiting: list[Deleted] = field(default_factory=list)  # deletions before the next record


class _RecordWalk:
    """Records, read in id order, gathered by link and compared with it."""

    def __init__(self, chains: chain_links.Chains, entries: list[Any]) -> None:
        self.chains = chains
        self.entries = entries
        self.scans: dict[int, _Scan] = {}
        # Per chain, the link being gathered and its records: the loop's fast path.
        self.open: dict[int, tuple[int, list[Rec]]] = {}

    def add(self, rec: Rec, chain: int, seq: int) -> None:
        scan = self.scans.setdefault(chain, _Scan())
        if scan.seq == seq:
            scan.group.append(rec)
            return
        if seq <= scan.through:
            self.entries.append(f"inserted: {rec} into chain {chain} link {seq}, out of order")
            return
        self._close(chain, scan)
        self._empty(chain, scan, seq)
        for gone in scan.waiting:
            gone.after = rec
        scan.waiting = []
        scan.seq, scan.group, scan.opened_after = seq, [rec], scan.last
        self.open[chain] = (seq, scan.group)

    def _close(self, chain: int, scan: _Scan) -> None:
        if scan.seq is None:
            return
        link = self.chains.live[(chain, scan.seq)]
        scan.waiting += compare(link, scan.group, self.entries, scan.opened_after)
        scan.last, scan.through = scan.group[-1], scan.seq
        scan.seq, scan.group = None, []
        self.open.pop(chain, None)

    def _empty(self, chain: int, scan: _Scan, upto: int | None) -> None:
        """The chain's live links after those compared and before ``upto`` (all, if None),
        for which no record was read: their records were deleted."""
        seqs = self.chains.seqs.get(chain, [])
        lo = bisect.bisect_right(seqs, scan.through)
        hi = len(seqs) if upto is None else bisect.bisect_left(seqs, upto)
        for s in seqs[lo:hi]:
            scan.waiting += compare(self.chains.live[(chain, s)], [], self.entries, scan.last)
        if hi > lo:
            scan.through = seqs[hi - 1]

    def finish(self) -> None:
        for chain in self.chains.seqs:
            self.scans.setdefault(chain, _Scan())
        for chain, scan in self.scans.items():
            self._close(chain, scan)
            self._empty(chain, scan, None)
            for gone in scan.waiting:
                gone.after = None


def verify(
    engine: Engine,
    key: bytes,
    since_us: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Report:
    """Check the trail (the part committed at or after ``since_us``) against the chain."""
    from app.audit.check import verify_outcomes

    report = Report()
    version_ids = check_versions(engine, key, report.entries)
    chains = chain_links.load(engine, links, cuts, key, since_us, report.entries, DIGEST_BYTES)
    report.links = len(chains.live)
    walk = _RecordWalk(chains, report.entries)
    missing_versions: dict[Any, Rec] = {}
    names = ", ".join(("id", "chain", "seq", *LOG_COLUMNS))
    sql = f"SELECT {names} FROM {records.name}"
    if since_us is not None:
        sql += f" WHERE created_us >= {int(since_us) - LINK_LAG_US}"
    opened = walk.open
    with engine.connect() as conn, raw_rows(conn, sql + " ORDER BY id", "iabma_verify") as cursor:
        while rows := cursor.fetchmany(FETCH):
            report.records += len(rows)
            for row in rows:
                rec = Rec(row[0], row_digest(row[3:]), row[_RID])
                if row[_VERSION] not in version_ids:
                    missing_versions.setdefault(row[_VERSION], rec)
                group = opened.get(row[1])
                if group is not None and group[0] == row[2]:
                    group[1].append(rec)  # the common case: the next record of its link
                else:
                    _place(walk, chains, rec, row, since_us)
            if progress is not None:
                progress(report.records)
    walk.finish()
    for vid, rec in missing_versions.items():
        report.entries.append(f"deleted: version row id {vid!r:.40}, which {rec} names")
    verify_outcomes.verify(engine, key, since_us, report)
    return report


def _place(
    walk: _RecordWalk, chains: chain_links.Chains, rec: Rec, row: Any, since_us: int | None
) -> None:
    """Put one record where its link is, or name it."""
    chain, seq, at = row[1], row[2], row[_AT]
    in_window = since_us is None or (type(at) is int and at >= since_us)
    if chain is None and seq is None:
        if in_window:
            walk.entries.append(f"inserted: {rec} (in no link)")
        return
    if type(chain) is not int or type(seq) is not int:
        walk.entries.append(
            f"inserted: {rec} (its chain and link are {chain!r:.40} and {seq!r:.40}, not numbers)"
        )
        return
    if seq <= chains.cut(chain):
        if not chains.take_pruned(chain, seq, rec.digest):
            walk.entries.append(
                f"inserted: {rec} (names chain {chain} link {seq}, at or below the chain's "
                f"cut through link {chains.cut(chain)})"
            )
        return
    if (chain, seq) not in chains.live:
        if in_window:
            walk.entries.append(
                f"inserted: {rec} (names chain {chain} link {seq}, which does not exist)"
            )
        return
    walk.add(rec, chain, seq)
