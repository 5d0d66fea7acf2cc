"""The outcomes against their chains (:mod:`app.audit.write.outcome_chain`), for ``iabma
audit-verify``: each outcome row edited, inserted, or deleted while its record is still in
the trail, is named.

An outcome link's entry names its outcome's record, so an outcome missing from the table
is a deletion only if its record is still there: an outcome leaves with its record
(retention, the archive), and a record gone by any other way is named by the records'
own chain.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from app.audit.check import chain_links
from app.audit.check.as_stored import raw_rows, shown_id
from app.audit.check.verify import FETCH, Report
from app.audit.store.chain import ENTRY_BYTES, Link, entries, outcome_key, row_digest
from app.audit.store.tables import outcome_cuts, outcome_links, outcomes, records
from app.audit.write.outcome_chain import DIGESTED, RECORD_AT

IDS_PER_QUERY = 2000


@dataclass(frozen=True)
class _Row:
    id: int
    record_id: Any
    digest: bytes
    request_id: Any
    row: Any

    def __str__(self) -> str:
        return (
            f"outcome id {self.id} (request id {shown_id(self.request_id)}, row "
            f"{self.row!r:.20}, record id {self.record_id!r:.20})"
        )


@dataclass
class _Walk:
    chains: chain_links.Chains
    report: Report
    groups: dict[int, tuple[int, list[_Row]]] = field(default_factory=dict)
    done: set[tuple[int, int]] = field(default_factory=set)
    # Entries missing from the table: deletions if their record is still in the trail.
    missing: list[tuple[int, Link]] = field(default_factory=list)

    def add(self, row: _Row, chain: int, seq: int) -> None:
        current = self.groups.get(chain)
        if current is not None and current[0] == seq:
            current[1].append(row)
            return
        if (chain, seq) in self.done:
            self.report.entries.append(
                f"inserted: {row} into outcome chain {chain} link {seq}, out of order"
            )
            return
        if current is not None:
            self._compare(chain, *current)
        self.groups[chain] = (seq, [row])

    def _compare(self, chain: int, seq: int, found: list[_Row]) -> None:
        self.done.add((chain, seq))
        link = self.chains.live[(chain, seq)]
        left: Counter[tuple[Any, bytes]] = Counter(entries(link.digests))
        odd = []
        for row in found:
            key = (row.record_id, row.digest)
            if left[key] > 0:
                left[key] -= 1
            else:
                odd.append(row)
        where = f"outcome chain {chain} link {seq}"
        for row in odd:
            same = next((k for k, n in left.items() if n > 0 and k[0] == row.record_id), None)
            if same is not None:
                left[same] -= 1
                self.report.entries.append(f"edited: {row} of {where}")
            else:
                self.report.entries.append(f"inserted: {row} into {where}")
        self.missing += [(rid, link) for (rid, _d), n in left.items() for _ in range(n)]

    def finish(self, engine: Engine) -> None:
        for chain, (seq, found) in list(self.groups.items()):
            self._compare(chain, seq, found)
        for key, link in self.chains.live.items():
            if key not in self.done:
                self._compare(link.chain, link.seq, [])
        if not self.missing:
            return
        present = _records(engine, sorted({rid for rid, _ in self.missing}))
        for rid, link in self.missing:
            if rid in present:
                self.report.entries.append(
                    f"deleted: an outcome of record id {rid} (request id "
                    f"{shown_id(present[rid])}) from outcome chain {link.chain} link "
                    f"{link.seq}; its record is still in the trail"
                )


def _records(engine: Engine, ids: list[int]) -> dict[int, Any]:
    """The request ids of those of ``ids`` still in the trail."""
    out: dict[int, Any] = {}
    with engine.connect() as conn:
        for start in range(0, len(ids), IDS_PER_QUERY):
            chunk = ", ".join(str(int(i)) for i in ids[start : start + IDS_PER_QUERY])
            sql = f"SELECT id, request_id FROM {records.name} WHERE id IN ({chunk})"
            for row in conn.exec_driver_sql(sql).fetchall():
                out[int(row[0])] = row[1]
    return out


def verify(engine: Engine, key: bytes, since_us: int | None, report: Report) -> None:
    """Add to ``report`` what differs between the outcomes and their chains."""
    chains = chain_links.load(
        engine, outcome_links, outcome_cuts, outcome_key(key), since_us, report.entries,
        ENTRY_BYTES, "outcome chain",
    )  # fmt: skip
    report.links += len(chains.live)
    walk = _Walk(chains, report)
    names = ", ".join(("id", "chain", "seq", *DIGESTED))
    sql = f"SELECT {names} FROM {outcomes.name}"
    if since_us is not None:
        sql += f" WHERE received_us >= {int(since_us)}"
    rid_at, row_at = 3 + DIGESTED.index("request_id"), 3 + DIGESTED.index("row_index")
    with engine.connect() as conn, raw_rows(conn, sql + " ORDER BY id", "iabma_verify_o") as cur:
        while rows := cur.fetchmany(FETCH):
            for r in rows:
                report.outcomes += 1
                row = _Row(r[0], r[3 + RECORD_AT], row_digest(r[3:]), r[rid_at], r[row_at])
                _place(walk, row, r[1], r[2])
    walk.finish(engine)


def _place(walk: _Walk, row: _Row, chain: Any, seq: Any) -> None:
    chains, entries_ = walk.chains, walk.report.entries
    if chain is None and seq is None:
        entries_.append(f"inserted: {row} (in no link)")
    elif type(chain) is not int or type(seq) is not int:
        entries_.append(f"inserted: {row} (its chain and link are {chain!r:.40}, {seq!r:.40})")
    elif seq <= chains.cut(chain):
        entries_.append(
            f"inserted: {row} (names outcome chain {chain} link {seq}, at or below the "
            f"chain's cut through link {chains.cut(chain)})"
        )
    elif (chain, seq) not in chains.live:
        entries_.append(
            f"inserted: {row} (names outcome chain {chain} link {seq}, which does not exist)"
        )
    else:
        walk.add(row, chain, seq)
