"""The adaptive prior's maths (docs/method.md, "The adaptive prior"), shared by training
and serving.

``E_j(x) = B_j + e_j(x)`` and ``prior(x) = softmax(E(x) / tau)``. Training reduces the
baseline ``B_j`` over its inputs, leaving out the point being scored; serving reads it
from the manifest and needs only the experts' outputs at ``x`` to report the prior for a
new input. numpy only: importing this module loads no runtime.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from app.bundle.mixture import clip_proba
from app.bundle.normal import gaussian_logpdf

_LOG_2PI = np.log(2.0 * np.pi)

Reduction = Literal["mean", "sum"]
EnergyScale = Literal["unit", "sigma"]


def classification_energy(proba: np.ndarray) -> np.ndarray:
    """``e_j(x) = sum_c log f_j(c|x)`` for clipped probabilities ``proba`` (n, m, C)."""
    return np.log(clip_proba(proba)).sum(axis=-1)


def regression_energy(
    means: np.ndarray, scale: np.ndarray | float, low: float, high: float
) -> np.ndarray:
    """``E_{y~U[low,high]} log N(y; mu, s^2)`` in closed form.

    ``-0.5 log(2 pi s^2) - ((mu - c)^2 + w^2 / 12) / (2 s^2)`` with ``c`` the midpoint and
    ``w`` the width of the range. ``scale`` is ``s``: 1 by default (the paper's choice), or
    each expert's sigma.
    """
    s = np.asarray(scale, dtype=np.float64)
    c = 0.5 * (low + high)
    w = high - low
    return -0.5 * (_LOG_2PI + 2.0 * np.log(s)) - ((means - c) ** 2 + w * w / 12.0) / (2.0 * s * s)


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
        raise ValueError(f"mc_samples={mc_samples!r} must be a positive integer")
    ys = np.random.default_rng(random_state).uniform(low, high, size=int(mc_samples))
    s = np.broadcast_to(np.asarray(scale, dtype=np.float64), means.shape)
    out = np.zeros_like(means, dtype=np.float64)
    for y in ys:  # a loop over samples keeps memory at O(n m) for any mc_samples
        out += gaussian_logpdf(y, means, s)
    return out / len(ys)


def expert_energy(
    outputs: np.ndarray,
    sigmas: np.ndarray | None,
    energy_scale: EnergyScale,
    low: float,
    high: float,
) -> np.ndarray:
    """``e_j(x)`` from the experts' outputs at ``x``, exactly (closed form for regression).

    ``outputs`` are ``(n, m, C)`` probabilities or ``(n, m)`` means in standardised units;
    ``sigmas``, ``low`` and ``high`` (the standardised training target's range) matter for
    regression only, ``sigmas`` only with ``energy_scale="sigma"``.
    """
    if outputs.ndim == 3:
        return classification_energy(outputs)
    if energy_scale == "sigma":
        if sigmas is None:
            raise ValueError("energy_scale='sigma' needs the experts' sigmas")
        return regression_energy(outputs, sigmas, low, high)
    return regression_energy(outputs, 1.0, low, high)


def _check_reduction(reduction: str) -> None:
    if reduction not in ("mean", "sum"):
        raise ValueError(f"energy_reduction={reduction!r} must be 'mean' or 'sum'")


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
        raise ValueError(f"n_samples={n} must be at least 2 to leave one point out")
    total = energy.sum(axis=0, keepdims=True)
    others = total - energy
    return others / (n - 1) if reduction == "mean" else others


def baseline_for_new_inputs(energy: np.ndarray, reduction: Reduction) -> np.ndarray:
    """``B_j`` for an input that was not in training: every training point counts."""
    _check_reduction(reduction)
    return energy.mean(axis=0) if reduction == "mean" else energy.sum(axis=0)


def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def prior_from_energy(energy: np.ndarray, baseline: np.ndarray, temperature: float) -> np.ndarray:
    """``softmax((B_j + e_j(x)) / tau)`` row by row; ``baseline`` is (m,) or (n, m)."""
    return softmax((np.asarray(baseline, dtype=np.float64) + energy) / temperature)


def log_prior_at_training_points(
    energy: np.ndarray, reduction: Reduction, temperature: float
) -> np.ndarray:
    """``log softmax((B_j^{(-i)} + e_j(x_i)) / tau)`` for every training row."""
    if not temperature > 0:
        raise ValueError(f"prior_temperature={temperature!r} must be positive")
    p = softmax((loo_baseline(energy, reduction) + energy) / temperature)
    return np.log(np.clip(p, 1e-300, None))
