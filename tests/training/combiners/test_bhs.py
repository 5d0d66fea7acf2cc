"""BHS: global stacking without features, convergence, and its prior's pull."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
from scipy.optimize import minimize

from training.combiners.bhs import BHSCombiner

if TYPE_CHECKING:
    from conftest import Case  # the fixtures' type; pytest provides the values


def global_stacking(log_lik: np.ndarray) -> np.ndarray:
    """Simplex weights maximising ``mean_i log sum_k w_k f_k(y_i|x_i)``, by SLSQP on the
    simplex itself (not BHS's softmax parametrisation)."""
    f = np.exp(log_lik)
    m = f.shape[1]
    res = minimize(
        lambda w: -np.mean(np.log(f @ w)),
        np.full(m, 1.0 / m),
        jac=lambda w: -(f / (f @ w)[:, None]).mean(axis=0),
        method="SLSQP",
        bounds=[(0.0, 1.0)] * m,
        constraints=({"type": "eq", "fun": lambda w: w.sum() - 1.0},),
        options={"ftol": 1e-14, "maxiter": 1000},
    )
    assert res.success, res.message
    return res.x


def test_without_features_equals_global_stacking(case: Case) -> None:
    ev = case.evidence
    comb = BHSCombiner().fit(np.zeros((ev.n, 0), dtype=np.float32), ev)
    assert comb.converged_
    w = comb.weights(np.zeros((3, 0), dtype=np.float32))
    np.testing.assert_allclose(w, np.tile(global_stacking(ev.log_lik), (3, 1)), atol=1e-4)


def test_converges_and_records_it(case: Case) -> None:
    comb = BHSCombiner().fit(case.Z, case.evidence)
    assert comb.converged_
    assert 1 <= comb.n_iter_ < comb.max_iter
    w = comb.weights(case.Z)
    score = np.mean(np.log(np.sum(w * np.exp(case.evidence.log_lik), axis=1)))
    penalty = np.sum(comb.coef_**2) / (2 * 25.0 * case.evidence.n)
    assert comb.loss_ == pytest.approx(-score + penalty, rel=1e-10)
    assert np.all(comb.coef_[:, -1] == 0) and comb.intercept_[-1] == 0


def test_tight_prior_shrinks_to_global_stacking(regression_case: Case) -> None:
    ev = regression_case.evidence
    comb = BHSCombiner(slab_scale=1e-4).fit(regression_case.Z, ev)
    assert np.max(np.abs(comb.coef_)) < 1e-3
    w = comb.weights(regression_case.Z_test)
    np.testing.assert_allclose(w, np.tile(global_stacking(ev.log_lik), (len(w), 1)), atol=1e-3)


def test_features_improve_the_training_score(classification_case: Case) -> None:
    case = classification_case
    ev = case.evidence
    flat = BHSCombiner().fit(np.zeros((ev.n, 0), dtype=np.float32), ev)
    adaptive = BHSCombiner().fit(case.Z, ev)
    assert adaptive.loss_ < flat.loss_
