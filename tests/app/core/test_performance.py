"""GET /performance: realised scores equal what the /predict answers imply for the
outcomes (recomputed here from the answers, to 1e-6), filters, and the summing itself."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.contract.performance import Performance
from app.contract.reader import read
from app.core.performance import Summary
from tests.support.bundles import Bundles, check_contract, make_settings
from tests.support.harness import AsgiHarness

TOL = 1e-6
Z90 = 1.6448536269514722


@pytest.fixture
def served(bundles: Bundles, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    name = request.param
    with AsgiHarness(make_settings(bundles.store, tmp_path, name)) as app:
        yield app, getattr(bundles, name)


def answers_with_outcomes(app: AsgiHarness, trained: Any, rng: np.random.Generator) -> list[Any]:
    """Predictions of 1-4 rows each; an outcome posted for most of their rows."""
    out = []
    start = 0
    for k in range(12):
        n = 1 + k % 4
        rows = trained.instances(slice(start, start + n))
        start += n
        rid = f"perf-{k}"
        body = app.post("/predict", json={"instances": rows}, headers={"X-Request-ID": rid}).json()
        for i, item in enumerate(body["predictions"]):
            if rng.random() < 0.2:
                continue  # no outcome for this row
            if "label" in item["prediction"]:
                y: Any = rng.choice(list(item["prediction"]["probabilities"]))
                y = int(y) if y.isdigit() else str(y)
            else:
                mean, std = item["prediction"]["mean"], item["prediction"]["std"]
                y = float(mean + std * rng.normal())
            out.append((rid, i, y, item))
    sent = [{"request_id": rid, "row": i, "outcome": y} for rid, i, y, _ in out]
    assert app.post("/feedback", json={"outcomes": sent}).json()["accepted"] == len(out)
    return out


def implied(item: dict[str, Any], y: Any, temperature: float) -> dict[str, np.ndarray]:
    """The scores a /predict answer implies for outcome ``y``: mixture first, then experts."""
    experts = list(item["experts"].values())
    pred = item["prediction"]
    if "label" in pred:
        key = str(y)
        probs = [pred["probabilities"], *(e["probabilities"] for e in experts)]
        labels = [pred["label"], *(e["label"] for e in experts)]
        nll = [-math.log(p[key]) for p in probs]
        hit = [float(str(lab) == key) for lab in labels]
        brier = [sum((v - (c == key)) ** 2 for c, v in p.items()) for p in probs]
        return {"nll": np.array(nll), "accuracy": np.array(hit), "brier": np.array(brier)}
    w = np.array(list(item["weights"].values()))
    mu = np.array([e["mean"] for e in experts])
    s = np.array([e["std"] for e in experts])

    def normal(scale: np.ndarray) -> np.ndarray:
        return np.exp(-0.5 * ((y - mu) / scale) ** 2) / (scale * math.sqrt(2 * math.pi))

    mixture = -math.log(float(w @ normal(temperature * s)))
    interval = pred["interval"]
    covered = [interval["lower"] <= y <= interval["upper"], *(abs(y - mu) <= Z90 * s)]
    return {
        "nll": np.array([mixture, *(-np.log(normal(s)))]),
        "rmse": np.array([(y - pred["mean"]) ** 2, *((y - mu) ** 2)]),
        "coverage90": np.array(covered, dtype=float),
    }


@pytest.mark.parametrize("served", ["demo", "credit"], indirect=True)
def test_realised_scores_are_what_the_answers_imply(served: Any) -> None:
    app, trained = served
    sent = answers_with_outcomes(app, trained, np.random.default_rng(7))
    r = app.get("/performance")
    assert r.status_code == 200, r.text
    check_contract(app, "Performance", r.json())
    body = r.json()
    report = read(Performance, body)
    assert report.rows == len(sent) and report.task == trained.est._task
    temperature = app.get("/models").json()["mixture"]["temperature"]
    scores = [implied(item, y, temperature) for _, _, y, item in sent]
    experts = list(sent[0][3]["experts"])
    for metric in scores[0]:
        per_row = np.array([s[metric] for s in scores])  # (rows, 1 + m)
        mean = per_row.mean(axis=0)
        if metric == "rmse":
            mean = np.sqrt(mean)
        # The answers carry 9 significant digits (app.bundle.digits), the stored scores
        # all of them: a squared error in the thousands moves by parts in 1e9.
        assert body["mixture"][metric] == pytest.approx(mean[0], rel=1e-8, abs=TOL), metric
        for j, name in enumerate(experts):
            got = body["experts"][name][metric]
            assert got == pytest.approx(mean[1 + j], rel=1e-8, abs=TOL), name
    nll = np.array([s["nll"] for s in scores]).mean(axis=0)
    best = experts[int(np.argmin(nll[1:]))]
    assert body["best_expert"] == best
    assert body["regret"] == pytest.approx(nll[0] - nll[1 + experts.index(best)], abs=TOL)
    for name in experts:
        bins = body["calibration"][name]
        assert sum(b["rows"] for b in bins) == len(sent)
        j = experts.index(name)
        weights = np.array([item["weights"][name] for _, _, _, item in sent])
        own = np.array([s["nll"][1 + j] for s in scores])
        for b in bins:
            inside = (weights >= b["low"]) & ((weights < b["high"]) | (b["high"] == 1.0))
            assert b["rows"] == int(inside.sum())
            if b["rows"]:
                assert b["nll"] == pytest.approx(own[inside].mean(), abs=TOL)
    assert sum(b["mixture"]["rows"] for b in body["buckets"]) == len(sent)
    filled = [b["mixture"] for b in body["buckets"] if b["mixture"]["rows"]]
    weighted = sum(b["nll"] * b["rows"] for b in filled)
    assert weighted / len(sent) == pytest.approx(nll[0], abs=TOL)


@pytest.mark.parametrize("served", ["demo"], indirect=True)
def test_filters_by_the_time_served_and_the_version(served: Any) -> None:
    app, trained = served
    sent = answers_with_outcomes(app, trained, np.random.default_rng(3))
    version = app.get("/models").json()["version"]
    record = app.get("/weights", params={"request_id": sent[-1][0]}).json()
    last_time = record["time"]
    assert app.get("/performance", params={"version": version}).json()["rows"] == len(sent)
    assert app.get("/performance", params={"version": "other"}).json()["rows"] == 0
    later = app.get("/performance", params={"since": last_time}).json()
    assert later["rows"] == sum(1 for rid, *_ in sent if rid == sent[-1][0])
    assert later["filter"] == {
        "since": last_time, "until": None, "version": None, "exclude_poster": [], "buckets": 24,
    }  # fmt: skip
    empty = app.get("/performance", params={"until": "2000-01-01T00:00:00"}).json()
    assert empty["rows"] == 0 and empty["mixture"]["nll"] is None and empty["buckets"] == []
    assert empty["best_expert"] is None and empty["regret"] is None
    for params, field in (
        ({"since": "yesterday"}, "since"),
        ({"since": "2026-01-02", "until": "2026-01-01"}, "until"),
        ({"version": "../x"}, "version"),
        ({"expert": "poly3"}, "expert"),
        ([("since", "2026-01-01"), ("since", "2026-01-02")], "since"),
    ):
        r = app.get("/performance", params=params)
        assert r.status_code == 422, (params, r.text)
        assert r.json()["error"]["field"] == field


def test_experts_of_several_versions_are_scored_on_their_own_rows() -> None:
    """Version 1 had experts a and b, version 2 also c: c is scored on its rows only, and
    the best expert in hindsight is one every row had."""

    def row(t: int, experts: list[str], w: list[float], nll: list[float]) -> tuple[Any, ...]:
        scores = np.zeros((len(nll), 3))
        scores[:, 0] = nll
        return (t, json.dumps(experts), np.array(w).tobytes(), scores.tobytes())

    rows = [
        row(10, ["a", "b"], [0.9, 0.1], [0.2, 0.1, 0.9]),
        row(20, ["a", "b"], [0.3, 0.7], [0.4, 0.5, 0.3]),
        row(30, ["a", "b", "c"], [0.2, 0.2, 0.6], [0.3, 0.6, 0.8, 0.01]),
    ]
    body = Summary("classification", rows, None, None).json()
    assert body["rows"] == 3
    assert body["mixture"]["nll"] == pytest.approx(0.3)
    assert body["experts"]["c"]["rows"] == 1 and body["experts"]["c"]["nll"] == pytest.approx(0.01)
    assert body["experts"]["a"]["nll"] == pytest.approx((0.1 + 0.5 + 0.6) / 3)
    assert body["best_expert"] == "a" and body["regret"] == pytest.approx(0.3 - 0.4)
    top = body["calibration"]["a"][9]
    assert (top["rows"], top["nll"], top["others_nll"], top["best_share"]) == (1, 0.1, 0.9, 1.0)
    c = body["calibration"]["c"][6]
    assert c["rows"] == 1 and c["others_nll"] == pytest.approx(0.7) and c["best_share"] == 1.0
    assert [b["mixture"]["rows"] for b in body["buckets"]] == [1, 1, 1]
