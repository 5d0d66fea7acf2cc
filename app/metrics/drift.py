"""Drift without labels: the gate's served weights over a sliding window, against the
weights it gave its training rows.

Each worker counts the weights it serves per expert and bin (:mod:`app.bundle.weight_bins`) in
slices of time and, at every flush, shares the counts of the slices still inside the
window as ``iabma_weight_window_rows`` (summed over live workers). A scrape adds them up
and gives each expert's population stability index against the bundle's training
histogram as ``iabma_weight_drift`` (docs/design.md, "Drift").
"""

from __future__ import annotations

import collections
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.bundle.manifest import WeightHistogram
from app.bundle.weight_bins import psi, weight_counts
from app.metrics.buffer import GaugeBuffer, Labels

SLICES = 60  # a window is this many slices; the oldest drops out as a new one starts
WINDOW = "iabma_weight_window_rows"
DRIFT = "iabma_weight_drift"
_FEW_ROWS = 8


def bin_label(edge: float) -> str:
    """A bin's label: its upper edge."""
    return f"{edge:g}"


@dataclass
class Watched:
    """One served version: its experts, bins, training counts, and this worker's slices."""

    experts: tuple[str, ...]
    edges: tuple[float, ...]
    reference: np.ndarray  # (m, B) training rows per expert and bin
    slices: collections.deque[tuple[int, np.ndarray]] = field(default_factory=collections.deque)

    @property
    def inner(self) -> tuple[float, ...]:
        return self.edges[1:-1]


class WeightWindow:
    """This worker's served weights over the last ``seconds``, per watched version."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.time) -> None:
        self.step = seconds / SLICES
        self.clock = clock
        self.watched: dict[Labels, Watched] = {}

    def watch(self, labels: Labels, experts: Sequence[str], histogram: WeightHistogram) -> None:
        if labels in self.watched:
            return
        reference = np.array([histogram.counts[e] for e in experts], dtype=np.float64)
        self.watched[labels] = Watched(tuple(experts), tuple(histogram.edges), reference)

    def _current(self, w: Watched) -> np.ndarray:
        slot = int(self.clock() // self.step)
        if not w.slices or w.slices[-1][0] != slot:
            w.slices.append((slot, np.zeros(w.reference.shape, dtype=np.int64)))
        while w.slices[0][0] <= slot - SLICES:
            w.slices.popleft()
        return w.slices[-1][1]

    def observe(self, labels: Labels, weights: np.ndarray) -> None:
        w = self.watched.get(labels)
        if w is None:
            return
        counts = self._current(w)
        if weights.shape[0] <= _FEW_ROWS:  # numpy's per-call cost exceeds a few bisects
            inner = w.inner
            for row in weights.tolist():
                for j, value in enumerate(row):
                    counts[j, bisect_right(inner, value)] += 1
            return
        counts += weight_counts(weights, w.edges)

    def totals(self) -> Iterator[tuple[Labels, Watched, np.ndarray]]:
        """Each watched version's counts over the slices inside the window."""
        for labels, w in self.watched.items():
            self._current(w)
            yield labels, w, np.sum([c for _, c in w.slices], axis=0)

    def share(self, gauge: GaugeBuffer) -> None:
        """Set this worker's window counts into the shared gauge."""
        for labels, w, counts in self.totals():
            for j, expert in enumerate(w.experts):
                for k, edge in enumerate(w.edges[1:]):
                    gauge.set((*labels, expert, bin_label(edge)), float(counts[j, k]))


@dataclass(frozen=True)
class Drift:
    """One expert's window against training: rows, PSI (None under the minimum rows), and
    both histograms."""

    rows: int
    psi: float | None
    served: list[float]
    training: list[float]
    edges: tuple[float, ...]


class DriftCollector:
    """prometheus_client's multiprocess collector, plus ``iabma_weight_drift`` computed
    from the window counts it has just added up."""

    def __init__(
        self,
        inner: Any,
        window: WeightWindow,
        min_rows: int,
        derived: Sequence[Callable[[dict[str, Any]], Iterator[Any]]] = (),
    ) -> None:
        self.inner = inner
        self.window = window
        self.min_rows = min_rows
        # Other families computed from the merged ones of the same scrape (input drift).
        self.derived = derived

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        merged = None
        seen: dict[str, Any] = {}
        for family in self.inner.collect():
            seen[family.name] = family
            if family.name == WINDOW:
                merged = family
            yield family
        gauge = GaugeMetricFamily(
            DRIFT,
            "Population stability index of each expert's gate weights over the window "
            "(all live workers) against the training rows; reported from "
            "IABMA_DRIFT_MIN_ROWS rows on. Under 0.1 stable, over 0.25 a major shift.",
            labels=("model_name", "model_version", "expert"),
        )
        for labels, experts in self.drift(merged).items():
            for expert, d in experts.items():
                if d.psi is not None:
                    gauge.add_metric([*labels, expert], d.psi)
        yield gauge
        for derive in self.derived:
            yield from derive(seen)

    def drift(self, merged: Any = None) -> dict[Labels, dict[str, Drift]]:
        """Per watched version and expert: the window (all workers) against training."""
        if merged is None:
            merged = next((f for f in self.inner.collect() if f.name == WINDOW), None)
        counts: dict[Labels, dict[str, float]] = {}
        for sample in merged.samples if merged is not None else ():
            lab = sample.labels
            key = (lab["model_name"], lab["model_version"], lab["expert"])
            counts.setdefault(key, {})[lab["bin"]] = sample.value
        out: dict[Labels, dict[str, Drift]] = {}
        for labels, w in self.window.watched.items():
            per = out.setdefault(labels, {})
            for j, expert in enumerate(w.experts):
                found = counts.get((*labels, expert), {})
                served = [found.get(bin_label(e), 0.0) for e in w.edges[1:]]
                rows = int(sum(served))
                value = None
                if rows >= self.min_rows:
                    value = float(psi(np.array(served), w.reference[j]))
                per[expert] = Drift(rows, value, served, w.reference[j].tolist(), w.edges)
        return out
