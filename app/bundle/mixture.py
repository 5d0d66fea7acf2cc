"""Mixture arithmetic shared by the served app and the in-memory estimator.

Both sides call these functions, so a served prediction and ``IABMA*.predict`` differ only
by what onnxruntime computes in float32. Pure numpy: no scipy on the serving path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
    """Complementary error function, exact to double precision (``math.erfc``).

    Element by element through ``math`` rather than a vectorised approximation: the serving
    path has no scipy, and for the few values of a small batch this is also the faster.
    """
    arr = np.asarray(x, dtype=np.float64)
    return np.fromiter(map(math.erfc, arr.ravel()), np.float64, arr.size).reshape(arr.shape)


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

    def pdf(self, y: np.ndarray) -> np.ndarray:
        """Density at ``y`` of shape (n, k): one column per point to evaluate."""
        z = (np.asarray(y, dtype=np.float64)[:, :, None] - self.means[:, None, :]) / self.sigmas
        dens = np.exp(-0.5 * z * z) / (self.sigmas * np.sqrt(2.0 * np.pi))
        return np.einsum("nm,nkm->nk", self.weights, dens)

    def cdf_many(self, y: np.ndarray) -> np.ndarray:
        z = (np.asarray(y, dtype=np.float64)[:, :, None] - self.means[:, None, :]) / self.sigmas
        return np.einsum("nm,nkm->nk", self.weights, normal_cdf(z))

    def quantiles(self, qs: Sequence[float], tol: float = 1e-10) -> np.ndarray:
        """(n, k) quantiles of each row's mixture, by Newton's method kept inside a bracket.

        Newton from a Gaussian start converges in a handful of steps; a step that leaves
        the bracket (a multimodal mixture) falls back to bisection, so it always converges.
        """
        q = np.asarray(qs, dtype=np.float64)[None, :]
        # F = sum_j w_j F_j lies between its components, so the mixture's quantile lies
        # between the experts' own quantiles: a tight bracket (widened for normal_ppf's
        # 4.5e-4 error) and a good start (their weighted mean).
        z = normal_ppf(q)[:, :, None]  # (1, k, 1)
        per_expert = self.means[:, None, :] + self.sigmas * z  # (n, k, m)
        pad = 1e-3 * self.sigmas.max()
        lo = per_expert.min(axis=2) - pad
        hi = per_expert.max(axis=2) + pad
        x = np.einsum("nm,nkm->nk", self.weights, per_expert)
        for _ in range(200):
            err = self.cdf_many(x) - q
            lo = np.where(err < 0, x, lo)
            hi = np.where(err < 0, hi, x)
            step = x - err / np.maximum(self.pdf(x), 1e-300)
            inside = (step >= lo) & (step <= hi)
            new = np.where(inside, step, 0.5 * (lo + hi))
            done = np.abs(new - x) <= tol * (1.0 + np.abs(x))
            x = new
            if done.all():
                break
        return x

    def quantile(self, q: float) -> np.ndarray:
        return self.quantiles([q])[:, 0]


def normal_ppf(p: np.ndarray) -> np.ndarray:
    """Standard normal quantile, |error| < 4.5e-4 (Abramowitz & Stegun 26.2.23).

    Only a starting point for :meth:`RegressionMixture.quantiles`.
    """
    p = np.asarray(p, dtype=np.float64)
    tail = np.minimum(p, 1.0 - p)
    t = np.sqrt(-2.0 * np.log(np.clip(tail, 1e-300, 0.5)))
    z = t - (2.515517 + 0.802853 * t + 0.010328 * t * t) / (
        1.0 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t**3
    )
    return np.where(p < 0.5, -z, z)


def mix_regression(
    weights: np.ndarray, means: np.ndarray, sigmas: np.ndarray, temperature: float = 1.0
) -> RegressionMixture:
    """Mix Gaussian experts ``N(means[:, j], (temperature * sigmas[j])**2)``."""
    return RegressionMixture(
        weights=np.asarray(weights, dtype=np.float64),
        means=np.asarray(means, dtype=np.float64),
        sigmas=np.asarray(sigmas, dtype=np.float64) * temperature,
    )
