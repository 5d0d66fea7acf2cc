"""Numbers at the precision they carry (app.bundle.digits): a classifier's numbers are the
shortest text of their float32, regression's in target units nine significant digits, and
the answers' promises (sums to 1, the exact split) still hold in every encoding."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from app.bundle.digits import SIGNIFICANT, float32_values, significant
from app.codecs.native import instance_field
from tests.support.bundles import Bundles, make_settings
from tests.support.harness import AsgiHarness

NUMBER = re.compile(rb"(?<=[:\[,])-?\d[\d.eE+-]*")


def _digits(text: bytes) -> int:
    """Significant digits of a number's text."""
    mantissa = text.lstrip(b"-").lower().split(b"e")[0].replace(b".", b"")
    return len(mantissa.strip(b"0")) or 1


@pytest.mark.parametrize("size", [20_000, 40])  # numpy's path, and Python's for a few
def test_significant_keeps_nine_digits_and_their_value(size: int) -> None:
    rng = np.random.default_rng(size)
    x = rng.standard_normal(size) * 10.0 ** rng.integers(-30, 30, size)
    got = significant(x)
    assert np.all(np.abs(got - x) <= 5.1e-9 * np.abs(x))
    texts = [repr(v).encode() for v in got.tolist()]
    assert max(_digits(t) for t in texts) <= SIGNIFICANT
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
    np.testing.assert_array_equal(significant(special), special)
    np.testing.assert_array_equal(significant(np.tile(special, 20)), np.tile(special, 20))


def test_float32_values_are_the_shortest_text_of_the_float32() -> None:
    rng = np.random.default_rng(1)
    x = rng.random((50, 4)) ** 8
    got = np.array(float32_values(x))
    assert got.shape == x.shape
    np.testing.assert_array_equal(got.astype(np.float32), x.astype(np.float32))
    for v, a in zip(got.ravel().tolist(), x.astype(np.float32).ravel().tolist(), strict=True):
        shortest = np.format_float_scientific(np.float32(a), unique=True)
        assert _digits(repr(v).encode()) == _digits(shortest.encode())


@pytest.fixture(scope="module")
def served(bundles: Bundles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiHarness]:
    settings = make_settings(bundles.store, tmp_path_factory.mktemp("audit"), "demo")
    with AsgiHarness(settings) as h:
        yield h


def _graph(h: AsgiHarness, rows: list[dict[str, Any]]) -> Any:
    model = h.service.runtime.require()
    return model.predictor.predict(model.features.columns(rows, instance_field))


def test_a_classifier_answer_writes_each_float32_shortest(
    served: AsgiHarness, bundles: Bundles
) -> None:
    rows = bundles.demo.instances(slice(0, 200))
    r = served.post("/predict", json={"instances": rows})
    assert r.status_code == 200, r.text
    pred = _graph(served, rows)
    items = r.json()["predictions"]
    experts = list(served.service.runtime.require().experts)
    weights = np.array([[it["weights"][e] for e in experts] for it in items])
    proba = np.array([list(it["prediction"]["probabilities"].values()) for it in items])
    u = np.array([list(it["uncertainty"].values()) for it in items])
    for got, want in ((weights, pred.weights), (proba, pred.proba), (u, pred.uncertainty)):
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    # Every number has at most the digits of its float32's shortest text.
    for token in NUMBER.findall(r.content.split(b'"predictions":', 1)[1]):
        shortest = np.format_float_scientific(np.float32(float(token)), unique=True)
        assert _digits(token) <= _digits(shortest.encode()), token
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-6, rtol=0)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-6, rtol=0)
    np.testing.assert_allclose(u[:, 0], u[:, 1] + u[:, 2], atol=1e-6, rtol=0)
    assert [it["prediction"]["label"] for it in items] == pred.label_index.tolist()


def test_every_encoding_carries_the_same_numbers(served: AsgiHarness, bundles: Bundles) -> None:
    rows = bundles.demo.instances(slice(0, 50))
    native = served.post("/predict", json={"instances": rows}).json()["predictions"]
    columnar = served.post("/predict", json={"instances": rows, "format": "columnar"}).json()
    oip = served.post(
        "/v2/models/demo/infer",
        json={
            "inputs": [
                {"name": k, "datatype": "FP32", "shape": [50], "data": [r[k] for r in rows]}
                for k in rows[0]
            ]
        },
    ).json()
    weights = np.array([list(it["weights"].values()) for it in native])
    np.testing.assert_array_equal(np.array(columnar["predictions"]["weights"]), weights)
    by_name = {t["name"]: t for t in oip["outputs"]}
    np.testing.assert_array_equal(np.array(by_name["weights"]["data"]).reshape(50, -1), weights)


def test_regression_writes_nine_significant_digits(bundles: Bundles, tmp_path: Any) -> None:
    settings = make_settings(bundles.store, tmp_path, "credit")
    with AsgiHarness(settings) as h:
        r = h.post("/predict", json={"instances": bundles.credit.instances(slice(0, 40))})
    assert r.status_code == 200, r.text
    tokens = NUMBER.findall(r.content.split(b'"predictions":', 1)[1])
    assert tokens and max(_digits(t) for t in tokens) <= SIGNIFICANT
    u = np.array([list(it["uncertainty"].values()) for it in r.json()["predictions"]])
    np.testing.assert_allclose(u[:, 0], u[:, 1] + u[:, 2], rtol=1e-8, atol=0)
