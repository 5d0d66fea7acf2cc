"""Mixture arithmetic shared by the served app and the in-memory estimator.

Both sides call these functions, so a served prediction and ``IABMA*.predict`` differ only
by what onnxruntime computes in float32. Pure numpy: no scipy on the serving path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PROBA_EPS = 1e-6
_SQRT2 = np.sqrt(2.0)
_LOG_2PI = np.log(2.0 * np.pi)


def clip_proba(proba: np.ndarray, eps: float = PROBA_EPS) -> np.ndarray:
    """Clip probabilities to ``[eps, 1 - eps]`` and renormalise the last axis.

    kNN, forests and naive Bayes emit exact 0 and 1, and ``log 0`` would poison every
    likelihood downstream (METHOD.md §1).
    """
    p = np.clip(np.asarray(proba, dtype=np.float64), eps, 1.0 - eps)
    return p / p.sum(axis=-1, keepdims=True)


def erfc(x: np.ndarray) -> np.ndarray:
    """Complementary error function, fractional error below 1.2e-7 everywhere.

    Chebyshev fit from Numerical Recipes (2nd ed., §6.2); enough for 90% intervals and
    CDFs, and it keeps scipy off the serving path.
    """
    x = np.asarray(x, dtype=np.float64)
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = (
        -z * z
        - 1.26551223
        + t
        * (
            1.00002368
            + t
            * (
                0.37409196
                + t
                * (
                    0.09678418
                    + t
                    * (
                        -0.18628806
                        + t
                        * (
                            0.27886807
                            + t
                            * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))
                        )
                    )
                )
            )
        )
    )
    ans = t * np.exp(poly)
    return np.where(x >= 0, ans, 2.0 - ans)


def normal_cdf(z: np.ndarray) -> np.ndarray:
    return 0.5 * erfc(-np.asarray(z, dtype=np.float64) / _SQRT2)


def gaussian_logpdf(y: np.ndarray, mean: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    z = (y - mean) / sigma
    return -0.5 * (_LOG_2PI + z * z) - np.log(sigma)


def entropy(p: np.ndarray, axis: int = -1) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    return -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=axis)


def selection_uncertainty(weights: np.ndarray) -> np.ndarray:
    """Entropy of the weights divided by ``log m``: 0 = one expert, 1 = uniform."""
    m = weights.shape[1]
    return entropy(weights) / np.log(m)


def temper_proba(proba: np.ndarray, temperature: float) -> np.ndarray:
    """``p_c ** (1/T)`` renormalised; T > 1 softens an over-confident mixture."""
    if temperature == 1.0:
        return proba
    logits = np.log(np.clip(proba, 1e-300, None)) / temperature
    logits -= logits.max(axis=-1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=-1, keepdims=True)


@dataclass(frozen=True)
class ClassMixture:
    proba: np.ndarray  # (n, C) mixture probabilities
    total: np.ndarray  # predictive entropy of the mixture
    aleatoric: np.ndarray  # sum_j alpha_j H(f_j)
    epistemic: np.ndarray  # total - aleatoric: the experts' disagreement
    selection: np.ndarray  # normalised entropy of alpha


def mix_classification(
    weights: np.ndarray, proba: np.ndarray, temperature: float = 1.0
) -> ClassMixture:
    """Mix clipped expert probabilities ``proba`` (n, m, C) with ``weights`` (n, m)."""
    w = np.asarray(weights, dtype=np.float64)
    p = clip_proba(proba)
    mixed = np.einsum("nm,nmc->nc", w, p)
    mixed = temper_proba(mixed / mixed.sum(axis=1, keepdims=True), temperature)
    total = entropy(mixed)
    aleatoric = np.einsum("nm,nm->n", w, entropy(p))
    return ClassMixture(
        proba=mixed,
        total=total,
        aleatoric=aleatoric,
        epistemic=np.maximum(total - aleatoric, 0.0),
        selection=selection_uncertainty(w),
    )


@dataclass(frozen=True)
class RegressionMixture:
    """A Gaussian mixture per row, in standardised target units."""

    weights: np.ndarray  # (n, m)
    means: np.ndarray  # (n, m)
    sigmas: np.ndarray  # (m,) after the mixture temperature

    @property
    def mean(self) -> np.ndarray:
        return np.einsum("nm,nm->n", self.weights, self.means)

    @property
    def aleatoric(self) -> np.ndarray:
        return self.weights @ (self.sigmas**2)

    @property
    def epistemic(self) -> np.ndarray:
        dev = self.means - self.mean[:, None]
        return np.einsum("nm,nm->n", self.weights, dev * dev)

    @property
    def variance(self) -> np.ndarray:
        return self.aleatoric + self.epistemic

    @property
    def selection(self) -> np.ndarray:
        return selection_uncertainty(self.weights)

    def cdf(self, y: np.ndarray) -> np.ndarray:
        z = (np.asarray(y, dtype=np.float64)[:, None] - self.means) / self.sigmas
        return np.einsum("nm,nm->n", self.weights, normal_cdf(z))

    def logpdf(self, y: np.ndarray) -> np.ndarray:
        lp = gaussian_logpdf(np.asarray(y, dtype=np.float64)[:, None], self.means, self.sigmas)
        lw = np.log(np.clip(self.weights, 1e-300, None)) + lp
        top = lw.max(axis=1)
        return top + np.log(np.exp(lw - top[:, None]).sum(axis=1))

    def quantile(self, q: float, iterations: int = 64) -> np.ndarray:
        """Invert the mixture CDF by bisection; 64 halvings reach float64 resolution."""
        lo = (self.means - 12.0 * self.sigmas).min(axis=1)
        hi = (self.means + 12.0 * self.sigmas).max(axis=1)
        for _ in range(iterations):
            mid = 0.5 * (lo + hi)
            below = self.cdf(mid) < q
            lo = np.where(below, mid, lo)
            hi = np.where(below, hi, mid)
        return 0.5 * (lo + hi)


def mix_regression(
    weights: np.ndarray, means: np.ndarray, sigmas: np.ndarray, temperature: float = 1.0
) -> RegressionMixture:
    """Mix Gaussian experts ``N(means[:, j], (temperature * sigmas[j])**2)``."""
    return RegressionMixture(
        weights=np.asarray(weights, dtype=np.float64),
        means=np.asarray(means, dtype=np.float64),
        sigmas=np.asarray(sigmas, dtype=np.float64) * temperature,
    )
