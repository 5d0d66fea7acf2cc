"""Walking the chain of :mod:`app.audit.chain` over the live trail: every link checked
against the key and the link before it, every record against its link's digest; each
record edited, deleted or inserted outside the server is named (``iabma audit-verify``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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
_Rec = tuple[int, bytes, str]  # id, digest, request id


@dataclass
class Report:
    records: int = 0
    links: int = 0
    findings: list[str] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        return not self.findings


def _name(rec: _Rec) -> str:
    return f"record id {rec[0]} (request id {rec[2]!r})"


def compare(link: Link, found: list[_Rec], report: Report) -> None:
    """Align a link's digests with its records (in id order) and name what differs."""
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
            before = found[j - 1][2] if j > 0 else None
            after = found[j][2] if j < len(found) else None
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
    c = records.c
    query = select(c.id, c.chain, c.seq, *[c[name] for name in LOG_COLUMNS])
    if since_us is not None:
        query = query.where(c.created_us >= since_us - LINK_LAG_US)
    open_groups: dict[_Key, list[_Rec]] = {}
    done: set[_Key] = set()
    newest: dict[int, int] = {}  # per chain, the newest link whose records are open
    rid = LOG_COLUMNS.index("request_id") + 3
    at = LOG_COLUMNS.index("created_us") + 3
    with engine.connect() as conn:
        rows: Iterable[Any] = conn.execution_options(stream_results=True, yield_per=20_000).execute(
            query.order_by(c.id)
        )
        for n, row in enumerate(rows, 1):
            report.records = n
            if progress is not None and n % 100_000 == 0:
                progress(n)
            rec: _Rec = (int(row[0]), row_digest(row[3:]), unpack_request_id(row[rid]))
            if row[1] is None or row[2] is None:
                if since_us is None or int(row[at]) >= since_us:
                    report.findings.append(f"inserted: {_name(rec)} (in no link)")
                continue
            key_ = (int(row[1]), int(row[2]))
            if key_[1] <= pruned.get(key_[0], 0):
                continue  # being pruned: its cut holds
            if key_ not in want:
                if since_us is None or int(row[at]) >= since_us:
                    report.findings.append(
                        f"inserted: {_name(rec)} (names chain {key_[0]} link {key_[1]}, "
                        "which does not exist)"
                    )
                continue
            if key_ in done:
                report.findings.append(f"inserted: {_name(rec)} into a closed link")
                continue
            open_groups.setdefault(key_, []).append(rec)
            # A chain's groups commit one after another: a later link closes the earlier.
            prior = newest.get(key_[0])
            if prior is not None and prior < key_[1]:
                closing = (key_[0], prior)
                if closing in open_groups:
                    compare(want[closing], open_groups.pop(closing), report)
                    done.add(closing)
            newest[key_[0]] = max(prior or 0, key_[1])
    for key_, found in open_groups.items():
        compare(want[key_], found, report)
        done.add(key_)
    for key_, link in want.items():
        if key_ not in done:
            compare(link, [], report)
    return report
