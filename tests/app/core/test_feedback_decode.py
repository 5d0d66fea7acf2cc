"""``POST /feedback``'s body read item by item, its refusals chosen by what they are, and
how an outcome names its poster; no trail needed."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from app.audit.read.scores import Served
from app.audit.write.outcome_rows import Found
from app.bundle.normalise import Normaliser
from app.core.feedback import (
    MAX_FAULTS,
    Item,
    _check,
    _item,
    _refuse,
    _unbound,
    decode,
    poster_of,
)
from app.errors import Archived, Fault, InvalidInput, OutcomeConflict, TooManyRows
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness


def faults_of(body: Any, max_rows: int = 100) -> list[tuple[str, str]]:
    with pytest.raises(InvalidInput) as err:
        decode(body, max_rows)
    return [(f.code, f.field) for f in err.value.faults]


def test_well_formed_items_are_read_in_order() -> None:
    got = decode({"outcomes": [{"request_id": "a", "outcome": 1},
                               {"request_id": "b:2", "row": 3, "outcome": "x"}]}, 2)  # fmt: skip
    assert got == [Item(0, "a", 0, 1), Item(1, "b:2", 3, "x")]
    assert _item(5, {"outcome": None, "row": 1, "request_id": "c"}) == Item(5, "c", 1, None)
    # A mapping the quick test does not take (a dict's subclass) is read the long way, to
    # the same item.
    assert _item(0, OrderedDict(request_id="c", outcome=2)) == Item(0, "c", 0, 2)
    assert _item(1, OrderedDict(request_id="c", row=4, outcome=2)) == Item(1, "c", 4, 2)


@pytest.mark.parametrize(
    ("body", "want"),
    [
        ([], [("wrong_type", "body")]),
        ({"outcomes": [], "x": 1}, [("unknown_field", "x")]),
        ({}, [("missing_field", "outcomes")]),
        ({"outcomes": {}}, [("wrong_type", "outcomes")]),
        ({"outcomes": []}, [("empty_batch", "outcomes")]),
        ({"outcomes": [3]}, [("wrong_type", "outcomes[0]")]),
        ({"outcomes": [{"request_id": "a"}]}, [("missing_field", "outcomes[0].outcome")]),
        ({"outcomes": [{"outcome": 1}]}, [("missing_field", "outcomes[0].request_id")]),
        (
            {"outcomes": [{"request_id": "a", "outcome": 1, "extra": 0}]},
            [("unknown_field", "outcomes[0].extra")],
        ),
        (
            {"outcomes": [{"request_id": "a b", "outcome": 1}]},
            [("invalid_value", "outcomes[0].request_id")],
        ),
        (
            {"outcomes": [{"request_id": "a\n", "outcome": 1}]},
            [("invalid_value", "outcomes[0].request_id")],
        ),
        (
            {"outcomes": [{"request_id": 7, "outcome": 1}]},
            [("invalid_value", "outcomes[0].request_id")],
        ),
        (
            {"outcomes": [{"request_id": "a", "row": -1, "outcome": 1}]},
            [("invalid_value", "outcomes[0].row")],
        ),
        (
            {"outcomes": [{"request_id": "a", "row": True, "outcome": 1}]},
            [("invalid_value", "outcomes[0].row")],
        ),
        (
            {"outcomes": [{"request_id": "a", "row": 1.0, "outcome": 1}]},
            [("invalid_value", "outcomes[0].row")],
        ),
    ],
)
def test_each_fault_of_a_body_is_named(body: Any, want: list[tuple[str, str]]) -> None:
    assert faults_of(body) == want


def test_messages_say_what_was_expected() -> None:
    with pytest.raises(InvalidInput) as err:
        decode({"outcomes": [{"request_id": "a", "row": "2", "outcome": 1}, 5]}, 10)
    row, item = err.value.faults
    assert row.message == 'expected an integer >= 0, got "2"'
    assert item.message == "expected an object, got 5"
    with pytest.raises(InvalidInput) as err:
        decode({"outcomes": [{"request_id": None, "outcome": 1}]}, 10)
    assert err.value.faults[0].message == (
        "expected a request id (1-128 letters, digits or ._:/+=-), got null"
    )


def test_a_row_zero_and_the_longest_id_are_taken() -> None:
    rid = "r" * 128
    assert (
        decode({"outcomes": [{"request_id": rid, "row": 0, "outcome": 1}]}, 1)[0].request_id == rid
    )
    assert faults_of({"outcomes": [{"request_id": rid + "r", "outcome": 1}]}) == [
        ("invalid_value", "outcomes[0].request_id")
    ]


def test_too_many_items_is_its_own_refusal() -> None:
    body = {"outcomes": [{"request_id": "a", "outcome": 1}] * 3}
    assert len(decode(body, 3)) == 3
    with pytest.raises(TooManyRows, match="3 outcomes exceed the limit of 2") as err:
        decode(body, 2)
    assert err.value.faults[0].field == "outcomes"


def test_faults_stop_at_the_cap() -> None:
    body = {"outcomes": [{"request_id": "a b", "row": -1, "outcome": 1}] * 30}
    found = faults_of(body)
    assert len(found) == MAX_FAULTS
    assert found[-1] == ("invalid_value", f"outcomes[{MAX_FAULTS // 2 - 1}].row")
    one_each = {"outcomes": [5] * 30}
    assert faults_of(one_each)[-1] == ("wrong_type", f"outcomes[{MAX_FAULTS - 1}]")


def test_an_id_that_names_no_one_record_is_told_apart() -> None:
    found = Found(ambiguous={"twice": 2}, archived={"old": "2026-01-02"}, unreadable={"bent"})
    item = Item(3, "", 0, 1)

    def fault(rid: str) -> Fault | None:
        return _unbound("demo", Item(item.at, rid, 0, 1), found)

    twice, old, bent, none = (fault(r) for r in ("twice", "old", "bent", "none"))
    assert twice is not None and twice.code == "ambiguous_request"
    assert twice.field == "outcomes[3].request_id" and twice.message.startswith("2 predictions")
    assert old is not None and old.code == "archived" and "files of 2026-01-02" in old.message
    assert bent is not None and bent.code == "not_scorable"
    assert none is not None and none.code == "unknown_request" and "'demo'" in none.message


def test_the_refusal_is_chosen_by_the_faults() -> None:
    _refuse([])  # nothing to refuse
    ambiguous = Fault("ambiguous_request", "outcomes[0].request_id", "twice")
    archived = Fault("archived", "outcomes[1].request_id", "gone")
    other = Fault("invalid_value", "outcomes[2].row", "bad")
    with pytest.raises(OutcomeConflict) as conflict:
        _refuse([ambiguous, ambiguous])
    assert len(conflict.value.faults) == 2
    with pytest.raises(Archived) as gone:
        _refuse([archived, archived])
    assert gone.value.faults == [archived, archived] and str(gone.value) == "gone"
    for mixed in ([ambiguous, other], [archived, ambiguous], [other]):
        with pytest.raises(InvalidInput) as err:
            _refuse(mixed)
        assert type(err.value) is InvalidInput and err.value.faults == mixed
    with pytest.raises(InvalidInput) as err:
        _refuse([other] * (MAX_FAULTS + 3))
    assert len(err.value.faults) == MAX_FAULTS


def test_a_poster_is_a_keyed_fingerprint_of_its_key() -> None:
    name = poster_of(b"trail key", "secret-key-1")
    assert name.startswith("key:") and len(name) == 16
    assert int(name[4:], 16) >= 0 and "secret" not in name
    assert poster_of(b"trail key", "secret-key-1") == name
    assert poster_of(b"trail key", "secret-key-2") != name
    assert poster_of(b"other key", "secret-key-1") != name
    assert poster_of(None, "k") == poster_of(b"", "k")


def _served(rid: str, n: int, outputs: bytes | None = b"kept") -> Served:
    return Served(1, rid, 0, "v1", "classification", n, '["a","b"]', '["no","yes"]', b"", b"",
                  outputs)  # fmt: skip


def test_rows_a_record_lacks_and_records_that_cannot_be_scored_are_named() -> None:
    found = Found(records={"two": _served("two", 2), "one": _served("one", 1),
                           "old": _served("old", 1, None)})  # fmt: skip
    items = [Item(0, "two", 2, "maybe"), Item(1, "one", 1, "yes"), Item(2, "old", 0, "maybe")]
    with pytest.raises(InvalidInput) as err:
        _check("demo", items, found, Normaliser(), None)
    assert [(f.code, f.field, f.message) for f in err.value.faults] == [
        ("unknown_row", "outcomes[0].row", "request 'two' has 2 row(s): 0 to 1"),
        ("unknown_row", "outcomes[1].row", "request 'one' has 1 row(s): 0 only"),
        (
            "not_scorable",
            "outcomes[2].request_id",
            "this prediction was audited by a release that did not keep the experts' own "
            "outputs, so its outcome cannot be scored",
        ),
    ]


def test_feedback_keys_alone_name_the_poster(bundles: Bundles, tmp_path: Path) -> None:
    """Only the feedback route takes keys: its outcomes still name their poster."""
    settings = make_settings(bundles.store, tmp_path, feedback_keys="feeder-key-0123456789")
    with AsgiHarness(settings) as app:
        r = app.post("/predict", json={"instances": bundles.demo.instances([0])},
                     headers={"X-Request-ID": "fk-1"})  # fmt: skip
        assert r.status_code == 200, r.text
        label = r.json()["predictions"][0]["prediction"]["label"]
        body = {"outcomes": [{"request_id": "fk-1", "outcome": label}]}
        done = app.post("/feedback", json=body, headers={"X-API-Key": "feeder-key-0123456789"})
    assert done.status_code == 200, done.text
    assert done.json()["poster"] == poster_of(app.service.require_store().chain_key,
                                              "feeder-key-0123456789")  # fmt: skip
