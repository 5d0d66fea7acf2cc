"""Run an opened bundle on a batch of raw columns: one call of the fused graph.

``ensemble.onnx`` computes the weights, every expert, the mixture and its uncertainty;
numpy adds only the regression interval, which needs a root-finder. The HTTP layer, the
parity tests and ``iabma check`` all go through :class:`BundlePredictor`, so what is
tested is what is served.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from app.bundle.loader import OpenedBundle
from app.bundle.mixture import INTERVAL, RegressionMixture, mix_regression
from app.bundle.prior import expert_energy, prior_from_energy
from app.bundle.spread import standardised_sds

SPREAD_OUTPUT = "expert_sds"  # the fused graph's per-row expert sds (training.export.spread)

CHUNK_ROWS = 512


@dataclass(frozen=True)
class Prediction:
    """One batch's answer, as arrays; regression values are in the target's units."""

    weights: np.ndarray  # (n, m)
    uncertainty: np.ndarray  # (n, 4): total, aleatoric, epistemic, selection
    seconds: float  # the graph's run time
    proba: np.ndarray | None = None  # classification: (n, C)
    expert_proba: np.ndarray | None = None  # (n, m, C), clipped
    mean: np.ndarray | None = None  # regression: (n,)
    std: np.ndarray | None = None  # (n,)
    interval: np.ndarray | None = None  # (n, 2), central INTERVAL
    expert_means: np.ndarray | None = None  # (n, m)
    # (n, m) each expert's own sd, target units; only where some give a per-row variance
    expert_sds: np.ndarray | None = None
    finite: bool = False  # every value above is finite (checked once per graph run)

    @property
    def n(self) -> int:
        return int(self.weights.shape[0])

    @property
    def label_index(self) -> np.ndarray:
        assert self.proba is not None
        return self.proba.argmax(axis=1)

    def rows(self, idx: np.ndarray | slice) -> Prediction:
        """The same answer for a subset of the rows."""
        pick = lambda a: None if a is None else a[idx]  # noqa: E731
        return Prediction(
            weights=self.weights[idx],
            uncertainty=self.uncertainty[idx],
            seconds=self.seconds,
            proba=pick(self.proba),
            expert_proba=pick(self.expert_proba),
            mean=pick(self.mean),
            std=pick(self.std),
            interval=pick(self.interval),
            expert_means=pick(self.expert_means),
            expert_sds=pick(self.expert_sds),
            finite=self.finite,
        )

    @classmethod
    def joined(cls, parts: list[Prediction]) -> Prediction:
        """The answers of consecutive runs as one, their rows in order."""
        if len(parts) == 1:
            return parts[0]
        join = lambda name: (  # noqa: E731
            None if getattr(parts[0], name) is None
            else np.concatenate([getattr(p, name) for p in parts])
        )  # fmt: skip
        return cls(
            weights=np.concatenate([p.weights for p in parts]),
            uncertainty=np.concatenate([p.uncertainty for p in parts]),
            seconds=sum(p.seconds for p in parts),
            proba=join("proba"),
            expert_proba=join("expert_proba"),
            mean=join("mean"),
            std=join("std"),
            interval=join("interval"),
            expert_means=join("expert_means"),
            expert_sds=join("expert_sds"),
            finite=all(p.finite for p in parts),
        )


class BundlePredictor:
    """Stateless apart from the session; safe to call from several threads."""

    def __init__(self, bundle: OpenedBundle, chunk_rows: int = CHUNK_ROWS) -> None:
        self.bundle = bundle
        self.chunk_rows = chunk_rows
        self.manifest = bundle.manifest
        target = self.manifest.target
        self._y_mean = float(target.mean or 0.0)
        self._y_scale = float(target.scale or 1.0)
        self._outputs = list(self.manifest.ensemble.outputs)
        self._inputs = [i.name for i in bundle.session.get_inputs()]
        self._sigmas = np.array([e.sigma or 1.0 for e in self.manifest.experts], dtype=np.float64)

    def run(self, columns: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], float]:
        """The graph's named outputs for these columns, and the seconds it took.

        Batches beyond ``chunk_rows`` run in chunks: onnxruntime's arena keeps the largest
        buffers it ever needed, and a kNN expert's distance matrix grows with the rows (66
        MB for 1000 rows of california), so chunks bound the memory at no speed cost.
        """
        t0 = time.perf_counter()
        n = len(next(iter(columns.values())))
        if n <= self.chunk_rows:
            values = self.bundle.session.run(self._outputs, self._feed(columns, slice(None)))
        else:
            parts = [
                self.bundle.session.run(
                    self._outputs, self._feed(columns, slice(start, start + self.chunk_rows))
                )
                for start in range(0, n, self.chunk_rows)
            ]
            values = [np.concatenate(chunks) for chunks in zip(*parts, strict=True)]
        return dict(zip(self._outputs, values, strict=True)), time.perf_counter() - t0

    def _feed(self, columns: Mapping[str, np.ndarray], rows: slice) -> dict[str, np.ndarray]:
        return {name: columns[name][rows] for name in self._inputs}

    def predict(self, columns: Mapping[str, np.ndarray], interval: bool = True) -> Prediction:
        out, seconds = self.run(columns)
        finite = all(np.isfinite(v).all() for v in out.values())
        if self.manifest.task == "classification":
            return Prediction(
                weights=out["weights"],
                uncertainty=out["uncertainty"],
                seconds=seconds,
                proba=out["probabilities"],
                expert_proba=out["expert_probabilities"],
                finite=finite,
            )
        bounds = None
        sds = out.get(SPREAD_OUTPUT)
        if interval:
            bounds = self.interval(out["weights"], out["expert_means"], sds)
            finite = finite and bool(np.isfinite(bounds).all())
        return Prediction(
            weights=out["weights"],
            uncertainty=out["uncertainty"],
            seconds=seconds,
            mean=out["mean"],
            std=out["std"],
            interval=bounds,
            expert_means=out["expert_means"],
            expert_sds=sds,
            finite=finite,
        )

    def sigmas(self, expert_sds: np.ndarray | None = None) -> np.ndarray:
        """The experts' standardised sds: per row (n, m) from the graph's ``expert_sds``
        where the bundle has them, else the manifest's constant (m,)."""
        if expert_sds is None:
            return self._sigmas
        return standardised_sds(expert_sds, self._y_scale)

    def mixture(
        self, weights: np.ndarray, expert_means: np.ndarray, expert_sds: np.ndarray | None = None
    ) -> RegressionMixture:
        """The regression mixture in standardised units, after the temperature."""
        standardised = (expert_means - self._y_mean) / self._y_scale
        return mix_regression(
            weights, standardised, self.sigmas(expert_sds), self.manifest.mixture.temperature
        )

    def interval(
        self, weights: np.ndarray, expert_means: np.ndarray, expert_sds: np.ndarray | None = None
    ) -> np.ndarray:
        tail = (1.0 - INTERVAL) / 2.0
        bounds = self.mixture(weights, expert_means, expert_sds).quantiles([tail, 1.0 - tail])
        return bounds * self._y_scale + self._y_mean

    def gate_weights(self, columns: Mapping[str, np.ndarray]) -> tuple[np.ndarray, float]:
        out, seconds = self.run(columns)
        return out["weights"], seconds

    def prior(self, pred: Prediction) -> np.ndarray | None:
        """The adaptive prior at these inputs, if the bundle's gate is IA-BMA's."""
        spec = self.manifest.gate.prior
        if spec is None:
            return None
        if pred.expert_proba is not None:
            outputs = pred.expert_proba
        else:
            assert pred.expert_means is not None
            outputs = (pred.expert_means - self._y_mean) / self._y_scale
        t = self.manifest.target
        energy = expert_energy(
            outputs, self.sigmas(pred.expert_sds), spec.energy_scale, t.low or 0.0, t.high or 0.0
        )
        return prior_from_energy(energy, np.asarray(spec.baseline), spec.temperature)
