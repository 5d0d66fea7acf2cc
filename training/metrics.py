"""Scores for mixtures and single experts (docs/method.md, "Metrics"). Every benchmark uses these.

Classification takes the full ``(n, C)`` probability matrix; binary output is two columns
``[1 - p, p]``, never the positive-class column alone.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr

from app.bundle.mixture import RegressionMixture, clip_proba
from training.errors import ParameterError


def _check_proba(proba: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(proba, dtype=np.float64)
    y = np.asarray(y)
    if p.ndim != 2 or p.shape[1] < 2:
        raise ParameterError("proba", p.shape, "must be (n, C) with C >= 2 columns")
    if p.shape[0] != y.shape[0]:
        raise ParameterError("y", y.shape, f"must have {p.shape[0]} rows like proba")
    return p, y.astype(np.int64)


def accuracy(proba: np.ndarray, y: np.ndarray) -> float:
    p, y = _check_proba(proba, y)
    return float(np.mean(p.argmax(axis=1) == y))


def expected_calibration_error(proba: np.ndarray, y: np.ndarray, n_bins: int = 15) -> float:
    """Top-label ECE (Guo et al. 2017): equal-width bins on ``(lo, hi]``, weighted by mass."""
    p, y = _check_proba(proba, y)
    conf = p.max(axis=1)
    correct = (p.argmax(axis=1) == y).astype(np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # right=True puts a confidence equal to an edge into the bin that edge closes: (lo, hi].
    bins = np.clip(np.digitize(conf, edges[1:-1], right=True), 0, n_bins - 1)
    ece = 0.0
    for b in range(n_bins):
        mask = bins == b
        if mask.any():
            ece += mask.mean() * abs(correct[mask].mean() - conf[mask].mean())
    return float(ece)


def reliability_bins(
    proba: np.ndarray, y: np.ndarray, n_bins: int = 15
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-bin mean confidence, accuracy and count, for reliability diagrams."""
    p, y = _check_proba(proba, y)
    conf = p.max(axis=1)
    correct = (p.argmax(axis=1) == y).astype(np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    bins = np.clip(np.digitize(conf, edges[1:-1], right=True), 0, n_bins - 1)
    counts = np.bincount(bins, minlength=n_bins)
    safe = np.maximum(counts, 1)
    return (
        np.bincount(bins, conf, n_bins) / safe,
        np.bincount(bins, correct, n_bins) / safe,
        counts,
    )


def log_loss(proba: np.ndarray, y: np.ndarray) -> float:
    p, y = _check_proba(proba, y)
    p = clip_proba(p)
    return float(-np.mean(np.log(p[np.arange(len(y)), y])))


def brier(proba: np.ndarray, y: np.ndarray) -> float:
    """Multiclass Brier score: mean over rows of ``sum_c (p_c - 1[y = c])^2``."""
    p, y = _check_proba(proba, y)
    onehot = np.eye(p.shape[1])[y]
    return float(np.mean(np.sum((p - onehot) ** 2, axis=1)))


def classification_scores(proba: np.ndarray, y: np.ndarray) -> dict[str, float]:
    return {
        "accuracy": accuracy(proba, y),
        "ece": expected_calibration_error(proba, y, 15),
        "ece10": expected_calibration_error(proba, y, 10),
        "nll": log_loss(proba, y),
        "brier": brier(proba, y),
    }


def _crps_term(mu: np.ndarray, var: np.ndarray) -> np.ndarray:
    """``A(mu, s^2) = E|X|`` for ``X ~ N(mu, s^2)``."""
    s = np.sqrt(var)
    z = mu / s
    return 2 * s * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi) + mu * (2 * ndtr(z) - 1)


def mixture_crps(mix: RegressionMixture, y: np.ndarray) -> np.ndarray:
    """Closed-form CRPS of a Gaussian mixture (Grimit et al. 2006), per row."""
    w, mu = mix.weights, mix.means
    s2 = np.broadcast_to(mix.sigmas**2, mu.shape)  # (m,) or per-row (n, m) spreads
    first = np.einsum("nm,nm->n", w, _crps_term(y[:, None] - mu, s2))
    dmu = mu[:, :, None] - mu[:, None, :]
    pair_var = s2[:, :, None] + s2[:, None, :]
    second = np.einsum("nj,nk,njk->n", w, w, _crps_term(dmu, np.broadcast_to(pair_var, dmu.shape)))
    return first - 0.5 * second


def regression_scores(
    mix: RegressionMixture, y_std: np.ndarray, scale: float, lower: np.ndarray, upper: np.ndarray
) -> dict[str, float]:
    """Scores in original units; ``y_std`` is the standardised target, ``scale`` its sd.

    ``lower``/``upper`` bound the central 90% interval in standardised units.
    """
    y_std = np.asarray(y_std, dtype=np.float64)
    resid = (mix.mean - y_std) * scale
    sst = np.sum((y_std - y_std.mean()) ** 2) * scale * scale
    return {
        "rmse": float(np.sqrt(np.mean(resid**2))),
        "r2": float(1.0 - np.sum(resid**2) / sst) if sst > 0 else float("nan"),
        "nll": float(np.mean(-mix.logpdf(y_std) + np.log(scale))),
        "crps": float(np.mean(mixture_crps(mix, y_std)) * scale),
        "coverage90": float(np.mean((y_std >= lower) & (y_std <= upper))),
    }
