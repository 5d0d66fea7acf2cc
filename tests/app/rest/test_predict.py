"""POST /predict through httpx's ASGI transport and through uvicorn on 127.0.0.1.

The fitted estimator is the oracle: served numbers must equal its numbers (<= 1e-5).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest

from app.bundle.mixture import clip_proba
from app.core.graph import ALONE_SECONDS, ROW_SECONDS, runs_alone_inline
from tests.support.bundles import Bundles, check_contract, instances, make_settings
from tests.support.harness import AsgiHarness, UvicornHarness, harness

TOL = 1e-5
Client = AsgiHarness | UvicornHarness


@pytest.fixture(scope="module", params=["asgi", "uvicorn"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def _serve(kind: str, bundles: Bundles, tmp: Any, name: str, **kw: Any) -> Iterator[Client]:
    with harness(kind, make_settings(bundles.store, tmp.mktemp("audit"), name, **kw)) as h:
        yield h


@pytest.fixture(scope="module")
def demo(kind: str, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    yield from _serve(kind, bundles, tmp_path_factory, "demo")


@pytest.fixture(scope="module")
def credit(
    kind: str, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Client]:
    yield from _serve(kind, bundles, tmp_path_factory, "credit")


def column(items: list[dict[str, Any]], *path: str) -> np.ndarray:
    out = []
    for item in items:
        value: Any = item
        for key in path:
            value = value[key]
        out.append(value)
    return np.asarray(out, dtype=np.float64)


def test_classification_equals_the_estimator(demo: Client, bundles: Bundles) -> None:
    trained = bundles.demo
    est, X = trained.est, trained.X.iloc[:60]
    r = demo.post("/predict", json={"instances": trained.instances(slice(0, 60))})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["model"], body["version"], body["task"]) == (
        "demo",
        trained.version,
        "classification",
    )
    items = body["predictions"]
    assert len(items) == 60
    experts = est.expert_names_

    proba = np.array(
        [[it["prediction"]["probabilities"][str(c)] for c in est.classes_] for it in items]
    )
    np.testing.assert_allclose(proba, est.predict_proba(X), atol=TOL, rtol=0)
    assert [it["prediction"]["label"] for it in items] == est.predict(X).tolist()

    weights = np.array([[it["weights"][e] for e in experts] for it in items])
    np.testing.assert_allclose(weights, est.weights(X), atol=TOL, rtol=0)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-7)  # float32 text

    own = clip_proba(est.expert_outputs(X))
    for j, e in enumerate(experts):
        got = np.array(
            [[it["experts"][e]["probabilities"][str(c)] for c in est.classes_] for it in items]
        )
        np.testing.assert_allclose(got, own[:, j, :], atol=TOL, rtol=0)

    mix = est.mixture(X)
    for key in ("total", "aleatoric", "epistemic"):
        np.testing.assert_allclose(column(items, "uncertainty", key), getattr(mix, key), atol=TOL)
    entropy = -(weights * np.log(weights)).sum(axis=1) / np.log(len(experts))
    np.testing.assert_allclose(column(items, "uncertainty", "selection"), entropy, atol=TOL)
    check_contract(demo, "PredictResult", body)


def test_regression_with_categories_equals_the_estimator(credit: Client, bundles: Bundles) -> None:
    trained = bundles.credit
    est, X = trained.est, trained.X.iloc[:40].copy()
    X.loc[0:4, "purpose"] = None  # missing categories and numbers travel as null
    X.loc[3:7, "age"] = np.nan
    r = credit.post("/predict", json={"instances": instances(X)})
    assert r.status_code == 200, r.text
    items = r.json()["predictions"]
    dist = est.distribution(X)
    # Compared in standardised target units: the ONNX graphs compute in float32, so
    # credit amounts in the thousands carry ~1e-4 of absolute rounding.
    scale = est.y_scale_

    def close(got: np.ndarray, want: np.ndarray, power: int = 1) -> None:
        np.testing.assert_allclose(got / scale**power, want / scale**power, atol=TOL, rtol=0)

    close(column(items, "prediction", "mean"), dist.mean)
    close(column(items, "prediction", "std"), dist.std)
    close(column(items, "prediction", "interval", "lower"), dist.lower)
    close(column(items, "prediction", "interval", "upper"), dist.upper)
    assert {it["prediction"]["interval"]["level"] for it in items} == {0.9}
    close(column(items, "uncertainty", "total"), dist.total, power=2)
    close(column(items, "uncertainty", "aleatoric"), dist.aleatoric, power=2)
    close(column(items, "uncertainty", "epistemic"), dist.epistemic, power=2)
    experts = est.expert_names_
    weights = np.array([[it["weights"][e] for e in experts] for it in items])
    np.testing.assert_allclose(weights, est.weights(X), atol=TOL, rtol=0)
    for j, e in enumerate(experts):
        close(column(items, "experts", e, "mean"), dist.expert_means[:, j])
        close(column(items, "experts", e, "std"), np.full(len(items), est.sigmas_[j] * scale))
    check_contract(credit, "PredictResult", r.json())


def test_string_labels(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> None:
    trained = bundles.creditcls
    X = trained.X.iloc[:25]
    settings = make_settings(bundles.store, tmp_path_factory.mktemp("audit"), "creditcls")
    with AsgiHarness(settings) as app:
        r = app.post("/predict", json={"instances": trained.instances(slice(0, 25))})
    assert r.status_code == 200, r.text
    items = r.json()["predictions"]
    assert [it["prediction"]["label"] for it in items] == trained.est.predict(X).tolist()
    assert set(items[0]["prediction"]["probabilities"]) == {"bad", "good"}


def test_missing_number_is_null(credit: Client, bundles: Bundles) -> None:
    trained = bundles.credit
    row = trained.instances([3])[0]
    r = credit.post("/predict", json={"instances": [{**row, "duration": None}]})
    assert r.status_code == 200, r.text
    want = trained.est.distribution(trained.X.iloc[[3]].assign(duration=[np.nan])).mean[0]
    got = r.json()["predictions"][0]["prediction"]["mean"]
    assert abs(got - want) / trained.est.y_scale_ <= TOL


def test_missing_value_an_expert_cannot_take_is_a_422(demo: Client, bundles: Bundles) -> None:
    # The circle experts read raw coordinates without imputation: the estimator itself
    # answers NaN here, so the service names the row and the experts instead of a 5xx.
    frame = pd.DataFrame({"x1": [np.nan], "x2": [0.25]})
    assert np.isnan(bundles.demo.est.predict_proba(frame)).all()
    r = demo.post(
        "/predict", json={"instances": [{"x1": 0.3, "x2": 0.1}, {"x1": None, "x2": 0.25}]}
    )
    assert r.status_code == 422
    err = r.json()["error"]
    assert (err["code"], err["field"]) == ("non_finite_output", "instances[1]")
    assert "circle, circle_fit" in err["message"]


def test_client_request_id_is_echoed(demo: Client) -> None:
    rid = "client-42.retry:1"
    r = demo.post(
        "/predict", json={"instances": [{"x1": 0.1, "x2": 0.2}]}, headers={"X-Request-ID": rid}
    )
    assert r.status_code == 200
    assert r.headers["x-request-id"] == rid
    assert r.json()["request_id"] == rid


def test_request_id_is_made_when_absent(demo: Client) -> None:
    r = demo.post("/predict", json={"instances": [{"x1": 0.1, "x2": 0.2}]})
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])
    assert r.json()["request_id"] == r.headers["x-request-id"]


def test_batch_equals_single_rows(demo: Client, bundles: Bundles) -> None:
    rows = bundles.demo.instances(slice(100, 105))
    batch = demo.post("/predict", json={"instances": rows}).json()["predictions"]
    for row, want in zip(rows, batch, strict=True):
        one = demo.post("/predict", json={"instances": [row]}).json()["predictions"][0]
        assert one["prediction"]["label"] == want["prediction"]["label"]
        np.testing.assert_allclose(
            list(one["weights"].values()), list(want["weights"].values()), atol=1e-7
        )


def test_unknown_category_as_missing_when_configured(
    bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> None:
    trained = bundles.credit
    row = trained.instances([0])[0]
    settings = make_settings(
        bundles.store, tmp_path_factory.mktemp("audit"), "credit", unknown_category="missing"
    )
    with AsgiHarness(settings) as app:
        unseen = app.post("/predict", json={"instances": [{**row, "purpose": "spaceship"}]})
        null = app.post("/predict", json={"instances": [{**row, "purpose": None}]})
    assert unseen.status_code == 200, unseen.text
    assert unseen.json()["predictions"] == null.json()["predictions"]
    frame = trained.X.iloc[[0]].assign(purpose=[None])
    got = unseen.json()["predictions"][0]["prediction"]["mean"]
    want = trained.est.distribution(frame).mean[0]
    assert abs(got - want) / trained.est.y_scale_ <= TOL


def test_openapi_documents_the_contract(demo: Client) -> None:
    spec = demo.get("/openapi.json").json()
    post = spec["paths"]["/predict"]["post"]
    schema = post["requestBody"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/PredictRequest"}
    assert "instances" in spec["components"]["schemas"]["PredictRequest"]["properties"]
    assert "422" in post["responses"] and "413" in post["responses"]
    assert "IABMA_UNKNOWN_CATEGORY" in spec["info"]["description"]
    assert {
        "/weights",
        "/models",
        "/livez",
        "/readyz",
        "/metrics",
        "/v2/models/{name}/infer",
    } <= set(spec["paths"])


def test_large_batch_runs_off_the_event_loop_and_still_matches(
    demo: Client, bundles: Bundles
) -> None:
    trained = bundles.demo
    rows = trained.instances(slice(0, 250))  # above INLINE_ROWS: the first goes to the graph thread
    r = demo.post("/predict", json={"instances": rows})
    assert r.status_code == 200, r.text
    got = np.array([[it["prediction"]["probabilities"]["1"]] for it in r.json()["predictions"]])
    want = trained.est.predict_proba(trained.X.iloc[:250])[:, [1]]
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)


@pytest.mark.parametrize(
    ("n", "in_flight", "per_row", "inline"),
    [
        (1000, 1, 1.2e-6, True),  # the demo graph: 1.2 ms for 1000 rows
        (1000, 2, 1.2e-6, False),  # another request is being served: keep the loop free
        (1000, 1, None, False),  # the graph's time is not known yet
        (1000, 1, 50e-6, False),  # a kNN expert over 16,512 rows: 50 ms
        (1666, 1, 1.2e-6, True),
        (1667, 1, 1.2e-6, False),  # past ALONE_SECONDS
    ],
)
def test_which_large_requests_run_on_the_event_loop(
    n: int, in_flight: int, per_row: float | None, inline: bool
) -> None:
    assert runs_alone_inline(n, in_flight, per_row) is inline


def test_a_lone_large_request_learns_its_graph_time_then_runs_inline_with_the_same_answer(
    demo: Client, bundles: Bundles
) -> None:
    rows = bundles.demo.instances(slice(0, 250))
    model = demo.service.runtime.require()
    model.cache.pop(ROW_SECONDS, None)
    r = demo.post("/predict", json={"instances": rows})
    assert r.status_code == 200, r.text
    per_row = model.cache[ROW_SECONDS]  # learned on the graph thread
    assert per_row > 0
    # Whether 250 rows are short enough to run inline depends on this machine's speed:
    # say they are, and the next lone request runs on the event loop, learning again.
    fast = ALONE_SECONDS / 250 / 2
    model.cache[ROW_SECONDS] = fast
    assert runs_alone_inline(250, 1, fast)
    again = demo.post("/predict", json={"instances": rows})
    assert again.status_code == 200, again.text
    assert again.json()["predictions"] == r.json()["predictions"]
    assert model.cache[ROW_SECONDS] != fast
