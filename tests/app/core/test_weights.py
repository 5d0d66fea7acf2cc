"""GET /weights: the gate now, an audited record, and pages of records with aggregates."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest

from app.contract.answers import GateWeights, RecordPage
from app.contract.reader import read
from tests.support.bundles import Bundles, assert_close, audited, check_contract, make_settings
from tests.support.harness import AsgiHarness, UvicornHarness, harness

Client = AsgiHarness | UvicornHarness


@pytest.fixture(params=["asgi", "uvicorn"])
def demo(
    request: pytest.FixtureRequest, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Client]:
    """A fresh trail per test, so pages and aggregates see only this test's records."""
    settings = make_settings(bundles.store, tmp_path_factory.mktemp("audit"), "demo")
    with harness(request.param, settings) as h:
        yield h


def test_gate_weights_now_equal_the_estimator(demo: Client, bundles: Bundles) -> None:
    est, X = bundles.demo.est, bundles.demo.X
    for i in range(5):
        x1, x2 = float(X.x1[i]), float(X.x2[i])
        r = demo.get("/weights", params={"x1": repr(x1), "x2": repr(x2)})
        assert r.status_code == 200, r.text
        check_contract(demo, "GateWeights", r.json())
        body = read(GateWeights, r.json())
        got = [body.weights[e] for e in est.expert_names_]
        np.testing.assert_allclose(got, est.weights(X.iloc[[i]])[0], atol=1e-5, rtol=0)
        assert body.top_expert == est.expert_names_[int(np.argmax(got))]
    assert demo.service.store is not None
    assert demo.get("/weights").json()["aggregate"]["records"] == 0, "the gate is not audited"


def test_gate_weights_with_categories(
    bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> None:
    trained = bundles.credit
    frame = trained.X.iloc[[2]].assign(purpose=[None])
    params = {k: ("" if v is None else str(v)) for k, v in frame.iloc[0].to_dict().items()}
    params["purpose"] = "NA"  # a missing value, as the bundle's input rule says
    settings = make_settings(bundles.store, tmp_path_factory.mktemp("audit"), "credit")
    with AsgiHarness(settings) as app:
        r = app.get("/weights", params=params)
        assert r.status_code == 200, r.text
        got = [r.json()["weights"][e] for e in trained.est.expert_names_]
        np.testing.assert_allclose(got, trained.est.weights(frame)[0], atol=1e-5, rtol=0)
        bad = app.get("/weights", params={**params, "housing": "castle"})
    assert bad.status_code == 422
    assert bad.json()["error"]["field"] == "housing"
    assert bad.json()["error"]["code"] == "unknown_category"


def test_record_by_request_id_equals_the_response(demo: Client) -> None:
    sent = {"instances": [{"x1": 0.25, "x2": 1.5}, {"x1": -1.0, "x2": None}]}
    before = datetime.now().astimezone()
    r = demo.post(
        "/predict", json={"instances": sent["instances"][:1]}, headers={"X-Request-ID": "rec-1"}
    )
    assert r.status_code == 200
    got = demo.get("/weights", params={"request_id": "rec-1"})
    assert got.status_code == 200, got.text
    check_contract(demo, "AuditRecord", got.json())
    record = got.json()
    assert_close(record["predictions"], audited(r.json()["predictions"]))
    assert (record["model"], record["version"], record["request_id"]) == (
        "demo", r.json()["version"], "rec-1",
    )  # fmt: skip
    stamp = datetime.fromisoformat(record["time"])
    assert before - timedelta(seconds=1) <= stamp <= datetime.now().astimezone()
    assert record["input"]["mode"] == "hash" and len(record["input"]["hmac_sha256"]) == 64
    weights = r.json()["predictions"][0]["weights"]
    assert record["top_expert"] == max(weights, key=weights.get)


def test_a_regression_record_keeps_each_experts_mean_and_std(
    bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> None:
    settings = make_settings(bundles.store, tmp_path_factory.mktemp("audit"), "credit")
    with AsgiHarness(settings) as app:
        rows = bundles.credit.instances(slice(0, 3))
        r = app.post("/predict", json={"instances": rows, "include": ["prediction"]})
        assert r.status_code == 200, r.text
        record = app.get("/weights", params={"request_id": r.json()["request_id"]}).json()
        full = app.post("/predict", json={"instances": rows}).json()["predictions"]
    check = [{k: item[k] for k in ("experts", "prediction")} for item in full]
    assert [{k: item[k] for k in check[0]} for item in record["predictions"]] == check, (
        "kept whatever the answer included"
    )
    # The record keeps each row's weights but its largest, which it re-derives as one less
    # the others: to 1e-6, as /weights promises, not to the float32's last digit.
    for kept, answered in zip(record["predictions"], full, strict=True):
        assert kept["weights"] == pytest.approx(answered["weights"], abs=1e-6)


def test_pages_cover_every_record_once_with_aggregates(demo: Client, bundles: Bundles) -> None:
    rows = bundles.demo.instances(slice(0, 11))
    answers = {}
    for k, row in enumerate(rows):
        rid = f"page-{k}"
        r = demo.post(
            "/predict",
            json={"instances": [row, row] if k == 4 else [row]},
            headers={"X-Request-ID": rid},
        )
        assert r.status_code == 200
        answers[rid] = audited(r.json()["predictions"])
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        raw = demo.get("/weights", params=params).json()
        check_contract(demo, "RecordPage", raw)
        page = read(RecordPage, raw)
        pages += 1
        seen += [rec.request_id for rec in page.records]
        for rec in raw["records"]:
            assert_close(rec["predictions"], answers[rec["request_id"]])
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == 4
    assert seen == [f"page-{k}" for k in reversed(range(11))], "newest first, each once"

    weights = np.array(
        [
            [p["weights"][e] for e in bundles.demo.est.expert_names_]
            for ps in answers.values()
            for p in ps
        ]
    )
    agg = page.aggregate
    assert (agg.records, agg.instances) == (11, 12)
    for j, e in enumerate(bundles.demo.est.expert_names_):
        # The trail keeps weights as float32 (app.audit.store.packing): within 1e-7 each.
        assert agg.experts[e].mean_weight == pytest.approx(weights[:, j].mean(), abs=1e-6)
        share = float(np.mean(weights.argmax(axis=1) == j))
        assert agg.experts[e].argmax_share == pytest.approx(share, abs=1e-12)


def test_expert_and_time_filters(demo: Client, bundles: Bundles) -> None:
    rows = bundles.demo.instances(slice(0, 30))
    tops = {}
    for k, row in enumerate(rows):
        r = demo.post("/predict", json={"instances": [row]}, headers={"X-Request-ID": f"f-{k}"})
        w = r.json()["predictions"][0]["weights"]
        tops[f"f-{k}"] = max(w, key=w.get)
    everything = demo.get("/weights", params={"limit": 1000}).json()["records"]
    times = {rec["request_id"]: rec["time"] for rec in everything}
    for expert in set(tops.values()):
        page = demo.get("/weights", params={"expert": expert, "limit": 1000}).json()
        assert {rec["request_id"] for rec in page["records"]} == {
            k for k, t in tops.items() if t == expert
        }
        assert page["aggregate"]["experts"][expert]["argmax_share"] == 1.0
    since, until = times["f-10"], times["f-20"]
    window = demo.get("/weights", params={"since": since, "until": until, "limit": 1000}).json()
    assert [rec["request_id"] for rec in window["records"]] == [
        f"f-{k}" for k in reversed(range(10, 20))
    ]
    assert window["aggregate"]["records"] == 10
    assert window["filter"] == {"since": since, "until": until, "expert": None, "limit": 1000}


@pytest.mark.parametrize(
    ("params", "status", "field", "says"),
    [
        ({"limit": "0"}, 422, "limit", "from 1 to 1000"),
        ({"limit": "abc"}, 422, "limit", "got 'abc'"),
        ({"limit": "5000"}, 422, "limit", "from 1 to 1000"),
        ({"since": "yesterday"}, 422, "since", "ISO-8601"),
        # In the year 0 once in UTC: the console's timeline overflowed formatting it.
        ({"since": "0001-01-01T00:00:00+01:00"}, 422, "since", "outside the years 1 to 9999"),
        ({"until": "9999-12-31T23:59:59-01:00"}, 422, "until", "outside the years 1 to 9999"),
        ({"since": "2026-02-01", "until": "2026-01-01"}, 422, "until", "later than since"),
        ({"expert": "oracle"}, 422, "expert", "known: poly2, poly3, lda, circle, circle_fit"),
        ({"cursor": "not-a-cursor"}, 422, "cursor", "not a cursor"),
        # Were 500s: str.isdigit passes "²", which int() refuses; and a cursor of
        # "9999999999999999999.1" (19 digits, past int64) overflowed in the database driver.
        ({"limit": "²"}, 422, "limit", "from 1 to 1000"),
        ({"cursor": "OTk5OTk5OTk5OTk5OTk5OTk5OS4x"}, 422, "cursor", "not a cursor"),
        ({"colour": "red"}, 422, "colour", "unknown query parameter"),
        ({"request_id": "a", "limit": "3"}, 422, "limit", "cannot be combined with request_id"),
        ({"request_id": "no such id"}, 422, "request_id", "letters, digits"),
        ({"request_id": "never-seen"}, 404, "request_id", "no audit record"),
        ({"x1": "0.5"}, 422, "x2", "missing feature"),
        ({"x1": "abc", "x2": "1"}, 422, "x1", 'expected a number or null, got "abc"'),
        ({"x1": "inf", "x2": "1"}, 422, "x1", "inf is not allowed"),
        ({"x1": "1", "x2": "1", "x3": "2"}, 422, "x3", "unknown feature"),
        ({"x1": "1", "x2": "1", "limit": "2"}, 422, "limit", "unknown feature"),
    ],
)
def test_bad_queries(
    demo: Client, params: dict[str, str], status: int, field: str, says: str
) -> None:
    r = demo.get("/weights", params=params)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["field"] == field
    assert says in err["message"]


def test_repeated_parameter(demo: Client) -> None:
    r = demo.get("/weights?x1=1&x1=2&x2=0")
    assert r.status_code == 422
    assert r.json()["error"] == {
        "code": "duplicate_parameter",
        "field": "x1",
        "message": "x1: given more than once",
    }
