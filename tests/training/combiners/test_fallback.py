"""What every gate is scored and calibrated with: the mixture's per-row NLL, the mixture
temperature, and the pool fitted together with its temperature."""

from __future__ import annotations

import numpy as np
import pytest

from app.bundle.mixture import log_sum_exp
from training.combiners import fallback
from training.evidence import regression_evidence


def _regression(n: int = 300, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=n)
    noise = rng.normal(size=(n, 4)) * np.array([0.3, 0.6, 0.6, 1.0])
    means = y[:, None] + noise
    sigmas = np.sqrt(np.mean(noise**2, axis=0))
    return regression_evidence(means, y, sigmas, y_low=float(y.min()), y_high=float(y.max()))


@pytest.fixture(params=["classification", "regression"])
def evidence(request, simulation_fit):
    return simulation_fit.est.evidence_ if request.param == "classification" else _regression()


def test_the_temperature_grid_scores_what_row_nll_scores(evidence) -> None:
    """The fast per-temperature NLL (true class or squared residual alone) equals the mean
    of :func:`row_nll`, the served mixture's NLL, at every grid temperature."""
    ev = evidence
    w = np.random.default_rng(1).dirichlet(np.ones(ev.m), size=ev.n)
    score = (
        fallback._class_nll_per_temperature
        if ev.task == "classification"
        else fallback._regression_nll_per_temperature
    )
    got = score(w, ev, fallback.TEMPERATURE_GRID)
    want = [fallback.row_nll(w, ev, float(t)).mean() for t in fallback.TEMPERATURE_GRID]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert fallback.fit_temperature(w, ev) == fallback.TEMPERATURE_GRID[int(np.argmin(want))]


def test_tempered_experts_are_what_the_mixture_temperature_serves(evidence) -> None:
    """``L`` at T = 1 is the evidence's own; at any T, the mixture of the tempered experts
    scores what :func:`row_nll` scores for the served mixture at that temperature."""
    ev = evidence
    np.testing.assert_allclose(fallback.tempered_log_lik(ev, 1.0), ev.log_lik, atol=1e-10)
    w = np.random.default_rng(2).dirichlet(np.ones(ev.m), size=ev.n)
    for t in (0.4, 1.7):
        lik = fallback.tempered_log_lik(ev, t)
        np.testing.assert_allclose(
            -log_sum_exp(np.log(w) + lik, axis=1), fallback.row_nll(w, ev, t), atol=1e-9
        )


def test_the_pool_fitted_with_its_temperature_beats_one_tempered_afterwards(evidence) -> None:
    ev = evidence
    w, t = fallback.calibrated_pool(ev, fallback.POOL_PENALTY)
    assert np.isclose(w.sum(), 1.0) and (w >= 0).all()
    assert t in fallback.TEMPERATURE_GRID
    after = fallback.pooled_weights(ev.log_lik, fallback.POOL_PENALTY)
    t_after = fallback.fit_temperature(np.broadcast_to(after, (ev.n, ev.m)), ev)
    joint = fallback.row_nll(np.broadcast_to(w, (ev.n, ev.m)), ev, t).mean()
    posthoc = fallback.row_nll(np.broadcast_to(after, (ev.n, ev.m)), ev, t_after).mean()
    assert joint <= posthoc + 1e-9
