"""What every gate is scored and calibrated with: the mixture's per-row NLL, the mixture
temperature fitted on held-out rows, and stacking's linear pool (the plain gate the
network must beat, :mod:`training.combiners.guard`).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp, softmax

from app.bundle.mixture import (
    clip_proba,
    gaussian_logpdf,
    log_sum_exp,
    mix_classification,
    mix_regression,
)
from training.errors import ParameterError
from training.evidence import Evidence

#: The light L2 weight on the logits of the pool the network must beat.
POOL_PENALTY = 1e-4
TEMPERATURE_GRID = np.exp(np.linspace(np.log(0.25), np.log(4.0), 57))
STRIDE = 4


def row_nll(weights: np.ndarray, ev: Evidence, temperature: float) -> np.ndarray:
    """Per-row NLL of the mixture on the rows of ``ev``, after the mixture temperature."""
    if ev.proba is not None:
        p = mix_classification(weights, ev.proba, temperature).proba
        return -np.log(np.clip(p[np.arange(ev.n), ev.y], 1e-300, None))
    assert ev.means is not None and ev.sigmas is not None
    return -mix_regression(weights, ev.means, ev.sigmas, temperature).logpdf(ev.y)


def fit_temperature(weights: np.ndarray, ev: Evidence) -> float:
    """The temperature on a log grid (0.25 to 4) with the lowest held-out NLL.

    The grid is scored coarse (every ``STRIDE``-th point), then around the coarse best:
    the same answer as scoring every point wherever the NLL has one minimum in T, at a
    third of the cost (the gate's guard fits dozens of temperatures).
    """
    score = _class_nll_per_temperature if ev.proba is not None else _regression_nll_per_temperature
    coarse = np.arange(0, len(TEMPERATURE_GRID), STRIDE)
    nll = dict(zip(coarse, score(weights, ev, TEMPERATURE_GRID[coarse]), strict=True))
    best = min(nll, key=lambda i: nll[i])
    near = [
        i
        for i in range(best - STRIDE + 1, best + STRIDE)
        if 0 <= i < len(TEMPERATURE_GRID) and i not in nll
    ]
    if near:
        nll.update(zip(near, score(weights, ev, TEMPERATURE_GRID[near]), strict=True))
    return float(TEMPERATURE_GRID[min(nll, key=lambda i: (nll[i], i))])


def _regression_nll_per_temperature(
    weights: np.ndarray, ev: Evidence, temperatures: np.ndarray
) -> np.ndarray:
    """Mean :func:`row_nll` at each temperature, for regression: every sigma times T, so
    the standardised squared residuals are computed once and divided by ``T**2``."""
    assert ev.means is not None and ev.sigmas is not None
    sigmas = np.asarray(ev.sigmas, dtype=np.float64)
    r2 = np.square((np.asarray(ev.y, dtype=np.float64)[:, None] - ev.means) / sigmas)
    base = np.log(np.clip(np.asarray(weights, dtype=np.float64), 1e-300, None))
    base = base - np.log(sigmas) - 0.5 * np.log(2.0 * np.pi)
    out = np.empty(len(temperatures))
    for i, t in enumerate(temperatures):
        out[i] = np.log(t) - log_sum_exp(base - (0.5 / (t * t)) * r2, axis=1).mean()
    return out


def _class_nll_per_temperature(
    weights: np.ndarray, ev: Evidence, temperatures: np.ndarray
) -> np.ndarray:
    """Mean :func:`row_nll` at each temperature, for classification, from the true class
    alone: the tempered expert ``f~_jy = f_jy ** (1/T) / sum_c f_jc ** (1/T)`` needs no
    mixture over every class, nor its entropies."""
    assert ev.proba is not None
    log_p = np.log(clip_proba(ev.proba))  # (n, m, C)
    # f~_jy = 1 / sum_c exp((log f_jc - log f_jy) / T); the clip bounds the exponent.
    gap = log_p - log_p[np.arange(ev.n), :, ev.y][..., None]
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum(axis=1, keepdims=True)
    out = np.empty(len(temperatures))
    for i, t in enumerate(temperatures):
        tempered_y = 1.0 / np.exp(gap * (1.0 / t)).sum(axis=2)
        out[i] = -np.log(np.einsum("nm,nm->n", w, tempered_y)).mean()
    return out


def pooled_weights(L: np.ndarray, penalty: float, start: np.ndarray | None = None) -> np.ndarray:
    """Simplex weights ``softmax(b)`` maximising the mean log score minus
    ``penalty * |b|^2 / 2``: multinomial-logistic stacking of the experts' likelihoods,
    shrunk toward the uniform average as a ridge-penalised logistic meta-model is.
    ``start``: weights to start the search from (a nearby solution)."""
    m = L.shape[1]

    # The rows' likelihoods relative to their best expert, once: each evaluation is then
    # a product with the weights (scipy's logsumexp over every row cost most of the fit).
    top = L.max(axis=1, keepdims=True)
    f = np.exp(L - top)

    def objective(b: np.ndarray) -> tuple[float, np.ndarray]:
        log_w = b - logsumexp(b)
        w = np.exp(log_w)
        mix = f @ w  # sum_j w_j f_ij / max_j f_ij, at least min_j w_j
        score = np.log(mix).mean() + float(top.mean())
        resp = (f * w) / mix[:, None]
        grad = (w - resp.mean(axis=0)) + penalty * b
        return -float(score) + 0.5 * penalty * float(b @ b), grad

    b0 = np.zeros(m) if start is None else np.log(np.clip(start, 1e-12, None))
    res = minimize(objective, b0 - b0.mean(), jac=True, method="L-BFGS-B")
    return softmax(res.x)


def tempered_log_lik(ev: Evidence, temperature: float) -> np.ndarray:
    """``L[i, j]`` of the experts tempered as the mixture temperature tempers them:
    ``f_j ** (1/T)`` renormalised (classification), every sigma times T (regression)."""
    if ev.proba is not None:
        log_p = np.log(clip_proba(ev.proba)) / temperature
        log_p -= log_sum_exp(log_p, axis=2)[..., None]
        return log_p[np.arange(ev.n), :, ev.y]
    assert ev.means is not None and ev.sigmas is not None
    sigmas = np.asarray(ev.sigmas, dtype=np.float64) * temperature
    return gaussian_logpdf(np.asarray(ev.y, dtype=np.float64)[:, None], ev.means, sigmas)


def calibrated_pool(ev: Evidence, penalty: float, rounds: int = 2) -> tuple[np.ndarray, float]:
    """Stacking's pool and its mixture temperature, fitted together: the weights that
    maximise the log score of the tempered experts, then the temperature for those
    weights, in turn. Weights fitted at T = 1 and tempered afterwards are not the best
    pool at the temperature that ships (the tempered mixture is often much sharper)."""
    temperature = 1.0
    w = None
    for _ in range(rounds):
        w = pooled_weights(tempered_log_lik(ev, temperature), penalty, start=w)
        temperature = fit_temperature(np.broadcast_to(w, (ev.n, ev.m)), ev)
    assert w is not None
    return w, temperature


def fit_or_fixed_temperature(setting: object, weights: np.ndarray, ev: Evidence) -> float:
    """A combiner's ``temperature`` setting resolved: None is 1, ``"auto"`` is fitted on
    ``ev`` with ``weights`` (one vector, or one row per row of ``ev``)."""
    if setting is None:
        return 1.0
    if setting == "auto":
        return fit_temperature(np.broadcast_to(weights, (ev.n, ev.m)), ev)
    if isinstance(setting, (int, float)) and not isinstance(setting, bool) and setting > 0:
        return float(setting)
    raise ParameterError("temperature", setting, "must be a positive number, 'auto' or None")
