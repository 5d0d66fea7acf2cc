"""Walking the chain of :mod:`app.audit.chain` over the live trail: every link checked
against the key and the link before it, every record against its link's digest; each
record edited, deleted or inserted outside the server is named (``iabma audit-verify``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, select

from app.audit.chain import Link, cut_mac, expected_mac, genesis, row_digest
from app.audit.codec import unpack_request_id
from app.audit.records import LOG_COLUMNS, iso_from_us
from app.audit.tables import cuts, links, records

# A record's time is before its link's: by at most the commit timeout (600 s at most).
LINK_LAG_US = 660_000_000
_Key = tuple[int, int]
_Rec = tuple[int, bytes, bytes]  # id, digest, request id as stored


@dataclass
class Report:
    records: int = 0
    links: int = 0
    findings: list[str] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        return not self.findings


def _name(rec: _Rec) -> str:
    return f"record id {rec[0]} (request id {unpack_request_id(rec[2])!r})"


def compare(link: Link, found: list[_Rec], report: Report) -> None:
    """Align a link's digests with its records (in id order) and name what differs."""
    if b"".join(r[1] for r in found) == link.digests:
        return  # the common case, without a step per record
    want = link.digest_list()
    where = f"chain {link.chain} link {link.seq}, committed {iso_from_us(link.created_us)}"
    i = j = 0
    while i < len(want) or j < len(found):
        if i < len(want) and j < len(found) and found[j][1] == want[i]:
            i, j = i + 1, j + 1
            continue
        later_want = want[i + 1 :]
        later_found = [r[1] for r in found[j + 1 :]]
        if j >= len(found) or (i < len(want) and found[j][1] in later_want):
            before = unpack_request_id(found[j - 1][2]) if j > 0 else None
            after = unpack_request_id(found[j][2]) if j < len(found) else None
            report.findings.append(
                f"deleted: record {i + 1} of {len(want)} of {where} "
                f"(between request ids {before!r} and {after!r})"
            )
            i += 1
        elif i >= len(want) or want[i] in later_found:
            report.findings.append(f"inserted: {_name(found[j])} into {where}")
            j += 1
        else:
            report.findings.append(f"edited: {_name(found[j])} of {where}")
            i, j = i + 1, j + 1


def _links(
    engine: Engine, key: bytes, since_us: int | None, report: Report, pruned: dict[int, int]
) -> dict[_Key, Link]:
    """The links to check, each verified against its MAC and the link before it; fills
    ``pruned`` with each chain's cut (links through it were pruned or archived)."""
    c = links.c
    query = select(c.chain, c.seq, c.created_us, c.digests, c.prev, c.mac)
    if since_us is not None:
        query = query.where(c.created_us >= since_us)
    with engine.connect() as conn:
        rows = conn.execute(query.order_by(c.chain, c.seq)).all()
        cut_rows = conn.execute(select(cuts)).all()
    starts: dict[int, tuple[int, bytes]] = {}
    for cut in cut_rows:
        chain, through, before, mac_at, mac = (
            int(cut.chain), int(cut.through_seq), int(cut.before_us), bytes(cut.mac_at),
            bytes(cut.mac),
        )  # fmt: skip
        if cut_mac(key, chain, through, mac_at, before) != mac:
            report.findings.append(f"altered: the cut of chain {chain} (not made with the key)")
        starts[chain] = (through, mac_at)
        pruned[chain] = through
    found: dict[_Key, Link] = {}
    last: dict[int, Link] = {}
    for r in rows:
        link = Link(int(r[0]), int(r[1]), int(r[2]), bytes(r[3]), bytes(r[4]), bytes(r[5]))
        if link.seq <= pruned.get(link.chain, 0):
            continue  # its cut is written first; its records and it go after
        found[(link.chain, link.seq)] = link
        if expected_mac(key, link) != link.mac:
            report.findings.append(f"altered: chain {link.chain} link {link.seq} (bad MAC)")
        previous = last.get(link.chain)
        if previous is not None:
            want_seq, want_mac = previous.seq, previous.mac
        elif since_us is not None:
            continue  # the window starts inside the chain; its first link is trusted
        else:
            want_seq, want_mac = starts.get(link.chain, (0, genesis(key, link.chain)))
        if link.seq != want_seq + 1:
            report.findings.append(
                f"deleted: chain {link.chain} links {want_seq + 1} to {link.seq - 1} "
                "and their records"
            )
        elif link.prev != want_mac:
            report.findings.append(f"altered: chain {link.chain} link {link.seq} (bad prev)")
        last[link.chain] = link
    report.links = len(found)
    return found


def verify(
    engine: Engine,
    key: bytes,
    since_us: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Report:
    """Check the trail (the part committed at or after ``since_us``) against the chain."""
    report = Report()
    pruned: dict[int, int] = {}
    want = _links(engine, key, since_us, report, pruned)
    names = ", ".join(("id", "chain", "seq", *LOG_COLUMNS))
    sql = f"SELECT {names} FROM {records.name}"
    if since_us is not None:
        sql += f" WHERE created_us >= {int(since_us) - LINK_LAG_US}"
    open_groups: dict[_Key, list[_Rec]] = {}
    done: set[_Key] = set()
    newest: dict[int, int] = {}  # per chain, the newest link whose records are open
    rid = LOG_COLUMNS.index("request_id") + 3
    at = LOG_COLUMNS.index("created_us") + 3
    with engine.connect() as conn:
        # Plain DBAPI rows, streamed (PostgreSQL: a server-side cursor): a million
        # SQLAlchemy rows cost more than their digests.
        raw: Any = conn.connection.dbapi_connection
        postgres = conn.dialect.name == "postgresql"
        # PostgreSQL in binary: bytea as its bytes, not as hex text to parse.
        cursor = raw.cursor(name="iabma_verify", binary=True) if postgres else raw.cursor()
        cursor.execute(sql + " ORDER BY id")
        while rows := cursor.fetchmany(20_000):
            for row in rows:
                report.records += 1
                # (id, digest, request id): the id's text is made only for a finding
                rec: _Rec = (row[0], row_digest(row[3:]), row[rid])
                chain, seq = row[1], row[2]
                if chain is None or seq is None:
                    if since_us is None or row[at] >= since_us:
                        report.findings.append(f"inserted: {_name(rec)} (in no link)")
                    continue
                key_ = (chain, seq)
                if seq <= pruned.get(chain, 0):
                    continue  # being pruned: its cut holds
                if key_ not in want:
                    if since_us is None or row[at] >= since_us:
                        report.findings.append(
                            f"inserted: {_name(rec)} (names chain {chain} link {seq}, "
                            "which does not exist)"
                        )
                    continue
                if key_ in done:
                    report.findings.append(f"inserted: {_name(rec)} into a closed link")
                    continue
                group = open_groups.get(key_)
                if group is None:
                    group = open_groups[key_] = []
                    # A chain's groups commit one after another: a later link closes the
                    # earlier ones.
                    prior = newest.get(chain)
                    if prior is not None and prior < seq:
                        closing = (chain, prior)
                        if closing in open_groups:
                            compare(want[closing], open_groups.pop(closing), report)
                            done.add(closing)
                    newest[chain] = max(prior or 0, seq)
                group.append(rec)
            if progress is not None:
                progress(report.records)
        cursor.close()
    for key_, found in open_groups.items():
        compare(want[key_], found, report)
        done.add(key_)
    for key_, link in want.items():
        if key_ not in done:
            compare(link, [], report)
    return report
