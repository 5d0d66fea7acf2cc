"""What a practitioner would reach for instead of a gate: stacking and ensemble selection.

Both learn one weight vector on the simplex from the same out-of-fold evidence as every
other combiner, so they export and serve as constant gates with the same contract. Each
can fit the mixture temperature (``temperature="auto"``), as IA-BMA fits its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy.special import logsumexp
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, KFold

from training.combiners.base import check_fit_inputs
from training.combiners.fallback import (
    calibrated_pool,
    fit_or_fixed_temperature,
    pooled_weights,
    row_nll,
)
from training.combiners.static import _ConstantCombiner
from training.errors import ParameterError
from training.evidence import Evidence
from training.params import check_int

PENALTY_GRID = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)
FOLDS = 5


class StackingCombiner(_ConstantCombiner):
    """Stacking with a penalised linear meta-model, constrained to the simplex.

    - Regression: scikit-learn's ``Ridge(positive=True, fit_intercept=False)`` on the
      experts' out-of-fold means (Breiman's stacked regression), ``alpha`` chosen by
      5-fold ``GridSearchCV``; the coefficients are normalised to sum to one.
    - Classification: a logistic-type meta-model whose output is a mixture,
      ``softmax(b)``, fitted by the log score with an L2 penalty on ``b`` chosen by 5-fold
      cross-validated log score. ``StackingClassifier``'s own ``LogisticRegression`` would
      return a new distribution, not weights over the experts, so it cannot be a gate.
      With ``temperature="auto"`` the weights and the mixture temperature are fitted
      together (:func:`~training.combiners.fallback.calibrated_pool`), in the
      cross-validation too.

    Parameters
    ----------
    penalty_grid : sequence of float
        Ridge ``alpha`` (regression) or the L2 weight on ``b`` (classification).
    temperature : float, "auto" or None, default="auto"
        Mixture temperature; ``"auto"`` fits it on the out-of-fold rows.
    """

    name = "stacking"

    def __init__(
        self,
        penalty_grid: tuple[float, ...] = PENALTY_GRID,
        temperature: float | Literal["auto"] | None = "auto",
    ) -> None:
        self.penalty_grid = penalty_grid
        self.temperature = temperature

    def fit(self, Z: np.ndarray, evidence: Evidence) -> StackingCombiner:
        Z = check_fit_inputs(Z, evidence)
        grid = [float(a) for a in self.penalty_grid]
        if not grid or any(not a > 0 for a in grid):
            raise ParameterError("penalty_grid", self.penalty_grid, "must be positive numbers")
        if evidence.task == "regression":
            assert evidence.means is not None
            search = GridSearchCV(
                Ridge(positive=True, fit_intercept=False),
                {"alpha": grid},
                cv=KFold(FOLDS, shuffle=True, random_state=0),
                scoring="neg_mean_squared_error",
            ).fit(evidence.means, evidence.y)
            coef = np.maximum(search.best_estimator_.coef_, 0.0)
            self.penalty_ = float(search.best_params_["alpha"])
            total = coef.sum()
            w = coef / total if total > 0 else np.full(evidence.m, 1.0 / evidence.m)
        else:
            joint = self.temperature == "auto"
            self.penalty_ = cv_penalty(evidence, grid, joint)
            if joint:
                self.weights_, self.temperature_ = calibrated_pool(evidence, self.penalty_)
                self.n_features_in_ = Z.shape[1]
                return self
            w = pooled_weights(evidence.log_lik, self.penalty_)
        self.weights_ = w
        self.temperature_ = fit_or_fixed_temperature(self.temperature, w, evidence)
        self.n_features_in_ = Z.shape[1]
        return self


def cv_penalty(ev: Evidence, grid: Sequence[float] = PENALTY_GRID, joint: bool = True) -> float:
    """The L2 weight on the pool's logits with the best 5-fold cross-validated log score
    (with the pool's temperature fitted jointly, when ``joint``)."""
    cv = KFold(FOLDS, shuffle=True, random_state=0)
    scores = []
    for penalty in grid:
        held = 0.0
        for tr, va in cv.split(ev.log_lik):
            held += _held_out_log_score(ev, tr, va, float(penalty), joint)
        scores.append(held)
    return float(grid[int(np.argmax(scores))])


def _held_out_log_score(
    ev: Evidence, tr: np.ndarray, va: np.ndarray, penalty: float, joint: bool
) -> float:
    """The log score on rows ``va`` of the pool fitted on rows ``tr`` (with its
    temperature, fitted jointly, when ``joint``)."""
    if not joint:
        w = pooled_weights(ev.log_lik[tr], penalty)
        return float(logsumexp(np.log(w) + ev.log_lik[va], axis=1).sum())
    w, t = calibrated_pool(ev.rows(tr), penalty)
    return -float(row_nll(np.tile(w, (len(va), 1)), ev.rows(va), t).sum())


class EnsembleSelectionCombiner(_ConstantCombiner):
    """Greedy forward selection with replacement (Caruana et al. 2004; AutoGluon's
    weighted ensemble).

    Start from the empty ensemble; at each of ``rounds`` steps add the expert (again, if
    it is already in) whose addition gives the lowest out-of-fold NLL of the equally
    weighted ensemble so far. The weights are how often each expert was added, up to the
    step with the lowest NLL of the whole path, as AutoGluon trims it.

    Parameters
    ----------
    rounds : int, default=100
        Selection steps (AutoGluon's default ``ensemble_size``).
    temperature : float, "auto" or None, default="auto"
    """

    name = "ensemble_selection"

    def __init__(
        self, rounds: int = 100, temperature: float | Literal["auto"] | None = "auto"
    ) -> None:
        self.rounds = rounds
        self.temperature = temperature

    def fit(self, Z: np.ndarray, evidence: Evidence) -> EnsembleSelectionCombiner:
        Z = check_fit_inputs(Z, evidence)
        rounds = check_int("rounds", self.rounds)
        m = evidence.m
        L = evidence.log_lik
        counts = np.zeros(m)
        path: list[tuple[float, np.ndarray]] = []
        for k in range(1, rounds + 1):
            # Every candidate next ensemble at once: (m, m) weights, row j adds expert j.
            candidates = (counts[None, :] + np.eye(m)) / k
            with np.errstate(divide="ignore"):
                log_w = np.log(candidates)
            trials = -logsumexp(log_w[:, None, :] + L[None], axis=2).mean(axis=1)
            counts[int(np.argmin(trials))] += 1
            path.append((float(trials.min()), counts / k))
        best = int(np.argmin([nll for nll, _ in path]))
        self.n_rounds_ = best + 1
        self.weights_ = path[best][1]
        self.temperature_ = fit_or_fixed_temperature(self.temperature, self.weights_, evidence)
        self.n_features_in_ = Z.shape[1]
        return self
