"""Open Inference Protocol v2 routes, through both transports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness, UvicornHarness, harness

Client = AsgiHarness | UvicornHarness


@pytest.fixture(scope="module", params=["asgi", "uvicorn"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def demo(kind: str, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    with harness(kind, make_settings(bundles.store, tmp_path_factory.mktemp("o"), "demo")) as h:
        yield h


@pytest.fixture(scope="module")
def credit(
    kind: str, bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Client]:
    with harness(kind, make_settings(bundles.store, tmp_path_factory.mktemp("o"), "credit")) as h:
        yield h


def tensors(frame: Any, numeric: set[str], nested: bool = False) -> list[dict[str, Any]]:
    out = []
    for name in frame.columns:
        values = [
            None if v is None or (isinstance(v, float) and np.isnan(v)) else v
            for v in frame[name].tolist()
        ]
        out.append(
            {
                "name": name,
                "datatype": "FP64" if name in numeric else "BYTES",
                "shape": [len(values), 1] if nested else [len(values)],
                "data": [[v] for v in values] if nested else values,
            }
        )
    return out


def by_name(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in body["outputs"]}


def test_health_and_metadata(demo: Client, bundles: Bundles) -> None:
    assert demo.get("/v2/health/live").json() == {"live": True}
    assert demo.get("/v2/health/ready").json() == {"ready": True}
    assert demo.get("/v2/models/demo/ready").json() == {"name": "demo", "ready": True}
    assert demo.get("/v2").json()["name"] == "iabma"
    meta = demo.get("/v2/models/demo").json()
    assert meta["name"] == "demo" and meta["versions"] == [bundles.demo.version]
    assert meta["inputs"] == [
        {"name": "x1", "datatype": "FP32", "shape": [-1, 1]},
        {"name": "x2", "datatype": "FP32", "shape": [-1, 1]},
    ]
    assert [o["name"] for o in meta["outputs"]] == [
        "prediction",
        "probabilities",
        "weights",
        "uncertainty",
    ]
    assert meta["parameters"]["experts"] == bundles.demo.est.expert_names_


def test_infer_classification_equals_the_estimator(demo: Client, bundles: Bundles) -> None:
    est, X = bundles.demo.est, bundles.demo.X.iloc[:20]
    r = demo.post("/v2/models/demo/infer", json={"id": "req-7", "inputs": tensors(X, {"x1", "x2"})})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["model_name"], body["model_version"], body["id"]) == (
        "demo",
        bundles.demo.version,
        "req-7",
    )
    assert body["parameters"]["experts"] == est.expert_names_
    assert body["parameters"]["request_id"] == r.headers["x-request-id"]
    out = by_name(body)
    assert out["prediction"]["datatype"] == "INT64" and out["prediction"]["shape"] == [20]
    assert out["prediction"]["data"] == est.predict(X).tolist()
    proba = np.array(out["probabilities"]["data"]).reshape(out["probabilities"]["shape"])
    np.testing.assert_allclose(proba, est.predict_proba(X), atol=1e-5, rtol=0)
    assert out["weights"]["shape"] == [20, 5]
    assert out["weights"]["parameters"]["experts"] == est.expert_names_
    w = np.array(out["weights"]["data"]).reshape(20, 5)
    np.testing.assert_allclose(w, est.weights(X), atol=1e-5, rtol=0)
    assert out["uncertainty"]["shape"] == [20, 4]
    assert out["uncertainty"]["parameters"]["components"] == [
        "total",
        "aleatoric",
        "epistemic",
        "selection",
    ]
    unc = np.array(out["uncertainty"]["data"]).reshape(20, 4)
    np.testing.assert_allclose(unc[:, 0], est.mixture(X).total, atol=1e-5)
    record = demo.get("/weights", params={"request_id": r.headers["x-request-id"]}).json()
    assert record["route"] == "oip_infer" and record["n_instances"] == 20


def test_infer_regression_with_bytes_and_requested_outputs(
    credit: Client, bundles: Bundles
) -> None:
    trained = bundles.credit
    X = trained.X.iloc[:8].copy()
    X.loc[1, "job"] = None
    numeric = {f.name for f in trained.est.schema_.features if f.dtype == "float"}
    request = {
        "inputs": tensors(X, numeric, nested=True),
        "outputs": [{"name": "prediction"}, {"name": "std"}, {"name": "interval"}],
    }
    r = credit.post("/v2/models/credit/infer", json=request)
    assert r.status_code == 200, r.text
    out = by_name(r.json())
    assert list(out) == ["prediction", "std", "interval"]
    dist = trained.est.distribution(X)
    scale = trained.est.y_scale_
    np.testing.assert_allclose(
        np.array(out["prediction"]["data"]) / scale, dist.mean / scale, atol=1e-5
    )
    np.testing.assert_allclose(np.array(out["std"]["data"]) / scale, dist.std / scale, atol=1e-5)
    iv = np.array(out["interval"]["data"]).reshape(8, 2)
    np.testing.assert_allclose(iv[:, 1] / scale, dist.upper / scale, atol=1e-5)
    assert out["interval"]["parameters"] == {"level": 0.9}


def test_string_labels_are_bytes(
    bundles: Bundles, tmp_path_factory: pytest.TempPathFactory
) -> None:
    trained = bundles.creditcls
    X = trained.X.iloc[:5]
    numeric = {f.name for f in trained.est.schema_.features if f.dtype == "float"}
    settings = make_settings(bundles.store, tmp_path_factory.mktemp("o"), "creditcls")
    with AsgiHarness(settings) as app:
        r = app.post("/v2/models/creditcls/infer", json={"inputs": tensors(X, numeric)})
    out = by_name(r.json())
    assert out["prediction"]["datatype"] == "BYTES"
    assert out["prediction"]["data"] == trained.est.predict(X).tolist()
    assert out["probabilities"]["parameters"]["classes"] == ["bad", "good"]


def _x(data: list[Any], name: str = "x1", dtype: str = "FP32", shape: Any = None) -> dict[str, Any]:
    return {
        "name": name,
        "datatype": dtype,
        "shape": shape if shape is not None else [len(data)],
        "data": data,
    }


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"inputs": [_x([1.0])]}, "inputs: missing tensors for features x2"),
        (
            {"inputs": [_x([1.0]), _x([1.0], "x2"), _x([1.0], "x3")]},
            "inputs[2].name: unknown feature 'x3'",
        ),
        (
            {"inputs": [_x([1.0]), _x([1.0], "X2")]},
            "inputs[1].name: unknown feature 'X2'; did you mean \"x2\"?",
        ),
        ({"inputs": [_x([1.0]), _x([1.0], "x1")]}, "inputs[1].name: feature 'x1' is given twice"),
        (
            {"inputs": [_x(["a"], dtype="BYTES"), _x([1.0], "x2")]},
            "inputs[0].datatype: feature 'x1' needs a numeric datatype",
        ),
        # Was a 500 (schemathesis): an object where the datatype goes.
        (
            {"inputs": [_x([1.0], dtype={"a": 1}), _x([1.0], "x2")]},  # type: ignore[arg-type]
            "inputs[0].datatype: feature 'x1' needs a numeric datatype such as FP32, got an object",
        ),
        (
            {"inputs": [_x([1.0, 2.0]), _x([1.0], "x2")]},
            "inputs[1].shape: has 1 rows but the first tensor has 2",
        ),
        (
            {"inputs": [_x([1.0], shape=[1, 2]), _x([1.0], "x2")]},
            "inputs[0].shape: expected [n] or [n, 1], got [1, 2]",
        ),
        (
            {"inputs": [_x([1.0], shape=[-1]), _x([1.0], "x2")]},
            "inputs[0].shape: expected [n] or [n, 1], got [-1]",
        ),
        (
            {"inputs": [_x([1.0, 2.0], shape=[3]), _x([1.0, 2, 3], "x2")]},
            "inputs[0].data: holds 2 values but the shape says 3",
        ),
        (
            {"inputs": [_x(["a"]), _x([1.0], "x2")]},
            'inputs[x1].data[0]: expected a number or null, got "a"',
        ),
        ({"inputs": [_x([]), _x([], "x2")]}, "inputs: empty batch"),
        ({"inputs": []}, "inputs: expected a non-empty array"),
        # Was a 500 (schemathesis): a list starting with an object, then a null.
        ({"inputs": [_x([1.0]), None]}, "inputs[1]: expected a tensor object with a name"),
        (
            {"inputs": [_x([1.0]), _x([1.0], "x2")], "outputs": [{"name": "std"}]},
            "outputs[0].name: unknown output 'std'",
        ),
        ({"inputs": [_x([1.0]), _x([1.0], "x2")], "id": 5}, "id: expected a string, got 5"),
        ({"inputs": [_x([1.0]), _x([1.0], "x2")], "extra": 1}, "extra: unknown field"),
        ([1, 2], "body: expected an inference request object"),
        # JSON data that its declared datatype cannot hold was taken as sent.
        (
            {"inputs": [_x([1.0, 2.0]), _x([1, 300], "x2", "INT8")]},
            "inputs[1].data[1]: tensor 'x2': 300 is outside INT8's range -128 to 127",
        ),
        (
            {"inputs": [_x([-1], dtype="UINT32"), _x([1.0], "x2")]},
            "inputs[0].data[0]: tensor 'x1': -1 is outside UINT32's range 0 to 4294967295",
        ),
        (
            {"inputs": [_x([1.5], dtype="INT64"), _x([1.0], "x2")]},
            "inputs[0].data[0]: tensor 'x1': 1.5 is not a whole number, as INT64 is",
        ),
        (
            {"inputs": [_x([70000.0], dtype="FP16"), _x([1.0], "x2")]},
            "inputs[0].data[0]: tensor 'x1': 70000.0 is outside FP16's range",
        ),
        # Beyond float32 on either side, as JSON numbers or integers.
        (
            {"inputs": [_x([1.0, -1e39], dtype="FP64"), _x([1.0, 2.0], "x2")]},
            "inputs[x1].data[1]: -1e+39 is outside the float32 range",
        ),
        (
            {"inputs": [_x([1.0]), _x([-(10**39)], "x2", "FP64")]},
            "inputs[x2].data[0]: -1e+39 is outside the float32 range",  # orjson reads a float
        ),
    ],
)
def test_infer_errors_are_400(demo: Client, body: Any, says: str) -> None:
    r = demo.post("/v2/models/demo/infer", json=body)
    assert r.status_code == 400, r.text
    assert set(r.json()) == {"error"}
    assert r.json()["error"].startswith(says)


def test_json_data_within_its_datatype_is_taken(demo: Client) -> None:
    body = {"inputs": [_x([2.0, -1], dtype="INT16"), _x([-0.5, 1], "x2", "FP16")]}
    r = demo.post("/v2/models/demo/infer", json=body)
    assert r.status_code == 200, r.text


def test_a_long_integer_within_float32_is_served_and_audited_as_read(
    credit: Client, bundles: Bundles
) -> None:
    # With a space before a colon, Python's parser reads the body and keeps 10**20 an int;
    # orjson, which writes the audit record, takes integers of 64 bits at most.
    trained = bundles.credit
    numeric = {f.name for f in trained.est.schema_.features if f.dtype == "float"}
    inputs = tensors(trained.X.iloc[:2], numeric)
    (duration,) = [t for t in inputs if t["name"] == "duration"]
    duration["data"] = [10**20, -(10**20)]
    raw = json.dumps({"inputs": inputs}, separators=(",", " : ")).encode()
    rid = f"long-{credit.kind}"
    headers = {"content-type": "application/json", "x-request-id": rid}
    r = credit.post("/v2/models/credit/infer", content=raw, headers=headers)
    assert r.status_code == 200, r.text
    record = credit.get("/weights", params={"request_id": rid}).json()
    assert record["request_id"] == rid and record["n_instances"] == 2


def test_lone_surrogate_is_a_400(demo: Client) -> None:
    # Was a reset connection (schemathesis): the value was echoed in the error message, and
    # "\ud800" alone cannot be encoded as UTF-8.
    raw = b'{"inputs": [{"name": "x1", "datatype": "FP32", "shape": [1], "data": ["\\ud800"]}]}'
    json_type = {"content-type": "application/json"}
    r = demo.post("/v2/models/demo/infer", content=raw, headers=json_type)
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("body: a string holds an unpaired surrogate")


def test_oip_other_errors(demo: Client) -> None:
    r = demo.post("/v2/models/other/infer", json={"inputs": []})
    assert r.status_code == 404
    assert r.json() == {
        "error": "name: model 'other' is not served here; this server serves 'demo'"
    }
    assert demo.get("/v2/models/other").status_code == 404
    assert demo.get("/v2/models/other/ready").status_code == 404
    r = demo.post(
        "/v2/models/demo/infer", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"].startswith("body: malformed JSON")
    r = demo.post("/v2/models/demo/infer", content=b"{}", headers={"content-type": "text/csv"})
    assert r.status_code == 400 and "Content-Type" in r.json()["error"]
    big = {"inputs": [_x([1.0] * 2000), _x([1.0] * 2000, "x2")]}
    r = demo.post("/v2/models/demo/infer", json=big)
    assert r.status_code == 413 and "IABMA_MAX_BATCH_ROWS" in r.json()["error"]
    r = demo.get("/v2/nothing")
    assert r.status_code == 404 and set(r.json()) == {"error"}
