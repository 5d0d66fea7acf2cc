"""``GateRefit``'s pieces, each checked against a computation of its own: the held-out
share's bounds, the served graph's outputs run in chunks, the targets as encoded, the
NLL of both gates (regression in the target's units), the comparison and its verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import Ridge

from tests.training.refit.conftest import World
from training.datasets import load_sklearn, simulate
from training.errors import NotFittedError, ParameterError
from training.estimator import IABMARegressor
from training.evaluate import BOOTSTRAP_RESAMPLES
from training.experts.spec import Expert
from training.export.bundle import export_bundle
from training.refit import gate as gate_module
from training.refit.data import RefitRefused
from training.refit.gate import GateRefit, check_holdout, take


@pytest.fixture(scope="session")
def regression(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame, np.ndarray]:
    """A diabetes bundle (two experts), and 240 later rows with their outcomes."""
    data = load_sklearn("diabetes")
    X, y = data.X, data.y.to_numpy()
    experts = [
        Expert("ridge", Ridge()),
        Expert("forest", RandomForestRegressor(n_estimators=10, max_depth=4, random_state=0)),
    ]
    est = IABMARegressor(experts, cv=3, combiner="stacking", random_state=0)
    est.fit(X.iloc[:200], y[:200])
    path = export_bundle(est, tmp_path_factory.mktemp("reg") / "store", "reg", X.iloc[200:])
    return path, X.iloc[200:440].reset_index(drop=True), y[200:440]


@pytest.mark.parametrize("share", [0.04, 0.51, -1.0])
def test_a_held_out_share_out_of_bounds_is_named(share: float) -> None:
    with pytest.raises(ParameterError, match="--holdout"):
        check_holdout(share)


def test_the_held_out_bounds_themselves_are_taken() -> None:
    assert check_holdout(0.05) == 0.05 and check_holdout(0.5) == 0.5


def test_take_picks_rows_of_every_column() -> None:
    cols = {"a": np.arange(5), "b": np.arange(5) * 2}
    got = take(cols, np.array([4, 1]))
    assert {k: v.tolist() for k, v in got.items()} == {"a": [4, 1], "b": [8, 2]}


def test_a_bundle_that_cannot_be_opened_is_named(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="path"):
        GateRefit(tmp_path / "none").fit(pd.DataFrame(), np.array([]))
    with pytest.raises(NotFittedError):
        _ = GateRefit(tmp_path).better


def test_a_regression_refit_scores_both_gates_in_the_targets_units(
    regression: tuple[Path, pd.DataFrame, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, X, y = regression
    monkeypatch.setattr(gate_module, "CHUNK_ROWS", 100)  # three chunks of 240 rows
    seen: list[tuple[int, int]] = []
    served = np.repeat(np.arange(24), 10)  # 24 requests of 10 rows, in order
    refit = GateRefit(path, combiner="stacking", holdout=0.25).fit(
        X, y, served, progress=lambda done, total: seen.append((done, total))
    )
    assert seen == [(100, 240), (200, 240), (240, 240)]
    m = refit.manifest_
    held, fit_rows = refit.held_out_, refit.fit_rows_
    assert len(held) == 60 and len(fit_rows) == 180 and refit.n_held_requests_ == 6
    assert not set(held) & set(fit_rows) and served[fit_rows].max() < served[held].min()
    assert refit.served_ranges_ == {"fit": (0, 17), "held_out": (18, 23)}
    assert np.allclose(refit.y_held_, (y[held] - m.target.mean) / m.target.scale)
    # The experts' means as the served graph gives them, standardised, all rows.
    from app.bundle.loader import open_bundle

    served_means = open_bundle(path).session.run(["expert_means"], refit.schema_.columns(X))[0]
    assert refit.outputs_.shape == (240, 2)
    assert np.allclose(refit.outputs_, (served_means - m.target.mean) / m.target.scale)
    # Each gate's NLL by hand: a mixture of Gaussians in the target's units.
    sig = np.array([e.sigma for e in m.experts]) * m.target.scale
    means = refit.outputs_[held] * m.target.scale + m.target.mean

    def nll(w: np.ndarray, t: float) -> float:
        dens = (w * norm.pdf(y[held][:, None], means, sig * t)).sum(axis=1)
        return float(-np.log(dens).mean())

    c = refit.comparison_
    assert c["old_nll"] == pytest.approx(nll(refit.held_weights_["old"], m.mixture.temperature))
    assert c["new_nll"] == pytest.approx(nll(refit.held_weights_["new"], refit.temperature_))
    assert c["difference"] == pytest.approx(c["new_nll"] - c["old_nll"])
    assert c["se_difference"] > 0 and c["resamples"] == BOOTSTRAP_RESAMPLES
    assert (c["n_fit"], c["n_held_out"], c["n_held_requests"]) == (180, 60, 6)
    assert refit.better == (c["difference"] < -c["se_difference"])
    assert refit.temperature_ == float(refit.combiner_.temperature_)
    assert refit.fit_weights_.shape == (180, 2)
    assert np.allclose(refit.fit_weights_.sum(axis=1), 1.0)
    w = refit.held_weights_
    assert refit.mean_weights_ == {
        k: dict(zip(m.expert_names, w[k].mean(axis=0).tolist(), strict=True)) for k in w
    }
    assert len(refit.columns_check_[m.features[0].input]) == 60
    with pytest.raises(RefitRefused, match="numbers"):
        refit.encode_target(np.array(["a", "b"], dtype=object))


def test_a_classification_refit_scores_the_held_out_labels(world: World) -> None:
    data = simulate(300, 33)
    X, y = data.X, data.y.to_numpy()
    refit = GateRefit(world.store / "demo" / world.version, combiner="stacking").fit(X, y)
    held = refit.held_out_
    assert refit.n_held_requests_ == len(held) == 60  # one request per row, in order
    assert np.array_equal(held, np.arange(240, 300))
    assert np.array_equal(refit.y_held_, y[held])
    probs = refit.outputs_[held]  # (rows, experts, classes)

    def nll(w: np.ndarray) -> float:
        p = (w[:, :, None] * probs).sum(axis=1)[np.arange(len(held)), y[held]]
        return float(-np.log(p).mean())

    c = refit.comparison_
    if refit.manifest_.mixture.temperature == 1.0 and refit.temperature_ == 1.0:
        assert c["old_nll"] == pytest.approx(nll(refit.held_weights_["old"]))
        assert c["new_nll"] == pytest.approx(nll(refit.held_weights_["new"]))
    assert c["old_nll"] > 0 and c["new_nll"] > 0
    classes = refit.manifest_.target.classes
    assert refit.encode_target(np.array([classes[1], classes[0]])).tolist() == [1, 0]
    with pytest.raises(RefitRefused, match=r"outcome 'x' is not one of the bundle's classes"):
        refit.encode_target(np.array([classes[0], "x"], dtype=object))


def test_the_served_gates_weights_come_from_the_served_graph(world: World) -> None:
    from app.bundle.loader import open_bundle

    data = simulate(100, 34)
    refit: Any = GateRefit(world.store / "demo" / world.version, combiner="stacking")
    refit.fit(data.X, data.y.to_numpy())
    bundle = open_bundle(world.store / "demo" / world.version)
    cols = refit.schema_.columns(data.X)
    weights = bundle.session.run(["weights"], cols)[0]
    assert np.allclose(refit.held_weights_["old"], weights[refit.held_out_])


def test_better_means_by_more_than_the_paired_se(tmp_path: Path) -> None:
    refit = GateRefit(tmp_path)
    for difference, se, better in ((-1.0, 1.0, False), (-1.01, 1.0, True), (0.5, 0.1, False)):
        refit.comparison_ = {"difference": difference, "se_difference": se}
        assert refit.better is better
