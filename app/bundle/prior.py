"""Energies of the adaptive prior (METHOD.md §1), shared by training and serving.

``E_j(x) = B_j + e_j(x)`` and ``prior(x) = softmax(E(x) / tau)``. Training reduces the
baseline ``B_j`` over its inputs; serving reads it from the manifest and needs only the
experts' outputs at ``x`` to report the prior for a new input.
"""

from __future__ import annotations

import numpy as np

from app.bundle.mixture import clip_proba

_LOG_2PI = np.log(2.0 * np.pi)


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


def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    z = z - z.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def prior_from_energy(energy: np.ndarray, baseline: np.ndarray, temperature: float) -> np.ndarray:
    """``softmax((B_j + e_j(x)) / tau)`` row by row; ``baseline`` is (m,) or (n, m)."""
    return softmax((np.asarray(baseline, dtype=np.float64) + energy) / temperature)
