"""Stacking and ensemble selection: the weights each method should find, on known cases."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp

from training.combiners.stacking import EnsembleSelectionCombiner, StackingCombiner
from training.errors import ParameterError
from training.evidence import classification_evidence, regression_evidence


def _two_classifiers(n: int = 2000, seed: int = 0):
    """Two experts that are each right on a different, random half of the rows."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    p_true = np.where(y == 1, 0.85, 0.15)
    first = rng.random(n) < 0.5
    a = np.where(first, p_true, 0.5 + 0.1 * rng.normal(size=n).clip(-3, 3))
    b = np.where(~first, p_true, 0.5 + 0.1 * rng.normal(size=n).clip(-3, 3))
    proba = np.stack([np.column_stack([1 - a, a]), np.column_stack([1 - b, b])], axis=1)
    return np.zeros((n, 1), np.float32), classification_evidence(proba, y)


def _best_linear_pool(L: np.ndarray) -> float:
    """The weight on expert 0 that maximises the mean log score of a two-expert pool."""

    def loss(w: float) -> float:
        return -float(logsumexp(np.log([w, 1 - w]) + L, axis=1).mean())

    return float(minimize_scalar(loss, bounds=(1e-6, 1 - 1e-6), method="bounded").x)


def test_ensemble_selection_reaches_the_best_pool_within_its_grid() -> None:
    Z, ev = _two_classifiers()
    comb = EnsembleSelectionCombiner(rounds=100, temperature=None).fit(Z, ev)
    w_star = _best_linear_pool(ev.log_lik)
    assert 0.1 < w_star < 0.9  # an interior optimum: selection must mix, not pick
    assert comb.weights_[0] == pytest.approx(w_star, abs=0.03)
    assert comb.weights_.sum() == pytest.approx(1.0)
    assert 1 <= comb.n_rounds_ <= 100
    # Weights are counts over the rounds kept: multiples of 1 / n_rounds.
    counts = comb.weights_ * comb.n_rounds_
    np.testing.assert_allclose(counts, np.round(counts), atol=1e-9)


def test_ensemble_selection_picks_a_dominant_expert_alone() -> None:
    rng = np.random.default_rng(1)
    n = 500
    y = rng.normal(size=n)
    means = y[:, None] + rng.normal(size=(n, 3)) * np.array([0.1, 1.0, 1.5])
    ev = regression_evidence(means, y, np.array([0.1, 1.0, 1.5]), y_low=-3, y_high=3)
    comb = EnsembleSelectionCombiner(temperature=None).fit(np.zeros((n, 1), np.float32), ev)
    np.testing.assert_allclose(comb.weights_, [1.0, 0.0, 0.0])


def test_stacking_classification_is_the_penalised_best_pool() -> None:
    Z, ev = _two_classifiers()
    comb = StackingCombiner(temperature=None).fit(Z, ev)
    assert comb.weights_[0] == pytest.approx(_best_linear_pool(ev.log_lik), abs=0.03)
    # A huge penalty shrinks the weights to the uniform average.
    flat = StackingCombiner(penalty_grid=(1e6,), temperature=None).fit(Z, ev)
    np.testing.assert_allclose(flat.weights_, [0.5, 0.5], atol=1e-3)


def test_stacking_regression_recovers_the_mixing_weights() -> None:
    """y is 0.7 of one expert's signal plus 0.3 of another's: ridge stacking finds it."""
    rng = np.random.default_rng(2)
    n = 3000
    a, b = rng.normal(size=n), rng.normal(size=n)
    y = 0.7 * a + 0.3 * b + 0.05 * rng.normal(size=n)
    means = np.column_stack([a, b, rng.normal(size=n)])
    ev = regression_evidence(means, y, np.ones(3), y_low=float(y.min()), y_high=float(y.max()))
    comb = StackingCombiner(temperature=None).fit(np.zeros((n, 2), np.float32), ev)
    np.testing.assert_allclose(comb.weights_, [0.7, 0.3, 0.0], atol=0.02)
    assert comb.penalty_ in StackingCombiner().penalty_grid


def test_auto_temperature_is_fitted_and_none_is_one() -> None:
    Z, ev = _two_classifiers()
    assert StackingCombiner(temperature=None).fit(Z, ev).temperature_ == 1.0
    fitted = StackingCombiner(temperature="auto").fit(Z, ev).temperature_
    assert 0.25 <= fitted <= 4.0 and fitted != 1.0
    with pytest.raises(ParameterError) as err:
        StackingCombiner(temperature=-1.0).fit(Z, ev)
    assert err.value.parameter == "temperature"
