"""The adaptive prior of IA-BMA (paper §3.1, METHOD.md §1), on the training side.

Energies per point come from :mod:`app.bundle.prior` (shared with serving); this module
adds the Monte-Carlo variant and the reduction of the baseline ``B_j`` over the training
inputs, leaving out the point being scored.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from app.bundle.mixture import gaussian_logpdf
from app.bundle.prior import classification_energy, regression_energy, softmax
from training.errors import ParameterError

Reduction = Literal["mean", "sum"]

__all__ = [
    "baseline_for_new_inputs",
    "classification_energy",
    "log_prior_at_training_points",
    "loo_baseline",
    "regression_energy",
    "regression_energy_mc",
]


def regression_energy_mc(
    means: np.ndarray,
    scale: np.ndarray | float,
    low: float,
    high: float,
    mc_samples: int,
    random_state: int = 0,
) -> np.ndarray:
    """The paper's Monte-Carlo estimate: average ``log N(y_k; mu, s^2)``, ``y_k ~ U[low, high]``.

    The same ``y_k`` serve every point and expert, so the estimate is smooth in ``mu``.
    It converges to :func:`regression_energy` as ``mc_samples`` grows.
    """
    if int(mc_samples) < 1:
        raise ParameterError("mc_samples", mc_samples, "must be a positive integer")
    ys = np.random.default_rng(random_state).uniform(low, high, size=int(mc_samples))
    s = np.broadcast_to(np.asarray(scale, dtype=np.float64), means.shape[-1:])
    out = np.zeros_like(means, dtype=np.float64)
    for y in ys:  # a loop over samples keeps memory at O(n m) for any mc_samples
        out += gaussian_logpdf(y, means, s)
    return out / len(ys)


def _check_reduction(reduction: str) -> None:
    if reduction not in ("mean", "sum"):
        raise ParameterError("energy_reduction", reduction, "must be 'mean' or 'sum'")


def loo_baseline(energy: np.ndarray, reduction: Reduction) -> np.ndarray:
    """``B_j`` at each training point, reduced over the *other* training points.

    ``"mean"``: ``mean_{t != i} e_j(x_t)``, which keeps the prior adaptive.
    ``"sum"``: ``sum_{t != i} e_j(x_t)``, the paper read literally; then
    ``B_j + e_j(x_i) = sum_t e_j(x_t)`` is the same at every training point, so the prior
    does not adapt at all, and it grows with n until it is one-hot.
    """
    _check_reduction(reduction)
    n = energy.shape[0]
    if n < 2:
        raise ParameterError("n_samples", n, "must be at least 2 to leave one point out")
    total = energy.sum(axis=0, keepdims=True)
    others = total - energy
    return others / (n - 1) if reduction == "mean" else others


def baseline_for_new_inputs(energy: np.ndarray, reduction: Reduction) -> np.ndarray:
    """``B_j`` for an input that was not in training: every training point counts."""
    _check_reduction(reduction)
    return energy.mean(axis=0) if reduction == "mean" else energy.sum(axis=0)


def log_prior_at_training_points(
    energy: np.ndarray, reduction: Reduction, temperature: float
) -> np.ndarray:
    """``log softmax((B_j^{(-i)} + e_j(x_i)) / tau)`` for every training row."""
    if not temperature > 0:
        raise ParameterError("prior_temperature", temperature, "must be positive")
    p = softmax((loo_baseline(energy, reduction) + energy) / temperature)
    return np.log(np.clip(p, 1e-300, None))
