"""A bundle whose experts give their own per-row variance, served: the answers carry each
row's expert sds, the trail keeps them, and the realised NLL is scored with them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.bundle.loader import open_bundle
from app.bundle.predictor import BundlePredictor
from tests.support.bundles import Trained, check_contract, make_settings
from tests.support.harness import AsgiHarness
from tests.support.variance_bundle import per_row_bundle

TOL = 1e-6


@pytest.fixture(scope="module")
def spread(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Trained]:
    root = tmp_path_factory.mktemp("spread")
    return root / "store", per_row_bundle(data_dir, root)


def test_answers_carry_each_rows_own_expert_sds(spread: Any, tmp_path: Path) -> None:
    store, trained = spread
    rows = trained.instances(slice(0, 6))
    pred = BundlePredictor(open_bundle(store / "spread" / trained.version)).predict(
        trained.est.columns(trained.X.iloc[:6])
    )
    assert pred.expert_sds is not None
    with AsgiHarness(make_settings(store, tmp_path, "spread")) as app:
        body = app.post("/predict", json={"instances": rows}).json()
        items = body["predictions"]
        got = np.array([[e["std"] for e in item["experts"].values()] for item in items])
        np.testing.assert_allclose(got, pred.expert_sds, rtol=TOL)
        col = app.post("/predict", json={"instances": rows, "format": "columnar"}).json()
        np.testing.assert_allclose(col["predictions"]["experts"]["std"], pred.expert_sds, rtol=TOL)
        check_contract(app, "PredictColumnarAnswer", col)
    # Rows differ: the variance experts' sds vary, the plain one's is its constant.
    assert np.ptp(got[:, 0]) > 0 and np.ptp(got[:, 1]) > 0 and np.ptp(got[:, 2]) == 0


def test_realised_nll_uses_the_rows_own_sds(spread: Any, tmp_path: Path) -> None:
    store, trained = spread
    rng = np.random.default_rng(5)
    sent = []
    with AsgiHarness(make_settings(store, tmp_path, "spread")) as app:
        start = 0
        for k in range(8):
            n = 1 + k % 3
            rid = f"spread-{k}"
            rows = trained.instances(slice(start, start + n))
            start += n
            body = app.post("/predict", json={"instances": rows}, headers={"X-Request-ID": rid})
            for i, item in enumerate(body.json()["predictions"]):
                mean, std = item["prediction"]["mean"], item["prediction"]["std"]
                sent.append((rid, i, float(mean + std * rng.normal()), item))
        outcomes = [{"request_id": rid, "row": i, "outcome": y} for rid, i, y, _ in sent]
        assert app.post("/feedback", json={"outcomes": outcomes}).json()["accepted"] == len(sent)
        report = app.get("/performance").json()
        temperature = app.get("/models").json()["mixture"]["temperature"]
        record = app.get("/weights", params={"request_id": "spread-1"}).json()
    nll = np.array([implied_nll(item, y, temperature) for _, _, y, item in sent]).mean(axis=0)
    assert report["rows"] == len(sent)
    assert report["mixture"]["nll"] == pytest.approx(nll[0], abs=TOL)
    for j, name in enumerate(sent[0][3]["experts"]):
        assert report["experts"][name]["nll"] == pytest.approx(nll[1 + j], abs=TOL)
    # The trail's record gives back each row's sds as served.
    served = [item for rid, _, _, item in sent if rid == "spread-1"]
    for kept, item in zip(record["predictions"], served, strict=True):
        for name, e in item["experts"].items():
            assert kept["experts"][name]["std"] == pytest.approx(e["std"], rel=TOL)


def implied_nll(item: dict[str, Any], y: float, temperature: float) -> np.ndarray:
    """The NLL a regression answer implies for ``y``: the mixture's, then each expert's."""
    experts = list(item["experts"].values())
    w = np.array(list(item["weights"].values()))
    mu = np.array([e["mean"] for e in experts])
    s = np.array([e["std"] for e in experts])

    def normal(scale: np.ndarray) -> np.ndarray:
        return np.exp(-0.5 * ((y - mu) / scale) ** 2) / (scale * math.sqrt(2 * math.pi))

    return np.array([-math.log(float(w @ normal(temperature * s))), *(-np.log(normal(s)))])
