"""What combiners learn from: the experts' out-of-fold behaviour on the training rows."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from app.bundle.mixture import clip_proba
from app.bundle.normal import gaussian_logpdf
from app.bundle.prior import EnergyScale, expert_energy, regression_energy_mc

Task = Literal["classification", "regression"]


@dataclass(frozen=True)
class Evidence:
    """Per-row, per-expert evidence. Every combiner sees the same instance.

    Attributes
    ----------
    y : class codes ``0..C-1`` (classification) or the standardised target (regression).
    log_lik : ``L[i, j] = log f_j(y_i | x_i)`` from clipped probabilities or Gaussians.
    proba : ``(n, m, C)`` clipped probabilities (classification only).
    means, sigmas : ``(n, m)`` standardised means and ``(m,)`` stds (regression only);
        ``sigmas`` is ``(n, m)`` when some experts give a per-row predictive sd.
    y_low, y_high : range of the standardised training target (regression only); the
        regression prior integrates over it.
    """

    task: Task
    y: np.ndarray
    log_lik: np.ndarray
    proba: np.ndarray | None = None
    means: np.ndarray | None = None
    sigmas: np.ndarray | None = None
    y_low: float = 0.0
    y_high: float = 0.0

    @property
    def n(self) -> int:
        return int(self.log_lik.shape[0])

    @property
    def m(self) -> int:
        return int(self.log_lik.shape[1])

    @property
    def correct(self) -> np.ndarray:
        """(n, m) bool: expert j's top class is y_i (classification)."""
        if self.proba is None:
            raise ValueError("correct is defined for classification evidence only")
        return self.proba.argmax(axis=2) == self.y[:, None]

    @property
    def sq_error(self) -> np.ndarray:
        """(n, m) squared error in standardised units (regression)."""
        if self.means is None:
            raise ValueError("sq_error is defined for regression evidence only")
        return (self.means - self.y[:, None]) ** 2

    def rows(self, idx: np.ndarray) -> Evidence:
        pick = lambda a: None if a is None else a[idx]  # noqa: E731
        return replace(
            self,
            y=self.y[idx],
            log_lik=self.log_lik[idx],
            proba=pick(self.proba),
            means=pick(self.means),
            sigmas=(
                pick(self.sigmas)
                if self.sigmas is not None and self.sigmas.ndim == 2
                else self.sigmas
            ),
        )


def classification_evidence(proba: np.ndarray, y: np.ndarray) -> Evidence:
    p = clip_proba(proba)
    codes = np.asarray(y, dtype=np.int64)
    log_lik = np.log(np.take_along_axis(p, codes[:, None, None], axis=2)[:, :, 0])
    return Evidence("classification", codes, log_lik, proba=p)


def regression_evidence(
    means: np.ndarray, y: np.ndarray, sigmas: np.ndarray, *, y_low: float, y_high: float
) -> Evidence:
    y = np.asarray(y, dtype=np.float64)
    means = np.asarray(means, dtype=np.float64)
    sigmas = np.asarray(sigmas, dtype=np.float64)
    log_lik = gaussian_logpdf(y[:, None], means, sigmas)
    return Evidence(
        "regression", y, log_lik, means=means, sigmas=sigmas, y_low=y_low, y_high=y_high
    )


def prior_energy(
    evidence: Evidence,
    *,
    energy_scale: EnergyScale = "unit",
    mc_samples: int | None = None,
    random_state: int = 0,
) -> np.ndarray:
    """``e_j(x_i)`` for every row: exact for classes, closed form or MC for regression.

    The maths is :mod:`app.bundle.prior`'s, which serving uses for new inputs.
    """
    lo, hi = evidence.y_low, evidence.y_high
    if evidence.proba is not None:
        return expert_energy(evidence.proba, None, energy_scale, lo, hi)
    assert evidence.means is not None and evidence.sigmas is not None
    if mc_samples:
        scale: np.ndarray | float = evidence.sigmas if energy_scale == "sigma" else 1.0
        return regression_energy_mc(evidence.means, scale, lo, hi, mc_samples, random_state)
    return expert_energy(evidence.means, evidence.sigmas, energy_scale, lo, hi)
