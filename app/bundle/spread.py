"""Per-row predictive spreads: the rule that turns an expert's own variance into its sd.

A regression expert may give, beside its mean, an output holding its per-row predictive
VARIANCE (docs/method.md, "Per-row variance"). Training (:mod:`training.experts.variance`)
and the fused graph (:mod:`training.export.spread`) apply the same rule, in standardised
units:

- a finite variance below ``SD_FLOOR ** 2`` (zero, negative, or tiny) is raised to it;
- a NaN or infinite variance is replaced by the expert's constant spread ``sigma_j``.

numpy only: the server imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The smallest sd a row may have, in standardised units (0.1% of the target's std). A
# model's variance can reach 0 where it interpolates its own training rows (a Gaussian
# process); left there, one such row's density would outweigh every other row's evidence.
SD_FLOOR = 1e-3


@dataclass(frozen=True)
class CleanSpread:
    """One expert's per-row sd after the rule, and how many rows the rule changed.

    Attributes
    ----------
    sd : ndarray of shape (n,)
        Standardised sds, all finite and at least ``SD_FLOOR``.
    floored : int
        Rows whose variance was below ``SD_FLOOR ** 2`` (zero or negative included).
    replaced : int
        Rows whose variance was NaN or infinite, given the constant spread instead.
    """

    sd: np.ndarray
    floored: int
    replaced: int


def clean_variance(variance: np.ndarray, fallback_sd: float) -> CleanSpread:
    """Apply the rule to one expert's standardised ``variance`` (n,).

    Parameters
    ----------
    variance : ndarray of shape (n,)
        The expert's predictive variance, already in standardised units.
    fallback_sd : float
        The expert's constant spread ``sigma_j``, used where the variance is not finite.
    """
    v = np.asarray(variance, dtype=np.float64)
    bad = ~np.isfinite(v)
    low = ~bad & (v < SD_FLOOR * SD_FLOOR)
    sd = np.sqrt(np.where(bad, fallback_sd * fallback_sd, np.maximum(v, SD_FLOOR * SD_FLOOR)))
    return CleanSpread(sd=sd, floored=int(low.sum()), replaced=int(bad.sum()))


def standardised_sds(expert_sds: np.ndarray, y_scale: float) -> np.ndarray:
    """The fused graph's ``expert_sds`` (n, m), target units, in standardised units."""
    return np.asarray(expert_sds, dtype=np.float64) / y_scale
