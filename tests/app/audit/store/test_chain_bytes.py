"""The chain's bytes, unit by unit: every value of a record, of a link and of a cut is in
what is digested or keyed, so that a change of any one of them changes the result."""

from __future__ import annotations

import hashlib
import hmac
import marshal
import struct

import pytest

from app.audit.store.chain import (
    DIGEST_BYTES,
    ENTRY_BYTES,
    ChainHead,
    Link,
    chain_key,
    cut_mac,
    entries,
    entry,
    expected_mac,
    genesis,
    link_mac,
    outcome_key,
    row_digest,
    version_mac,
)

KEY = chain_key(b"a test key of the trail")
ROW = (1_700_000_000_000_000, "0123abcd", 7, b"\x01answer-bytes", 3, 1.5, None, "text")


def test_the_keys_are_derived_apart_and_are_macs_of_their_labels() -> None:
    want = hmac.new(b"a test key of the trail", b"iabma-audit-chain/1", "sha256").digest()
    assert want == KEY
    assert outcome_key(KEY) == hmac.new(KEY, b"iabma-outcome-chain/1", "sha256").digest()
    assert len({KEY, outcome_key(KEY), chain_key(b"another key")}) == 3


@pytest.mark.parametrize("column", range(len(ROW)))
def test_every_column_of_a_record_is_in_its_digest(column: int) -> None:
    """The answer column (bytes) as much as any other: an edit of one value changes it."""
    value = ROW[column]
    other = (
        value + b"!" if isinstance(value, bytes)
        else value + "!" if isinstance(value, str)
        else 1 if value is None
        else value + 1
    )  # fmt: skip
    edited = (*ROW[:column], other, *ROW[column + 1 :])
    assert len(row_digest(ROW)) == DIGEST_BYTES
    assert row_digest(edited) != row_digest(ROW)


def test_the_digest_is_sha256_of_marshal_version_0() -> None:
    want = hashlib.sha256(marshal.dumps(ROW, 0)).digest()[:DIGEST_BYTES]
    assert row_digest(ROW) == want and row_digest(list(ROW)) == want


def test_a_drivers_memoryview_digests_as_its_bytes() -> None:
    viewed = (*ROW[:3], memoryview(ROW[3]), *ROW[4:])
    assert row_digest(viewed) == row_digest(ROW)


def test_a_value_marshal_refuses_gets_a_digest_of_its_own() -> None:
    """A hostile value read back (an object no server writes) never raises."""
    odd = (*ROW[:3], object(), *ROW[4:])
    digest = row_digest(odd)
    assert len(digest) == DIGEST_BYTES and digest != row_digest(ROW)
    want = hashlib.sha256(b"\x00not-marshalled:" + repr(odd).encode()).digest()[:DIGEST_BYTES]
    # repr of an object carries its address: the same object, the same digest
    assert row_digest(odd) == digest == want


def test_entries_read_back_what_entry_packs() -> None:
    digests = [bytes([k]) * DIGEST_BYTES for k in range(3)]
    packed = b"".join(entry(rid, d) for rid, d in zip([5, -1, 2**40], digests, strict=True))
    assert len(packed) == 3 * ENTRY_BYTES
    assert entry(5, digests[0]) == struct.pack("<q", 5) + digests[0]
    assert entries(packed) == list(zip([5, -1, 2**40], digests, strict=True))
    assert entries(packed[:-1]) == entries(packed)[:2]  # a torn entry is not read
    assert entries(b"") == []


@pytest.mark.parametrize("at", range(8))
def test_a_version_row_mac_covers_its_id_and_every_value(at: int) -> None:
    values = ["demo", "v1", "/predict", "classification", "rows", '["a","b"]', '["0","1"]']
    mac = version_mac(KEY, 3, values)
    want = hmac.new(KEY, b"iabma-audit-version/1" + marshal.dumps((3, *values), 0), "sha256")
    assert mac == want.digest()
    if at == 7:
        assert version_mac(KEY, 4, values) != mac
    else:
        bent = [*values[:at], values[at] + "x", *values[at + 1 :]]
        assert version_mac(KEY, 3, bent) != mac


def test_each_chain_has_its_own_genesis() -> None:
    assert genesis(KEY, 1) != genesis(KEY, 2)
    assert genesis(KEY, 1) == hmac.new(KEY, b"genesis" + struct.pack("<q", 1), "sha256").digest()


@pytest.mark.parametrize("field", ["chain", "seq", "created_us", "digests", "prev"])
def test_a_link_mac_covers_every_field(field: str) -> None:
    base = {"chain": 2, "seq": 5, "created_us": 1_000, "digests": b"d" * 16, "prev": b"p" * 32}
    mac = link_mac(KEY, **base)  # type: ignore[arg-type]
    bent = {**base, field: base[field] + (1 if isinstance(base[field], int) else b"x")}  # type: ignore[operator]
    assert link_mac(KEY, **bent) != mac  # type: ignore[arg-type]
    assert link_mac(chain_key(b"k2"), **base) != mac  # type: ignore[arg-type]
    link = Link(mac=mac, **base)  # type: ignore[arg-type]
    assert expected_mac(KEY, link) == mac
    assert link.values() == (2, 5, 1_000, b"d" * 16, b"p" * 32, mac)
    assert type(link.count) is int and link.count == 2
    assert link.digest_list() == [b"d" * 8, b"d" * 8]


def test_a_link_mac_is_the_hmac_of_prev_head_and_digests() -> None:
    head = struct.pack("<qqqI", 2, 5, 1_000, 16)
    want = hmac.new(KEY, b"p" * 32 + head + b"d" * 16, "sha256").digest()
    assert link_mac(KEY, 2, 5, 1_000, b"d" * 16, b"p" * 32) == want


@pytest.mark.parametrize("field", range(4))
def test_a_cut_mac_covers_chain_seq_time_and_the_mac_it_cuts_at(field: int) -> None:
    args = [3, 10, b"m" * 32, 5_000]  # chain, through_seq, mac_at, before_us
    mac = cut_mac(KEY, *args)  # type: ignore[arg-type]
    want = hmac.new(KEY, b"cut" + struct.pack("<qqq", 3, 10, 5_000) + b"m" * 32, "sha256")
    assert mac == want.digest()
    bent = list(args)
    bent[field] = args[field] + (b"x" if field == 2 else 1)  # type: ignore[operator]
    assert cut_mac(KEY, *bent) != mac  # type: ignore[arg-type]


def test_a_head_links_over_the_first_columns_and_moves_only_when_told() -> None:
    head = ChainHead(KEY, 4)
    assert (head.seq, head.mac) == (0, genesis(KEY, 4))
    rows = [(*ROW, "old id 1"), (*ROW[:2], 8, *ROW[3:], "old id 2")]
    link = head.next_link(rows, 9_000, len(ROW))
    digests = row_digest(rows[0][: len(ROW)]) + row_digest(rows[1][: len(ROW)])
    assert link == Link(4, 1, 9_000, digests, genesis(KEY, 4), link.mac)
    assert link.mac == link_mac(KEY, 4, 1, 9_000, digests, genesis(KEY, 4))
    assert head.next_link(rows, 9_000, len(ROW)) == link  # not advanced yet
    head.advanced(link)
    assert (head.seq, head.mac) == (1, link.mac)
    second = head.link_over(b"", 9_001)
    assert (second.seq, second.prev) == (2, link.mac)
