"""The team's trial (issue: "registered base models"): three models trained on older rows
by a script that does not import the product, registered pre-fitted, combined on recent
rows, exported and served. Served expert predictions must be the team's own, and the
bundle must beat the best of them and their linear blend, or ship the pool and say so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from sklearn.linear_model import LinearRegression, LogisticRegression

from app.bundle.loader import read_manifest
from tests.support.bundles import instances, make_settings
from tests.support.harness import AsgiHarness
from tests.support.team_models import Team, classification_team, regression_team
from training.estimator import IABMAClassifier, IABMARegressor
from training.evaluate import row_nll
from training.experts.spec import ExpertRegistry
from training.experts.tolerance import n_terms, parity_tolerance
from training.export.bundle import export_bundle

NAMES = ("pipeline", "xgb", "forest")


def registry(team: Team) -> ExpertRegistry:
    """Object, object, ONNX file: as the team hands them over."""
    reg = ExpertRegistry()
    reg.register("pipeline", team.pipeline, prefit=True)
    classes = ["bad", "good"] if team.task == "classification" else None
    reg.register("xgb", team.xgb, prefit=True, classes=classes)
    reg.register("forest", str(team.forest_file), features=team.forest_features)
    return reg


def served(store: Path, tmp: Path, name: str, team: Team) -> list[dict[str, Any]]:
    rows = instances(team.split.X_test.head(60))
    with AsgiHarness(make_settings(store, tmp / "audit", name=name)) as app:
        r = app.post("/predict", json={"instances": rows})
    assert r.status_code == 200, r.text
    return list(r.json()["predictions"])


def blend_nll(team: Team, est: Any) -> float:
    """A linear blend of the three fitted on the same recent rows: the plain rival."""
    s = team.split
    recent, test = team.own_predictions(s.X_recent), team.own_predictions(s.X_test)
    if team.task == "regression":
        A = np.column_stack([recent[n] for n in NAMES])
        B = np.column_stack([test[n] for n in NAMES])
        lin = LinearRegression().fit(A, s.y_recent)
        sd = float(np.sqrt(np.mean((lin.predict(A) - s.y_recent) ** 2)))
        z = (s.y_test.to_numpy() - lin.predict(B)) / sd
        return float(np.mean(0.5 * z**2 + np.log(sd) + 0.5 * np.log(2 * np.pi)))

    def logits(preds: dict[str, np.ndarray]) -> np.ndarray:
        p = np.clip(np.column_stack([preds[n][:, 1] for n in NAMES]), 1e-6, 1 - 1e-6)
        return np.log(p / (1 - p))

    lr = LogisticRegression().fit(logits(recent), s.y_recent)
    proba = lr.predict_proba(logits(test))
    y = np.searchsorted(lr.classes_, s.y_test.to_numpy())
    return float(-np.mean(np.log(proba[np.arange(len(y)), y])))


def check_trial(team: Team, tmp: Path) -> None:
    s = team.split
    kind = IABMARegressor if team.task == "regression" else IABMAClassifier
    est = kind(registry(team), random_state=0).fit(s.X_recent, s.y_recent)
    assert est.experts_.likelihood_source_ == "prefit"
    assert est.evidence_.n == len(s.X_recent)  # every recent row, none held back
    path = export_bundle(est, tmp / "store", "team", s.X_test)
    manifest = read_manifest(path)
    assert [e.prefit for e in manifest.experts] == [True] * 3
    assert manifest.training["likelihood_source"] == "prefit"
    assert manifest.training["cv"] is None
    assert manifest.experts[2].source is not None
    assert manifest.experts[2].source.format == "onnx"

    items = served(tmp / "store", tmp, "team", team)
    own = team.own_predictions(s.X_test.head(60))
    for e in manifest.experts:
        terms = n_terms(onnx.load(str(path / e.file)))
        if team.task == "regression":
            got = np.array([it["experts"][e.name]["mean"] for it in items])
        else:
            got = np.array(
                [
                    [it["experts"][e.name]["probabilities"][c] for c in ("bad", "good")]
                    for it in items
                ]
            )
        want = own[e.name]
        assert np.abs(got - want).max() <= parity_tolerance(want, terms), e.name

    y_enc = est.encode_target(s.y_test)
    outputs = est.expert_outputs(s.X_test)
    n, m = outputs.shape[:2]
    ours = row_nll(est, outputs, est.weights(s.X_test), y_enc, est.mixture_temperature_).mean()
    singles = [row_nll(est, outputs, np.eye(m)[np.full(n, j)], y_enc).mean() for j in range(m)]
    rival = min(min(singles), blend_nll(team, est))
    pool_shipped = manifest.gate.params.get("selected", {}).get("gate") == "stacking"
    assert ours <= rival or pool_shipped, (ours, singles, rival)


@pytest.mark.slow
def test_a_team_regression_trial(tmp_path: Path) -> None:
    check_trial(regression_team(tmp_path), tmp_path)


@pytest.mark.slow
def test_a_team_classification_trial(tmp_path: Path) -> None:
    check_trial(classification_team(tmp_path), tmp_path)
