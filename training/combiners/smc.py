"""Synthetic Model Combination (Chan & van der Schaar 2022), for experts sharing one training set.

The original assumes each expert comes with (a density of) its own training inputs. Here
all experts saw the same rows, so an expert's *domain* is where it did well out of fold,
and a Gaussian fitted to that domain plays the density. (The paper's bibliography cites
Rasmussen & Ghahramani 2001 for SMC; the paper cites it wrongly.)
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from scipy.linalg import cholesky, solve_triangular
from scipy.special import log_softmax

from training.combiners.base import Combiner, check_features, check_fit_inputs
from training.errors import ParameterError
from training.evidence import Evidence
from training.onnx_graph import GraphBuilder
from training.params import check_int, check_positive, check_real

_LOG_2PI = float(np.log(2.0 * np.pi))


class SMCCombiner(Combiner):
    """``w_j(x) ∝ N(x; m_j, S_j)``, a Gaussian density fitted to expert ``j``'s domain.

    Expert ``j``'s domain is the set of training rows where

    - classification: ``f_j(y_i | x_i) = exp(L[i, j]) >= threshold``;
    - regression: its absolute error is at most its own ``quantile``-quantile of
      absolute errors (so each domain holds about that share of the rows).

    A domain smaller than ``min_coverage`` rows is replaced by all the rows. ``S_j`` is the
    domain's covariance shrunk toward its diagonal,
    ``(1 - shrinkage) C + shrinkage diag(C) + ridge I``; the ridge keeps it invertible
    when a feature is constant on the domain (a one-hot level it never contains). The
    weights are ``softmax_j(log N(x; m_j, S_j))``, computed in log space because the
    densities themselves underflow far from every domain.

    Parameters
    ----------
    threshold : float, default=0.6
        Confident-cover threshold on ``f_j(y|x)`` (classification).
    quantile : float, default=0.3
        Cover quantile of the absolute errors (regression).
    min_coverage : int, default=20
        Smallest domain kept as is.
    shrinkage : float, default=0.9
        Weight of the diagonal in the shrunk covariance.
    ridge : float, default=1e-6
        Added to the diagonal, in the units of the standardised features.

    Attributes
    ----------
    domain_sizes_ : ndarray of shape (m,)
        Rows in each domain before the ``min_coverage`` fallback.
    used_all_rows_ : ndarray of shape (m,) of bool
        Experts whose domain fell back to all rows.
    means_ : ndarray of shape (m, d)
    whiten_ : ndarray of shape (m, d, d)
        ``inv(chol(S_j)).T``: ``|(x - m_j) whiten_[j]|^2`` is the squared Mahalanobis
        distance.
    log_det_ : ndarray of shape (m,)
        ``log det S_j``.
    n_features_in_ : int
    """

    name = "smc"

    def __init__(
        self,
        threshold: float = 0.6,
        quantile: float = 0.3,
        min_coverage: int = 20,
        shrinkage: float = 0.9,
        ridge: float = 1e-6,
    ) -> None:
        self.threshold = threshold
        self.quantile = quantile
        self.min_coverage = min_coverage
        self.shrinkage = shrinkage
        self.ridge = ridge

    def _validate(self) -> None:
        check_real("threshold", self.threshold, low=0.0, high=1.0, open_low=True, open_high=True)
        check_real("quantile", self.quantile, low=0.0, high=1.0, open_low=True, open_high=True)
        check_int("min_coverage", self.min_coverage, minimum=2)
        check_real("shrinkage", self.shrinkage, low=0.0, high=1.0)
        check_positive("ridge", self.ridge)

    def _domains(self, evidence: Evidence) -> np.ndarray:
        if evidence.task == "classification":
            return evidence.log_lik >= np.log(float(self.threshold))
        err = np.sqrt(evidence.sq_error)
        return err <= np.quantile(err, float(self.quantile), axis=0)[None, :]

    def fit(self, Z: np.ndarray, evidence: Evidence) -> SMCCombiner:
        """Find each expert's domain and fit its shrunk Gaussian.

        Parameters
        ----------
        Z : ndarray of shape (n, d)
            Standardised gate features, ``d >= 1``.
        evidence : Evidence

        Returns
        -------
        self
        """
        Z = check_fit_inputs(Z, evidence)
        self._validate()
        d = Z.shape[1]
        if d == 0:
            raise ParameterError("Z", Z.shape, "needs at least one feature column for densities")
        domains = self._domains(evidence)
        self.domain_sizes_ = domains.sum(axis=0)
        self.used_all_rows_ = self.domain_sizes_ < int(self.min_coverage)
        domains[:, self.used_all_rows_] = True
        Z64 = Z.astype(np.float64)
        lam = float(self.shrinkage)
        means, whiten, log_det = [], [], []
        for j in range(evidence.m):
            rows = Z64[domains[:, j]]
            mu = rows.mean(axis=0)
            centred = rows - mu
            cov = centred.T @ centred / max(len(rows) - 1, 1)
            shrunk = (1 - lam) * cov + lam * np.diag(np.diag(cov))
            shrunk[np.diag_indices(d)] += float(self.ridge)
            chol = cholesky(shrunk, lower=True)
            means.append(mu)
            whiten.append(solve_triangular(chol, np.eye(d), lower=True).T)
            log_det.append(2.0 * np.sum(np.log(np.diag(chol))))
        self.means_ = np.stack(means)
        self.whiten_ = np.stack(whiten)
        self.log_det_ = np.array(log_det)
        self.n_features_in_ = d
        return self

    def _mahalanobis(self, Z: np.ndarray) -> np.ndarray:
        diff = Z.astype(np.float64)[None, :, :] - self.means_[:, None, :]  # (m, n, d)
        u = np.matmul(diff, self.whiten_)
        return np.sum(u * u, axis=2).T

    def log_density(self, Z: np.ndarray) -> np.ndarray:
        """``log N(x; m_j, S_j)``: (n, m) log densities of each expert's domain Gaussian."""
        self._check_fitted("whiten_")
        Z = check_features(Z, self.n_features_in_)
        return -0.5 * (self._mahalanobis(Z) + self.log_det_ + self.n_features_in_ * _LOG_2PI)

    def weights(self, Z: np.ndarray) -> np.ndarray:
        """``softmax_j`` of the log densities: the normalised domain densities at ``Z``."""
        return np.exp(log_softmax(self.log_density(Z), axis=1))

    def to_onnx(self, g: GraphBuilder, z: str) -> str:
        """Per-expert whitening by batched MatMul, sum of squares, minus half log-det, softmax.

        Computed in float64: with a tiny ridge the squared distances reach ~1e6 and float32
        would lose the differences between experts that set the weights.
        """
        self._check_fitted("whiten_")
        m, d = self.means_.shape
        diff = g.op("Sub", [g.cast(z), g.const(self.means_.reshape(m, 1, d), "means", f64=True)])
        u = g.op("MatMul", [diff, g.const(self.whiten_, "whiten", f64=True)])  # (m, n, d)
        sq = g.op(
            "ReduceSum",
            [g.op("Mul", [u, u]), g.const(np.array([2], dtype=np.int64))],
            keepdims=0,
        )
        maha = g.op("Transpose", [sq], perm=[1, 0])  # (n, m)
        logits = g.op(
            "Sub",
            [
                g.op("Mul", [maha, g.const(-0.5, f64=True)]),
                g.const(0.5 * self.log_det_[None, :], f64=True),
            ],
        )
        return g.cast(g.softmax_rows(logits), TensorProto.FLOAT)
