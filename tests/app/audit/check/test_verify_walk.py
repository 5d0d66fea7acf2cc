"""The verifier's walk on chains built in memory: a link's digests aligned with its
records (edits, deletions at the start, middle and end, insertions), links whose records
all went, records placed by their chain and link, and how each finding reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.audit.check.chain_links import Chains
from app.audit.check.verify import (
    LINK_LAG_US,
    UNKNOWN,
    Deleted,
    Rec,
    _place,
    _RecordWalk,
    compare,
    verify,
)
from app.audit.store.chain import ChainHead, chain_key
from app.audit.store.engine import make_engine
from tests.support.tampering import KEY as KEY_OF_FILL
from tests.support.tampering import fill

KEY = chain_key(b"walk")
AT = 1_700_000_000_000_000


def rec(k: int, tag: str = "") -> Rec:
    return Rec(k, bytes([k]) * 7 + (b"\x01" if tag else b"\x00"), f"r{k}".encode())


def link_over(recs: list[Rec], chain: int = 1, seq: int = 1) -> Any:
    head = ChainHead(KEY, chain)
    head.seq = seq - 1
    return head.link_over(b"".join(r.digest for r in recs), AT)


def run(link: Any, found: list[Rec], before: Rec | None = None) -> tuple[list[str], list[Any]]:
    entries: list[Any] = []
    tail = compare(link, found, entries, before)
    return [str(e) for e in entries], tail


WHERE = "chain 1 link 1, committed 2023-11-14T22:13:20.000000Z"


def test_records_as_linked_are_no_finding() -> None:
    recs = [rec(1), rec(2), rec(3)]
    assert run(link_over(recs), recs) == ([], [])


def test_an_edit_is_named_by_its_record() -> None:
    recs = [rec(1), rec(2), rec(3)]
    said, tail = run(link_over(recs), [rec(1), rec(2, "edited"), rec(3)])
    assert said == [f"edited: record id 2 (request id 'r2') of {WHERE}"] and tail == []


def test_a_deletion_in_the_middle_is_named_by_both_neighbours() -> None:
    recs = [rec(1), rec(2), rec(3)]
    said, tail = run(link_over(recs), [rec(1), rec(3)])
    assert said == [
        f"deleted: record 2 of 3 of {WHERE} (after record id 1 (request id 'r1'); "
        "before record id 3 (request id 'r3'))"
    ]
    assert tail == []


def test_a_deletion_at_the_start_names_the_record_before_the_link() -> None:
    recs = [rec(1), rec(2)]
    said, _ = run(link_over(recs), [rec(2)], before=rec(9))
    assert said == [
        f"deleted: record 1 of 2 of {WHERE} (after record id 9 (request id 'r9'); "
        "before record id 2 (request id 'r2'))"
    ]
    said, _ = run(link_over(recs), [rec(2)])
    assert said[0].startswith(f"deleted: record 1 of 2 of {WHERE} (the first of chain 1; before")


def test_a_deletion_at_the_end_waits_for_the_chains_next_record() -> None:
    recs = [rec(1), rec(2), rec(3)]
    said, tail = run(link_over(recs), [rec(1), rec(2)])
    assert said == [f"deleted: record 3 of 3 of {WHERE} (after record id 2 (request id 'r2'))"]
    (gone,) = tail
    assert gone.after is UNKNOWN
    gone.after = rec(4)
    assert str(gone).endswith("; before record id 4 (request id 'r4'))")
    gone.after = None
    assert str(gone).endswith("; the newest of chain 1)")


def test_a_link_whose_records_all_went_is_one_finding() -> None:
    said, tail = run(link_over([rec(1), rec(2)]), [], before=rec(0))
    assert said == [f"deleted: all 2 records of {WHERE} (after record id 0 (request id 'r0'))"]
    assert len(tail) == 1 and tail[0].before == rec(0)
    said, _ = run(link_over([rec(1)]), [])
    assert said == [f"deleted: record 1 of 1 of {WHERE} (the first of chain 1)"]


def test_insertions_are_named_where_they_are() -> None:
    recs = [rec(1), rec(2)]
    said, tail = run(link_over(recs), [rec(1), rec(7), rec(2), rec(8)])
    assert said == [
        f"inserted: record id 7 (request id 'r7') into {WHERE}",
        f"inserted: record id 8 (request id 'r8') into {WHERE}",
    ]
    assert tail == []


def test_an_edit_beside_a_deletion() -> None:
    recs = [rec(1), rec(2), rec(3), rec(4)]
    said, _ = run(link_over(recs), [rec(1, "x"), rec(3), rec(4)])
    assert said[0] == f"edited: record id 1 (request id 'r1') of {WHERE}"
    assert said[1].startswith(f"deleted: record 2 of 4 of {WHERE} (after record id 1")


def chains(*links: Any) -> Chains:
    c = Chains("iabma_audit_links", "chain")
    for link in links:
        c.live[(link.chain, link.seq)] = link
        c.seqs.setdefault(link.chain, []).append(link.seq)
    return c


def walked(c: Chains, placed: list[tuple[Rec, int, int]]) -> list[str]:
    walk = _RecordWalk(c, [])
    for r, ch, seq in placed:
        walk.add(r, ch, seq)
    walk.finish()
    return [str(e) for e in walk.entries]


def test_the_walk_names_a_whole_link_gone_by_the_records_around_it() -> None:
    a, b, c = [rec(1), rec(2)], [rec(3)], [rec(4), rec(5)]
    links = chains(link_over(a, seq=1), link_over(b, seq=2), link_over(c, seq=3))
    assert walked(links, [(r, 1, 1) for r in a] + [(r, 1, 3) for r in c]) == [
        "deleted: record 1 of 1 of chain 1 link 2, committed 2023-11-14T22:13:20.000000Z (after "
        "record id 2 (request id 'r2'); before record id 4 (request id 'r4'))"
    ]
    # The newest link gone: no record after it.
    said = walked(links, [(r, 1, 1) for r in a] + [(r, 1, 2) for r in b])
    assert said == [
        "deleted: all 2 records of chain 1 link 3, committed 2023-11-14T22:13:20.000000Z (after "
        "record id 3 (request id 'r3'); the newest of chain 1)"
    ]


def test_the_walk_keeps_chains_apart_and_names_a_record_out_of_order() -> None:
    one, two = [rec(1), rec(3)], [rec(2)]
    links = chains(link_over(one, chain=1), link_over(two, chain=2), link_over([rec(6)], seq=2))
    placed = [(rec(1), 1, 1), (rec(2), 2, 1), (rec(3), 1, 1), (rec(6), 1, 2), (rec(7), 1, 1)]
    assert walked(links, placed) == [
        "inserted: record id 7 (request id 'r7') into chain 1 link 1, out of order"
    ]
    assert walked(links, placed[:4]) == []


def row(chain: Any, seq: Any, at: Any = AT) -> tuple[Any, ...]:
    from app.audit.check.verify import _AT

    out: list[Any] = [0] * (_AT + 1)
    out[1], out[2], out[_AT] = chain, seq, at
    return tuple(out)


@pytest.mark.parametrize(
    ("chain", "seq", "since", "said"),
    [
        (None, None, None, "(in no link)"),
        ("1", 1, None, "(its chain and link are '1' and 1, not numbers)"),
        (None, 3, None, "(its chain and link are None and 3, not numbers)"),
        (1, 2.0, None, "(its chain and link are 1 and 2.0, not numbers)"),
        (1, 9, None, "(names chain 1 link 9, which does not exist)"),
        (1, 3, None, "(names chain 1 link 3, at or below the chain's cut through link 4)"),
    ],
)
def test_a_record_out_of_any_link_is_an_insertion(
    chain: Any, seq: Any, since: int | None, said: str
) -> None:
    c = chains(link_over([rec(5)], seq=5))
    c.cuts[1] = 4
    walk = _RecordWalk(c, [])
    _place(walk, c, rec(9), row(chain, seq), since)
    assert walk.entries == [f"inserted: record id 9 (request id 'r9') {said}"]


def test_outside_the_window_checked_a_record_in_no_link_is_left_alone() -> None:
    c = chains(link_over([rec(5)], seq=5))
    for chain, seq in ((None, None), (1, 9)):
        walk = _RecordWalk(c, [])
        _place(walk, c, rec(9), row(chain, seq, AT - 1), AT)
        assert walk.entries == []
        _place(walk, c, rec(9), row(chain, seq, AT), AT)  # at the window's start: in it
        assert len(walk.entries) == 1
    walk = _RecordWalk(c, [])
    _place(walk, c, rec(9), row(None, None, "later"), AT)  # a time of the wrong type
    assert walk.entries == []
    _place(walk, c, rec(5), row(1, 5), None)
    walk.finish()
    assert walk.entries == []


def test_findings_and_deletions_read_as_strings() -> None:
    gone = Deleted("record 1 of 1", "chain 3 link 1", 3, None, None)
    assert (
        str(gone)
        == "deleted: record 1 of 1 of chain 3 link 1 (the first of chain 3; the newest of chain 3)"
    )
    assert str(Rec(5, b"", "abc")) == "record id 5 (request id 'abc' (stored as text))"


def test_a_record_of_an_emptied_link_read_after_a_later_link_is_out_of_order() -> None:
    """Links 2 and 3 lost their records; one then shows up naming link 3 after link 4's."""
    links = chains(*(link_over([rec(s)], seq=s) for s in (1, 2, 3, 4)))
    said = walked(links, [(rec(1), 1, 1), (rec(4), 1, 4), (rec(9), 1, 3)])
    assert said[2:] == ["inserted: record id 9 (request id 'r9') into chain 1 link 3, out of order"]
    assert [s.split(" (")[0] for s in said[:2]] == [
        "deleted: record 1 of 1 of chain 1 link 2, committed 2023-11-14T22:13:20.000000Z",
        "deleted: record 1 of 1 of chain 1 link 3, committed 2023-11-14T22:13:20.000000Z",
    ]


def test_a_chain_whose_records_all_went_is_named() -> None:
    links = chains(link_over([rec(1)], chain=1), link_over([rec(2)], chain=2))
    assert walked(links, [(rec(1), 1, 1)]) == [
        "deleted: record 1 of 1 of chain 2 link 1, committed 2023-11-14T22:13:20.000000Z "
        "(the first of chain 2; the newest of chain 2)"
    ]


def test_a_window_reads_the_records_of_the_links_committed_in_it(tmp_path: Path) -> None:
    """``since_us`` at a record's time: the records of the links from there on are read,
    those a little older among them (a record's time is before its link's)."""
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    fill(url)
    engine = make_engine(url, 10.0)
    try:
        with engine.connect() as conn:
            times = [r[0] for r in conn.exec_driver_sql(
                "select created_us from iabma_audit_log order by id")]  # fmt: skip
        seen: list[int] = []
        whole = verify(engine, KEY_OF_FILL, None, progress=seen.append)
        since = verify(engine, KEY_OF_FILL, times[7])
        late = verify(engine, KEY_OF_FILL, times[-1] + LINK_LAG_US + 1)
    finally:
        engine.dispose()
    assert whole.intact and since.intact, (whole.findings, since.findings)
    assert whole.records == since.records == len(times) == 15 and seen == [15]
    assert late.records == 0 and late.intact  # older than any link of the window
