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
# Up to this many (row, level) pairs, quantiles are solved in plain Python.
_SCALAR_QUANTILES = 8
_SQRT2 = np.sqrt(2.0)
_LOG_2PI = np.log(2.0 * np.pi)


def clip_proba(proba: np.ndarray, eps: float = PROBA_EPS) -> np.ndarray:
    """Clip probabilities to ``[eps, 1 - eps]`` and renormalise the last axis.

    kNN, forests and naive Bayes emit exact 0 and 1, and ``log 0`` would poison every
    likelihood downstream (docs/method.md, "Where the likelihoods come from").
    """
    p = np.clip(np.asarray(proba, dtype=np.float64), eps, 1.0 - eps)
    return p / p.sum(axis=-1, keepdims=True)


# Cephes (Moshier) rational approximations: erf on |x| < 1, erfc on [1, 8) and beyond.
_ERF_T = (
    9.60497373987051638749e0,
    9.00260197203842689217e1,
    2.23200534594684319226e3,
    7.00332514112805075473e3,
    5.55923013010394962768e4,
)
_ERF_U = (
    1.0,
    3.35617141647503099647e1,
    5.21357949780152679795e2,
    4.59432382970980127987e3,
    2.26290000613890934246e4,
    4.92673942608635921086e4,
)
_ERFC_P = (
    2.46196981473530512524e-10,
    5.64189564831068821977e-1,
    7.46321056442269912687e0,
    4.86371970985681366614e1,
    1.96520832956077098242e2,
    5.26445194995477358631e2,
    9.34528527171957607540e2,
    1.02755188689515710272e3,
    5.57535335369399327526e2,
)
_ERFC_Q = (
    1.0,
    1.32281951154744992508e1,
    8.67072140885989742329e1,
    3.54937778887819891062e2,
    9.75708501743205489753e2,
    1.82390916687909736289e3,
    2.24633760818710981792e3,
    1.65666309194161350182e3,
    5.57535340817727675546e2,
)
_ERFC_R = (
    5.64189583547755073984e-1,
    1.27536670759978104416e0,
    5.01905042251180477414e0,
    6.16021097993053585195e0,
    7.40974269950448939160e0,
    2.97886665372100240670e0,
)
_ERFC_S = (
    1.0,
    2.26052863220117276590e0,
    9.39603524938001434673e0,
    1.20489539808096656605e1,
    1.70814450747565897222e1,
    9.60896809063285878198e0,
    3.36907645100081516050e0,
)


def _stack(*polys: tuple[float, ...]) -> np.ndarray:
    """Coefficient rows, highest degree first, left-padded with zeros to one length."""
    width = max(len(c) for c in polys)
    return np.array([(0.0,) * (width - len(c)) + c for c in polys])[:, :, None]


# erf's T/U in x^2, erfc's P/Q and R/S in |x|: evaluated together, one Horner loop.
_COEFFS = _stack(_ERF_T, _ERF_U, _ERFC_P, _ERFC_Q, _ERFC_R, _ERFC_S)


def erfc(x: np.ndarray) -> np.ndarray:
    """Complementary error function, vectorised, within 1e-14 relative of ``math.erfc``.

    Cephes' rational approximations: erf on ``|x| < 1``, erfc on ``[1, 8)`` and beyond.
    The six polynomials run as one stacked Horner loop over every value, about twenty
    numpy calls whatever the size: the serving path has no scipy, and a Python call per
    element (``math.erfc``) cost milliseconds on a 1000-row batch.
    """
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1)
    a = np.abs(flat)
    args = np.stack([flat * flat, flat * flat, a, a, a, a])  # (6, n)
    acc = np.zeros_like(args)
    for k in range(_COEFFS.shape[1]):
        acc = acc * args + _COEFFS[:, k]
    t, u, p, q, r, s = acc
    with np.errstate(under="ignore", over="ignore", invalid="ignore", divide="ignore"):
        tail = np.exp(-a * a) * np.where(a < 8.0, p / q, r / s)
        out = np.where(a < 1.0, 1.0 - flat * t / u, np.where(flat < 0.0, 2.0 - tail, tail))
    return out.reshape(x.shape)


def normal_cdf(z: np.ndarray) -> np.ndarray:
    return 0.5 * erfc(-np.asarray(z, dtype=np.float64) / _SQRT2)


def gaussian_logpdf(y: np.ndarray, mean: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    z = (y - mean) / sigma
    return -0.5 * (_LOG_2PI + z * z) - np.log(sigma)


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
        return log_sum_exp(np.log(np.clip(self.weights, 1e-300, None)) + lp, axis=1)

    def pdf(self, y: np.ndarray) -> np.ndarray:
        """Density at ``y`` of shape (n, k): one column per point to evaluate."""
        z = (np.asarray(y, dtype=np.float64)[:, :, None] - self.means[:, None, :]) / self.sigmas
        dens = np.exp(-0.5 * z * z) / (self.sigmas * np.sqrt(2.0 * np.pi))
        return np.einsum("nm,nkm->nk", self.weights, dens)

    def _cdf_pdf(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """CDF and density at ``y`` (n, k), from one standardisation of ``y``."""
        z = (y[:, :, None] - self.means[:, None, :]) / self.sigmas
        dens = np.exp(-0.5 * z * z) / (self.sigmas * np.sqrt(2.0 * np.pi))
        cdf = 0.5 * erfc(-z / _SQRT2)
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
        per_expert = self.means[:, None, :] + self.sigmas * z  # (n, k, m)
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
        sigmas = self.sigmas.tolist()
        inv = [1.0 / (s * math.sqrt(2.0)) for s in sigmas]
        dens = [1.0 / (s * math.sqrt(2.0 * math.pi)) for s in sigmas]
        pad = 1e-3 * max(sigmas)
        out = np.empty((self.weights.shape[0], len(qs)))
        for i, (w, mu) in enumerate(zip(self.weights.tolist(), self.means.tolist(), strict=True)):
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
