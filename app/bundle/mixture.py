"""Mixture arithmetic shared by the served app and the in-memory estimator.

Both sides call these functions, so a served prediction and ``IABMA*.predict`` differ only
by what onnxruntime computes in float32. Pure numpy: no scipy on the serving path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.bundle.normal import SQRT2, erfc, gaussian_logpdf, normal_cdf, normal_ppf

PROBA_EPS = 1e-6
# Up to this many (row, level) pairs, quantiles are solved in plain Python.
_SCALAR_QUANTILES = 8


def clip_proba(proba: np.ndarray, eps: float = PROBA_EPS) -> np.ndarray:
    """Clip probabilities to ``[eps, 1 - eps]`` and renormalise the last axis.

    kNN, forests and naive Bayes emit exact 0 and 1, and ``log 0`` would poison every
    likelihood downstream (docs/method.md, "Where the likelihoods come from").
    """
    p = np.clip(np.asarray(proba, dtype=np.float64), eps, 1.0 - eps)
    return p / p.sum(axis=-1, keepdims=True)


def log_sum_exp(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """``log(sum(exp(a)))`` along ``axis`` without overflow. Plain numpy: scipy's
    ``logsumexp`` costs four times as much on the training code's temperature grids."""
    top = a.max(axis=axis)
    e = a - np.expand_dims(top, axis)
    np.exp(e, out=e)
    return top + np.log(e.sum(axis=axis))


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
    proba: np.ndarray  # (n, C) mixture probabilities, sum_j alpha_j f~_j
    total: np.ndarray  # predictive entropy of the mixture
    aleatoric: np.ndarray  # sum_j alpha_j H(f~_j)
    epistemic: np.ndarray  # total - aleatoric: the experts' disagreement (mutual information)
    selection: np.ndarray  # normalised entropy of alpha


def mix_classification(
    weights: np.ndarray, proba: np.ndarray, temperature: float = 1.0
) -> ClassMixture:
    """Mix expert probabilities ``proba`` (n, m, C) with ``weights`` (n, m).

    Each expert is clipped, then tempered (``f~_j ∝ f_j ** (1/T)``) before mixing, and
    every entropy is taken on the tempered experts, so ``total = aleatoric + epistemic``
    holds exactly (the mutual-information identity) at every temperature.
    """
    w = np.asarray(weights, dtype=np.float64)
    p = temper_proba(clip_proba(proba), temperature)
    mixed = np.einsum("nm,nmc->nc", w, p)
    mixed = mixed / mixed.sum(axis=1, keepdims=True)
    total = entropy(mixed)
    aleatoric = np.einsum("nm,nm->n", w, entropy(p))
    return ClassMixture(
        proba=mixed,
        total=total,
        aleatoric=aleatoric,
        epistemic=total - aleatoric,
        selection=selection_uncertainty(w),
    )


@dataclass(frozen=True)
class RegressionMixture:
    """A Gaussian mixture per row, in standardised target units.

    ``sigmas`` is (m,), one constant spread per expert, or (n, m) where some experts give
    their own per-row predictive sd (:mod:`app.bundle.spread`); every method takes both.
    """

    weights: np.ndarray  # (n, m)
    means: np.ndarray  # (n, m)
    sigmas: np.ndarray  # (m,) or (n, m), after the mixture temperature

    @property
    def _s3(self) -> np.ndarray:
        """``sigmas`` shaped to broadcast against (n, k, m) arrays."""
        return self.sigmas[:, None, :] if self.sigmas.ndim == 2 else self.sigmas

    @property
    def mean(self) -> np.ndarray:
        return np.einsum("nm,nm->n", self.weights, self.means)

    @property
    def aleatoric(self) -> np.ndarray:
        if self.sigmas.ndim == 2:
            return np.einsum("nm,nm->n", self.weights, self.sigmas**2)
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
        return log_sum_exp(np.log(np.clip(self.weights, 1e-300, None)) + lp, axis=1)

    def pdf(self, y: np.ndarray) -> np.ndarray:
        """Density at ``y`` of shape (n, k): one column per point to evaluate."""
        s = self._s3
        z = (np.asarray(y, dtype=np.float64)[:, :, None] - self.means[:, None, :]) / s
        dens = np.exp(-0.5 * z * z) / (s * np.sqrt(2.0 * np.pi))
        return np.einsum("nm,nkm->nk", self.weights, dens)

    def _cdf_pdf(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """CDF and density at ``y`` (n, k), from one standardisation of ``y``."""
        s = self._s3
        z = (y[:, :, None] - self.means[:, None, :]) / s
        dens = np.exp(-0.5 * z * z) / (s * np.sqrt(2.0 * np.pi))
        cdf = 0.5 * erfc(-z / SQRT2)
        return (
            np.einsum("nm,nkm->nk", self.weights, cdf),
            np.einsum("nm,nkm->nk", self.weights, dens),
        )

    def quantiles(self, qs: Sequence[float], tol: float = 1e-10) -> np.ndarray:
        """(n, k) quantiles of each row's mixture, by Newton's method kept inside a bracket.

        Newton from a Gaussian start converges in a handful of steps; a step that leaves
        the bracket (a multimodal mixture) falls back to bisection, so it always converges.
        """
        if self.weights.shape[0] * len(qs) <= _SCALAR_QUANTILES:
            return self._quantiles_scalar(qs, tol)
        q = np.asarray(qs, dtype=np.float64)[None, :]
        # F = sum_j w_j F_j lies between its components, so the mixture's quantile lies
        # between the experts' own quantiles: a tight bracket (widened for normal_ppf's
        # 4.5e-4 error) and a good start (their weighted mean).
        z = normal_ppf(q)[:, :, None]  # (1, k, 1)
        per_expert = self.means[:, None, :] + self._s3 * z  # (n, k, m)
        pad = 1e-3 * self.sigmas.max()
        lo = per_expert.min(axis=2) - pad
        hi = per_expert.max(axis=2) + pad
        x = np.einsum("nm,nkm->nk", self.weights, per_expert)
        for _ in range(200):
            cdf, pdf = self._cdf_pdf(x)
            err = cdf - q
            lo = np.where(err < 0, x, lo)
            hi = np.where(err < 0, hi, x)
            step = x - err / np.maximum(pdf, 1e-300)
            inside = (step >= lo) & (step <= hi)
            new = np.where(inside, step, 0.5 * (lo + hi))
            done = np.abs(new - x) <= tol * (1.0 + np.abs(x))
            x = new
            if done.all():
                break
        return x

    def _quantiles_scalar(self, qs: Sequence[float], tol: float) -> np.ndarray:
        """The same bracketed Newton in plain Python, for a row or two: the vectorised one
        spends its time in the overhead of a dozen numpy calls per iteration."""
        rows = np.broadcast_to(self.sigmas, self.means.shape).tolist()
        out = np.empty((self.weights.shape[0], len(qs)))
        for i, (w, mu) in enumerate(zip(self.weights.tolist(), self.means.tolist(), strict=True)):
            sigmas = rows[i]
            inv = [1.0 / (s * math.sqrt(2.0)) for s in sigmas]
            dens = [1.0 / (s * math.sqrt(2.0 * math.pi)) for s in sigmas]
            pad = 1e-3 * max(sigmas)
            for k, q in enumerate(qs):
                z = float(normal_ppf(np.asarray(q)))
                per_expert = [m + s * z for m, s in zip(mu, sigmas, strict=True)]
                lo, hi = min(per_expert) - pad, max(per_expert) + pad
                x = sum(a * b for a, b in zip(w, per_expert, strict=True))
                for _ in range(200):
                    err = -q
                    pdf = 0.0
                    for a, m, c, d in zip(w, mu, inv, dens, strict=True):
                        u = (x - m) * c
                        err += a * 0.5 * math.erfc(-u)
                        pdf += a * d * math.exp(-u * u)
                    if err < 0:
                        lo = x
                    else:
                        hi = x
                    step = x - err / max(pdf, 1e-300)
                    new = step if lo <= step <= hi else 0.5 * (lo + hi)
                    done = abs(new - x) <= tol * (1.0 + abs(x))
                    x = new
                    if done:
                        break
                out[i, k] = x
        return out

    def quantile(self, q: float) -> np.ndarray:
        return self.quantiles([q])[:, 0]


def mix_regression(
    weights: np.ndarray, means: np.ndarray, sigmas: np.ndarray, temperature: float = 1.0
) -> RegressionMixture:
    """Mix Gaussian experts ``N(means[:, j], (temperature * sigmas[j])**2)``.

    ``sigmas`` is (m,), or (n, m) when the spread varies by row.
    """
    return RegressionMixture(
        weights=np.asarray(weights, dtype=np.float64),
        means=np.asarray(means, dtype=np.float64),
        sigmas=np.asarray(sigmas, dtype=np.float64) * temperature,
    )


INTERVAL = 0.90


@dataclass(frozen=True)
class RegressionSummary:
    """A regression mixture in the target's original units."""

    mean: np.ndarray
    std: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    expert_means: np.ndarray  # (n, m)
    aleatoric: np.ndarray  # variances
    epistemic: np.ndarray
    total: np.ndarray


def summarise_regression(
    reg: RegressionMixture, y_mean: float, y_scale: float, interval: float = INTERVAL
) -> RegressionSummary:
    """Mean, std, central interval and variance split of ``reg`` in original units."""
    a, b = y_mean, y_scale
    tail = (1.0 - interval) / 2.0
    bounds = reg.quantiles([tail, 1.0 - tail])
    return RegressionSummary(
        mean=reg.mean * b + a,
        std=np.sqrt(reg.variance) * b,
        lower=bounds[:, 0] * b + a,
        upper=bounds[:, 1] * b + a,
        expert_means=reg.means * b + a,
        aleatoric=reg.aleatoric * b * b,
        epistemic=reg.epistemic * b * b,
        total=reg.variance * b * b,
    )
