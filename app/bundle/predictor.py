"""Run an opened bundle on a batch of raw columns: gate, experts, mixture, prior.

One onnxruntime call per graph per batch. The HTTP layer and the parity tests both go
through :class:`BundlePredictor`, so what is tested is what is served.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from app.bundle.columns import feed
from app.bundle.loader import OpenedBundle
from app.bundle.mixture import (
    ClassMixture,
    RegressionMixture,
    clip_proba,
    mix_classification,
    mix_regression,
)
from app.bundle.prior import classification_energy, prior_from_energy, regression_energy

INTERVAL = 0.90


@dataclass(frozen=True)
class BatchPrediction:
    weights: np.ndarray  # (n, m)
    classes: ClassMixture | None = None
    expert_proba: np.ndarray | None = None  # (n, m, C), clipped
    regression: RegressionMixture | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds per graph

    @property
    def n(self) -> int:
        return int(self.weights.shape[0])


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


class BundlePredictor:
    """Stateless apart from the sessions; safe to call from several threads."""

    def __init__(self, bundle: OpenedBundle) -> None:
        self.bundle = bundle
        self.manifest = bundle.manifest
        target = self.manifest.target
        self._y_mean = float(target.mean or 0.0)
        self._y_scale = float(target.scale or 1.0)

    def gate_weights(self, columns: Mapping[str, np.ndarray]) -> tuple[np.ndarray, float]:
        gate = self.manifest.gate
        t0 = time.perf_counter()
        (w,) = self.bundle.gate.run([gate.output], feed(columns, gate.inputs))
        w = np.asarray(w, dtype=np.float64)
        # float32 softmax rows can sum to 1 +- 1e-7; renormalise so they are a distribution.
        return w / w.sum(axis=1, keepdims=True), time.perf_counter() - t0

    def expert_outputs(
        self, columns: Mapping[str, np.ndarray]
    ) -> tuple[np.ndarray, dict[str, float]]:
        """(n, m, C) clipped probabilities, or (n, m) means in standardised units."""
        outs, timings = [], {}
        for entry in self.manifest.experts:
            t0 = time.perf_counter()
            (out,) = self.bundle.experts[entry.name].run(
                [entry.output], feed(columns, entry.inputs)
            )
            timings[entry.name] = time.perf_counter() - t0
            out = np.asarray(out, dtype=np.float64)
            if self.manifest.task == "regression":
                out = out.reshape(-1)
                if entry.output_units == "original":
                    out = (out - self._y_mean) / self._y_scale
            outs.append(out)
        stacked = np.stack(outs, axis=1)
        if self.manifest.task == "classification":
            stacked = clip_proba(stacked)
        return stacked, timings

    def sigmas(self) -> np.ndarray:
        return np.array([e.sigma for e in self.manifest.experts], dtype=np.float64)

    def predict(self, columns: Mapping[str, np.ndarray]) -> BatchPrediction:
        weights, gate_seconds = self.gate_weights(columns)
        outputs, timings = self.expert_outputs(columns)
        timings["gate"] = gate_seconds
        temperature = self.manifest.mixture.temperature
        if self.manifest.task == "classification":
            mixture = mix_classification(weights, outputs, temperature)
            return BatchPrediction(
                weights=weights, classes=mixture, expert_proba=outputs, timings=timings
            )
        reg = mix_regression(weights, outputs, self.sigmas(), temperature)
        return BatchPrediction(weights=weights, regression=reg, timings=timings)

    def summarise_regression(self, pred: BatchPrediction) -> RegressionSummary:
        if pred.regression is None:
            raise ValueError("summarise_regression needs a regression prediction")
        return summarise_regression(pred.regression, self._y_mean, self._y_scale)

    def prior(self, pred: BatchPrediction) -> np.ndarray | None:
        """The adaptive prior at these inputs, if the bundle's gate is IA-BMA's."""
        spec = self.manifest.gate.prior
        if spec is None:
            return None
        if pred.expert_proba is not None:
            energy = classification_energy(pred.expert_proba)
        else:
            assert pred.regression is not None
            scale = self.sigmas() if spec.energy_scale == "sigma" else 1.0
            t = self.manifest.target
            energy = regression_energy(pred.regression.means, scale, t.low or 0.0, t.high or 0.0)
        return prior_from_energy(energy, np.asarray(spec.baseline), spec.temperature)
