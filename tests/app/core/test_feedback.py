"""POST /feedback: outcomes stored all or none, on SQLite and PostgreSQL; repeats counted,
conflicts refused; every bad item named; the metrics it feeds."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.contract.feedback import FeedbackResult
from app.contract.reader import read
from tests.support.bundles import Bundles, check_contract, make_settings
from tests.support.harness import AsgiHarness
from tests.support.metrics import scrape, total
from tests.support.trail import Trail

Serve = Callable[..., AsgiHarness]


@pytest.fixture
def serve(bundles: Bundles, trail: Trail, tmp_path: Path) -> Iterator[Serve]:
    """Start the app on this test's trail (SQLite or PostgreSQL)."""
    opened: list[AsgiHarness] = []

    def start(name: str = "demo", **kw: Any) -> AsgiHarness:
        app = AsgiHarness(make_settings(bundles.store, tmp_path, name, audit_url=trail.url, **kw))
        opened.append(app.__enter__())
        return app

    yield start
    for app in opened:
        app.__exit__(None, None, None)


def predict(app: AsgiHarness, rows: list[dict[str, Any]], rid: str) -> list[dict[str, Any]]:
    r = app.post("/predict", json={"instances": rows}, headers={"X-Request-ID": rid})
    assert r.status_code == 200, r.text
    return list(r.json()["predictions"])


def post(app: AsgiHarness, *items: dict[str, Any]) -> Any:
    return app.post("/feedback", json={"outcomes": list(items)})


def stored(trail: Trail) -> list[tuple[Any, ...]]:
    return sorted(trail.rows("select request_id, row_index, outcome from iabma_outcomes"))


def test_outcomes_are_stored_and_repeats_counted(
    serve: Serve, trail: Trail, bundles: Bundles
) -> None:
    app = serve()
    predict(app, bundles.demo.instances(slice(0, 3)), "three")
    predict(app, bundles.demo.instances([3]), "one")
    first = post(
        app,
        {"request_id": "three", "row": 2, "outcome": 1},
        {"request_id": "three", "outcome": 0},
        {"request_id": "one", "outcome": "1"},
    )
    assert first.status_code == 200, first.text
    check_contract(app, "FeedbackResult", first.json())
    assert read(FeedbackResult, first.json()) == FeedbackResult(accepted=3, duplicates=0)
    assert stored(trail) == [("one", 0, "1"), ("three", 0, "0"), ("three", 2, "1")]
    # The same outcomes again (1 as 1.0 and "1"), one new, and a repeat inside the body.
    again = post(app, {"request_id": "three", "row": 2, "outcome": 1.0},
                 {"request_id": "one", "row": 0, "outcome": 1},
                 {"request_id": "three", "row": 1, "outcome": 0},
                 {"request_id": "three", "row": 1, "outcome": "0"})  # fmt: skip
    assert again.status_code == 200, again.text
    assert again.json() == {"accepted": 1, "duplicates": 3, "poster": None}
    assert len(stored(trail)) == 4


def test_a_different_outcome_for_a_row_is_a_409_and_changes_nothing(
    serve: Serve, trail: Trail, bundles: Bundles
) -> None:
    app = serve()
    predict(app, bundles.demo.instances(slice(0, 2)), "pair")
    assert post(app, {"request_id": "pair", "outcome": 1}).status_code == 200
    r = post(app, {"request_id": "pair", "row": 1, "outcome": 0},
             {"request_id": "pair", "row": 0, "outcome": 0})  # fmt: skip
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["code"] == "conflicting_outcome" and err["field"] == "outcomes[1].outcome"
    assert "already has the outcome 1" in err["message"]
    assert stored(trail) == [("pair", 0, "1")], "the body's other outcome was not stored either"


def test_string_labels_and_their_text(serve: Serve, trail: Trail, bundles: Bundles) -> None:
    app = serve("creditcls")
    predict(app, bundles.creditcls.instances(slice(0, 2)), "loan")
    r = post(app, {"request_id": "loan", "outcome": " good "}, {"request_id": "loan", "row": 1,
             "outcome": "bad"})  # fmt: skip
    assert r.json() == {"accepted": 2, "duplicates": 0, "poster": None}, r.text
    typo = post(app, {"request_id": "loan", "row": 1, "outcome": "Bad"})
    assert typo.status_code == 422, "a label is matched exactly: 'Bad' is not 'bad'"
    err = typo.json()["error"]
    assert (err["field"], err["code"]) == ("outcomes[0].outcome", "unknown_class")
    assert 'did you mean "bad"?' in err["message"]
    assert stored(trail) == [("loan", 0, '"good"'), ("loan", 1, '"bad"')]


def test_regression_outcomes_are_numbers_or_numeric_text(
    serve: Serve, trail: Trail, bundles: Bundles
) -> None:
    app = serve("credit")
    predict(app, bundles.credit.instances(slice(0, 3)), "amounts")
    r = post(app, {"request_id": "amounts", "outcome": 1234.5},
             {"request_id": "amounts", "row": 1, "outcome": "2 500"},
             {"request_id": "amounts", "row": 2, "outcome": 900})  # fmt: skip
    assert r.json() == {"accepted": 3, "duplicates": 0, "poster": None}, r.text
    assert stored(trail) == [("amounts", 0, "1234.5"), ("amounts", 1, "2500.0"),
                             ("amounts", 2, "900.0")]  # fmt: skip
    assert post(app, {"request_id": "amounts", "row": 2, "outcome": 900.0}).json() == {
        "accepted": 0, "duplicates": 1, "poster": None,
    }  # fmt: skip


GOOD = {"request_id": "known", "outcome": 1}
BAD_ITEMS = [
    ({"request_id": "nobody", "outcome": 1}, "outcomes[1].request_id", "unknown_request"),
    ({"request_id": "known", "row": 5, "outcome": 1}, "outcomes[1].row", "unknown_row"),
    ({"request_id": "known", "row": -1, "outcome": 1}, "outcomes[1].row", "invalid_value"),
    ({"request_id": "known", "row": 0.5, "outcome": 1}, "outcomes[1].row", "invalid_value"),
    ({"request_id": "known", "row": True, "outcome": 1}, "outcomes[1].row", "invalid_value"),
    ({"request_id": "known", "outcome": 7}, "outcomes[1].outcome", "unknown_class"),
    ({"request_id": "known", "outcome": "seven"}, "outcomes[1].outcome", "unknown_class"),
    ({"request_id": "known", "outcome": None}, "outcomes[1].outcome", "missing_value"),
    ({"request_id": "known", "outcome": "NA"}, "outcomes[1].outcome", "missing_value"),
    ({"request_id": "known", "outcome": [1]}, "outcomes[1].outcome", "unknown_class"),
    ({"request_id": "known"}, "outcomes[1].outcome", "missing_field"),
    ({"outcome": 1}, "outcomes[1].request_id", "missing_field"),
    ({"request_id": "a b", "outcome": 1}, "outcomes[1].request_id", "invalid_value"),
    ({"request_id": 12, "outcome": 1}, "outcomes[1].request_id", "invalid_value"),
    ({"request_id": "known", "outcome": 1, "label": 1}, "outcomes[1].label", "unknown_field"),
    ("known", "outcomes[1]", "wrong_type"),
    ({"request_id": "known", "outcome": 0}, "outcomes[1].outcome", "conflicting_outcome"),
]


@pytest.mark.parametrize(("item", "field", "code"), BAD_ITEMS)
def test_one_bad_item_refuses_the_body_naming_its_field(
    serve: Serve, trail: Trail, bundles: Bundles, item: Any, field: str, code: str
) -> None:
    app = serve()
    predict(app, bundles.demo.instances([0]), "known")
    r = post(app, GOOD, item)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert (err["field"], err["code"]) == (field, code), err
    assert err["message"].startswith(field + ": ")
    assert stored(trail) == [], "all or nothing"


def test_a_nan_outcome_is_named(serve: Serve, bundles: Bundles) -> None:
    app = serve("credit")
    predict(app, bundles.credit.instances([0]), "known")
    body = b'{"outcomes": [{"request_id": "known", "outcome": NaN}]}'
    r = app.post("/feedback", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    assert r.json()["error"]["field"] == "outcomes[0].outcome"
    assert r.json()["error"]["code"] == "non_finite"
    huge = post(app, {"request_id": "known", "outcome": "1e999"}).json()["error"]
    assert huge["code"] == "non_finite"


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ([], 422, "body"),
        ({}, 422, "outcomes"),
        ({"outcomes": []}, 422, "outcomes"),
        ({"outcomes": {}}, 422, "outcomes"),
        ({"outcomes": [GOOD], "extra": 1}, 422, "extra"),
        ({"outcomes": [GOOD] * 4}, 413, "outcomes"),
    ],
)
def test_a_malformed_body_is_a_4xx_naming_its_field(
    serve: Serve, bundles: Bundles, body: Any, status: int, field: str
) -> None:
    app = serve(max_batch_rows=3)
    predict(app, bundles.demo.instances([0]), "known")
    r = app.post("/feedback", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["field"] == field


def test_bad_json_and_content_types_are_refused_before_reading(serve: Serve) -> None:
    app = serve()
    bad = app.post("/feedback", content=b"{", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    csv = app.post("/feedback", content=b"a,b", headers={"Content-Type": "text/csv"})
    assert csv.status_code == 415


def test_every_fault_is_listed(serve: Serve, bundles: Bundles) -> None:
    app = serve()
    predict(app, bundles.demo.instances([0]), "known")
    r = post(app, {"request_id": "x1", "outcome": 1}, GOOD, {"request_id": "known", "outcome": 9})
    fields = [d["field"] for d in r.json()["error"]["details"]]
    assert fields == ["outcomes[0].request_id", "outcomes[2].outcome"]


def test_an_outcome_counts_in_the_metrics(serve: Serve, bundles: Bundles) -> None:
    app = serve()
    served = predict(app, bundles.demo.instances(slice(0, 2)), "metered")
    before, _ = scrape(app)
    post(app, {"request_id": "metered", "outcome": 1}, {"request_id": "metered", "row": 1,
         "outcome": 0})  # fmt: skip
    post(app, {"request_id": "metered", "outcome": 1})
    post(app, {"request_id": "metered", "outcome": 0}, {"request_id": "nobody", "outcome": 0})
    after, types = scrape(app)
    assert types["iabma_realised_nll"] == "summary"

    def grew(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert grew("iabma_feedback_total", result="accepted") == 2
    assert grew("iabma_feedback_total", result="duplicate") == 1
    assert grew("iabma_feedback_total", result="rejected") == 2
    assert grew("iabma_realised_nll_count", expert="_mixture") == 2
    p = [served[k]["prediction"]["probabilities"][label] for k, label in ((0, "1"), (1, "0"))]
    nll = -math.log(p[0]) - math.log(p[1])
    # The trail keeps probabilities as float32 (app.audit.store.packing): log losses to 1e-6.
    assert grew("iabma_realised_nll_sum", expert="_mixture") == pytest.approx(nll, abs=1e-6)
    q = [served[0]["experts"]["poly3"]["probabilities"]["1"],
         served[1]["experts"]["poly3"]["probabilities"]["0"]]  # fmt: skip
    expected = -math.log(q[0]) - math.log(q[1])
    assert grew("iabma_realised_nll_sum", expert="poly3") == pytest.approx(expected, abs=1e-6)
