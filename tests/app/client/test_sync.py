"""Client against a real uvicorn: typed answers equal the service's JSON and the estimator."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import httpx
import numpy as np
import pytest

from app.client import (
    AuditRecord,
    BadRequest,
    ClassPrediction,
    Client,
    GateWeights,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    RecordPage,
    RegressionPrediction,
)
from tests.support.bundles import Bundles
from tests.support.trail import assert_kept

if TYPE_CHECKING:
    from conftest import Serve  # the fixture's type; pytest provides the value

TOL = 1e-5


def counting(seen: list[httpx.Request]) -> dict[str, list]:
    return {"request": [seen.append]}


def test_predict_equals_the_estimator_and_the_raw_answer(demo_url: str, bundles: Bundles) -> None:
    est, X = bundles.demo.est, bundles.demo.X.iloc[:8]
    rows = bundles.demo.instances(slice(0, 8))
    with Client(demo_url) as client:
        result = client.predict(rows, request_id="sync-predict-1")
    raw = httpx.post(demo_url + "/predict", json={"instances": rows}).json()
    assert (result.model, result.version, result.task) == ("demo", bundles.demo.version,
                                                         "classification")  # fmt: skip
    assert result.request_id == "sync-predict-1"
    assert len(result.predictions) == 8
    for got, want in zip(result.predictions, raw["predictions"], strict=True):
        assert isinstance(got.prediction, ClassPrediction)
        assert got.prediction.label == want["prediction"]["label"]
        assert got.prediction.probabilities == want["prediction"]["probabilities"]
        assert got.weights == want["weights"]
        assert got.uncertainty is not None and got.uncertainty.total == want["uncertainty"]["total"]
        assert got.experts is not None and set(got.experts) == set(est.expert_names_)
    weights = [[p.weights[e] for e in est.expert_names_] for p in result.predictions]
    np.testing.assert_allclose(weights, est.weights(X), atol=TOL, rtol=0)
    assert [p.prediction.label for p in result.predictions] == est.predict(X).tolist()
    assert result.predictions[0].top_expert == est.expert_names_[int(np.argmax(weights[0]))]


def test_regression_and_include(credit_url: str, bundles: Bundles) -> None:
    rows = bundles.credit.instances(slice(0, 4))
    with Client(credit_url) as client:
        full = client.predict(rows)
        slim = client.predict(rows, include=["prediction", "weights"])
    first = full.predictions[0].prediction
    assert isinstance(first, RegressionPrediction) and first.interval.level == 0.9
    assert first.interval.lower < first.mean < first.interval.upper
    np.testing.assert_allclose(
        [p.prediction.mean for p in full.predictions],
        bundles.credit.est.distribution(bundles.credit.X.iloc[:4]).mean,
        rtol=1e-4,
    )
    assert [p.prediction for p in slim.predictions] == [p.prediction for p in full.predictions]
    assert all(p.experts is None and p.uncertainty is None for p in slim.predictions)


def test_models(demo_url: str, bundles: Bundles) -> None:
    with Client(demo_url) as client:
        info = client.models()
    assert (info.name, info.version, info.task) == ("demo", bundles.demo.version, "classification")
    assert [f.name for f in info.features] == ["x1", "x2"]
    assert [e.name for e in info.experts] == list(bundles.demo.est.expert_names_)
    assert all(set(e.features) <= {"x1", "x2"} and e.features for e in info.experts)
    assert info.classes == tuple(bundles.demo.est.classes_.tolist())
    assert info.created_at.tzinfo is not None and info.manifest["name"] == "demo"


def test_weights_record_gate_and_page(demo_url: str, bundles: Bundles) -> None:
    rows = [{"x1": 0.25, "x2": 1.5}, {"x1": -1.0, "x2": 0.5}]
    with Client(demo_url) as client:
        sent = client.predict(rows, request_id="sync-weights-1")
        record = client.weights(request_id="sync-weights-1")
        gate = client.weights(features={"x1": 0.25, "x2": 1.5})
        page = client.weights(limit=1)
    assert isinstance(record, AuditRecord) and isinstance(gate, GateWeights)
    assert isinstance(page, RecordPage)
    assert (record.request_id, record.version, record.n_instances) == (
        "sync-weights-1", sent.version, 2,
    )  # fmt: skip
    assert record.input.mode == "hash" and record.input.digest
    for got, want in zip(record.predictions, sent.predictions, strict=True):
        assert_kept(
            (got.prediction, got.weights, got.experts, got.uncertainty),
            (want.prediction, want.weights, want.experts, want.uncertainty),
        )
    np.testing.assert_allclose(
        list(gate.weights.values()), list(sent.predictions[0].weights.values()), atol=TOL, rtol=0
    )
    assert len(page.records) == 1 and page.filter["limit"] == 1
    assert page.aggregate.records >= 1 and set(page.aggregate.experts) == set(gate.weights)


def test_iter_pages_follows_the_cursor_to_the_end(serve: Serve, bundles: Bundles) -> None:
    url = serve("demo").base_url  # its own trail: the listing holds only these records
    start = datetime.now(UTC)
    ids = [f"page-{i}" for i in range(5)]
    with Client(url) as client:
        for i, rid in enumerate(ids):
            client.predict([{"x1": 0.1 * i, "x2": 1.0}], request_id=rid)
        pages = list(client.iter_pages(since=start, limit=2))
        records = list(client.iter_records(since=start, limit=2))
        single = list(client.iter_pages(limit=1000))
    assert [len(p.records) for p in pages] == [2, 2, 1]
    assert [p.next_cursor is None for p in pages] == [False, False, True]
    assert [r.request_id for p in pages for r in p.records] == ids[::-1]
    assert [r.request_id for r in records] == ids[::-1]
    assert len(single) == 1 and single[0].aggregate.records == 5


def test_422_is_typed_names_the_field_and_is_not_retried(demo_url: str) -> None:
    seen: list[httpx.Request] = []
    with (
        Client(demo_url, event_hooks=counting(seen)) as client,
        pytest.raises(InvalidInput) as caught,
    ):
        client.predict([{"x1": 0.5, "x2": 1.0}, {"x1": "abc", "x2": 1.0}])
    err = caught.value
    assert (err.status, err.field, err.attempts) == (422, "instances[1].x1", 1)
    assert err.code == "wrong_type" and 'got "abc"' in err.message, err.message
    assert err.request_id == seen[0].headers["x-request-id"]
    assert len(seen) == 1


def test_400_and_404_and_413_are_typed_and_not_retried(demo_url: str) -> None:
    seen: list[httpx.Request] = []
    with Client(demo_url, event_hooks=counting(seen)) as client:
        with pytest.raises(BadRequest) as bad:
            client.predict([{"x1": 0.5, "x2": 1.0}], request_id="not an id")
        with pytest.raises(NotFound) as missing:
            client.weights(request_id="never-sent")
        with pytest.raises(PayloadTooLarge) as large:
            client.predict([{"x1": 0.5, "x2": 1.0}] * 1001, batch_rows=1001)
    assert (bad.value.status, bad.value.field) == (400, "header X-Request-ID")
    assert (missing.value.status, missing.value.field) == (404, "request_id")
    assert (large.value.status, large.value.field) == (413, "instances")
    assert len(seen) == 3


def test_mixing_weights_modes_is_refused_before_sending(demo_url: str) -> None:
    seen: list[httpx.Request] = []
    with Client(demo_url, event_hooks=counting(seen)) as client:
        with pytest.raises(ValueError, match="request_id cannot be combined with limit"):
            client.weights(request_id="x", limit=2)  # type: ignore[call-overload]
        with pytest.raises(ValueError, match="features cannot be combined with expert"):
            client.weights(features={"x1": 1}, expert="knn")  # type: ignore[call-overload]
    assert seen == []
