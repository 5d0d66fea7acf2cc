"""Combiners whose weights do not depend on x: best single, accuracy-weighted, and BMA.

Each learns one weight vector from the evidence and broadcasts it to every row, so its ONNX
form is a constant (:func:`~training.combiners.base.constant_weights_onnx`). The uniform
average lives in :mod:`training.combiners.base`.

"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import softmax

from training.combiners.base import (
    Combiner,
    check_features,
    check_fit_inputs,
    constant_weights,
    constant_weights_onnx,
)
from training.errors import ParameterError
from training.evidence import Evidence
from training.onnx_graph import GraphBuilder


class _ConstantCombiner(Combiner):
    """Shared prediction and export for combiners that learn one weight vector ``weights_``."""

    def weights(self, Z: np.ndarray) -> np.ndarray:
        """The fitted weight vector repeated for each of the ``len(Z)`` rows."""
        self._check_fitted("weights_")
        return constant_weights(len(check_features(Z, self.n_features_in_)), self.weights_)

    def to_onnx(self, g: GraphBuilder, z: str) -> str:
        self._check_fitted("weights_")
        return constant_weights_onnx(g, z, self.weights_)


class BestSingleCombiner(_ConstantCombiner):
    """All the weight on one expert, the one with the highest mean out-of-fold log-likelihood.

    The criterion is ``argmax_j mean_i L[i, j]``, i.e. the lowest out-of-fold NLL, for both
    tasks; it is a proper score, so a confident but often wrong expert does not win the way
    it could on accuracy. Ties go to the lowest index.

    Attributes
    ----------
    mean_log_lik_ : ndarray of shape (m,)
        ``mean_i L[i, j]`` for each expert.
    best_index_ : int
        The chosen expert.
    weights_ : ndarray of shape (m,)
        One-hot on ``best_index_``.
    """

    name = "best_single"

    def fit(self, Z: np.ndarray, evidence: Evidence) -> BestSingleCombiner:
        """Pick the expert with the highest mean log-likelihood.

        Parameters
        ----------
        Z : ndarray of shape (n, d)
            Gate features; only their row count is checked.
        evidence : Evidence
            The experts' out-of-fold evidence on the same rows.

        Returns
        -------
        self
        """
        Z = check_fit_inputs(Z, evidence)
        self.mean_log_lik_ = evidence.log_lik.mean(axis=0)
        self.best_index_ = int(np.argmax(self.mean_log_lik_))
        self.weights_ = np.eye(evidence.m)[self.best_index_]
        self.n_features_in_ = Z.shape[1]
        return self


class AccuracyWeightedCombiner(_ConstantCombiner):
    """Weights proportional to each expert's out-of-fold skill ("Freq Avg" in the paper).

    Classification: ``acc_j / sum_k acc_k``, with ``acc_j`` the share of rows whose top
    class is right. Regression: proportional to ``1 / MSE_j`` in standardised units. If no
    expert is ever right (or every MSE is infinite) the weights fall back to uniform;
    experts with zero MSE share all the weight.

    Attributes
    ----------
    skill_ : ndarray of shape (m,)
        Accuracy (classification) or MSE (regression) per expert.
    weights_ : ndarray of shape (m,)
    """

    name = "accuracy_weighted"

    def fit(self, Z: np.ndarray, evidence: Evidence) -> AccuracyWeightedCombiner:
        """Measure each expert's accuracy or MSE on the evidence rows.

        Parameters
        ----------
        Z : ndarray of shape (n, d)
        evidence : Evidence

        Returns
        -------
        self
        """
        Z = check_fit_inputs(Z, evidence)
        if evidence.task == "classification":
            self.skill_ = evidence.correct.mean(axis=0)
            raw = self.skill_
        else:
            self.skill_ = evidence.sq_error.mean(axis=0)
            zero = self.skill_ == 0
            # An expert with no error would get an infinite weight: let the perfect ones share.
            raw = zero.astype(np.float64) if zero.any() else 1.0 / self.skill_
        total = raw.sum()
        self.weights_ = raw / total if total > 0 else np.full(evidence.m, 1.0 / evidence.m)
        self.n_features_in_ = Z.shape[1]
        return self


class BMACombiner(_ConstantCombiner):
    """Classical Bayesian model averaging over fixed predictors.

    ``w_j = softmax_j(log prior_j + sum_i L[i, j])``: the posterior probability that expert
    ``j`` generated all the data. The log-likelihood sums grow linearly in n while their
    differences do too, so the posterior collapses onto the single best expert once n is in
    the hundreds: BMA is model *selection* in the limit, which is the known behaviour (it
    assumes one of the experts is the true model) and the reason adaptive weights exist.

    Parameters
    ----------
    prior : sequence of float or None, default=None
        Prior probabilities of the experts (normalised here); uniform when None.

    Attributes
    ----------
    log_evidence_ : ndarray of shape (m,)
        ``sum_i L[i, j]`` for each expert.
    weights_ : ndarray of shape (m,)
    """

    name = "bma"

    def __init__(self, prior: Sequence[float] | None = None) -> None:
        self.prior = prior

    def fit(self, Z: np.ndarray, evidence: Evidence) -> BMACombiner:
        """Compute the posterior model probabilities.

        Parameters
        ----------
        Z : ndarray of shape (n, d)
        evidence : Evidence

        Returns
        -------
        self
        """
        Z = check_fit_inputs(Z, evidence)
        log_prior = self._log_prior(evidence.m)
        self.log_evidence_ = evidence.log_lik.sum(axis=0)
        self.weights_ = softmax(log_prior + self.log_evidence_)
        self.n_features_in_ = Z.shape[1]
        return self

    def _log_prior(self, m: int) -> np.ndarray:
        if self.prior is None:
            return np.full(m, -np.log(m))
        p = np.asarray(self.prior, dtype=np.float64)
        if p.shape != (m,) or not np.all(np.isfinite(p)) or np.any(p <= 0):
            raise ParameterError(
                "prior", self.prior, f"must be {m} positive numbers, one per expert"
            )
        return np.log(p / p.sum())
