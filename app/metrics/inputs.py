"""Input drift: the served inputs per feature and bin over a sliding window, against the
bundle's training rows (:mod:`app.bundle.reference`).

A request only appends its columns to a list (:meth:`InputWindow.observe`); the flush,
once a second, bins them all with a few numpy calls per feature, adds the out-of-range
and missing values to counters, and shares the window's counts as
``iabma_feature_window_rows`` (summed over live workers). A scrape adds them up and gives
each feature's PSI against training as ``iabma_feature_drift`` (docs/design.md, "Input
drift"). A bundle without a reference is watched as unavailable, not refused.
"""

from __future__ import annotations

import collections
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from app.bundle.manifest import Manifest
from app.bundle.reference import FeatureReference, bin_counts
from app.bundle.weight_bins import psi
from app.metrics.buffer import CounterBuffer, GaugeBuffer, Labels
from app.metrics.drift import SLICES
from app.metrics.families import MODEL_LABELS

WINDOW = "iabma_feature_window_rows"
DRIFT = "iabma_feature_drift"
_MAX_PENDING = 4096  # requests held for the next flush; more are counted at once


@cache
def input_families() -> dict[str, Any]:
    """The families of input drift, once per process (see :mod:`app.metrics.families`)."""
    import prometheus_client as prom

    labels = (*MODEL_LABELS, "feature")
    return {
        "window": prom.Gauge(
            WINDOW,
            "Rows served in the drift window (IABMA_DRIFT_WINDOW_SECONDS) by feature and bin "
            "(the bin's index in GET /drift), all live workers; iabma_feature_drift compares "
            "them with the training rows.",
            (*labels, "bin"),
            multiprocess_mode="livesum",
            registry=None,
        ),
        "out_of_range": prom.Counter(
            "iabma_out_of_range_total",
            "Served values of a numeric feature outside its training range.",
            labels,
            registry=None,
        ),
        "missing": prom.Counter(
            "iabma_missing_values_total",
            "Served missing values, per feature.",
            labels,
            registry=None,
        ),
        "unseen": prom.Counter(
            "iabma_unseen_levels_total",
            "Served values of a categorical feature that are no training level: refused "
            "(IABMA_UNKNOWN_CATEGORY=reject) or read as missing.",
            labels,
            registry=None,
        ),
        "constant": prom.Gauge(
            "iabma_gate_constant",
            "1 when the served gate gives every row the same weights (a pool): "
            "iabma_weight_drift cannot move; watch iabma_feature_drift and the realised NLL.",
            MODEL_LABELS,
            multiprocess_mode="livemax",
            registry=None,
        ),
    }


@dataclass
class Watched:
    """One served version's references and this worker's slices of counts."""

    features: tuple[FeatureReference, ...]
    missing_token: str
    unseen: Counter[str] | None = None  # the feature table's unseen levels, to drain
    map_unknown: bool = False  # an unseen level was served as missing
    slices: collections.deque[tuple[int, list[np.ndarray]]] = field(
        default_factory=collections.deque
    )

    def zeros(self) -> list[np.ndarray]:
        return [np.zeros(f.bins, dtype=np.int64) for f in self.features]


@dataclass(frozen=True)
class FeatureDrift:
    """One feature's window against training: rows, PSI (None under the minimum rows),
    the bins and both sides' counts."""

    feature: str
    kind: str
    rows: int
    psi: float | None
    bins: list[str]
    served: list[float]
    training: list[int]


class InputWindow:
    """This worker's served inputs over the last ``seconds``, per watched version."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.time) -> None:
        self.step = seconds / SLICES
        self.clock = clock
        self.watched: dict[Labels, Watched] = {}
        self.unavailable: set[Labels] = set()
        self._pending: list[tuple[Labels, Mapping[str, np.ndarray]]] = []
        self._shared: dict[Labels, int] = {}
        f = input_families()
        self.window_rows = GaugeBuffer(f["window"])
        self.out_of_range = CounterBuffer(f["out_of_range"])
        self.missing = CounterBuffer(f["missing"])
        self.constant = GaugeBuffer(f["constant"])
        self.unseen_levels = CounterBuffer(f["unseen"])

    def watch(self, labels: Labels, manifest: Manifest, table: Any = None) -> None:
        """Watch a served version's inputs; ``table`` (its FeatureTable) counts the
        unseen levels it meets."""
        from app.bundle.weight_bins import gate_constant

        self.constant.set(labels, float(gate_constant(manifest)))
        reference = manifest.input_reference
        if reference is None:
            self.unavailable.add(labels)
        elif labels not in self.watched:
            # Only what the features still are (a hand-edited manifest may differ).
            known = {(f.name, f.input) for f in manifest.features}
            refs = tuple(r for r in reference.features if (r.name, r.input) in known)
            self.watched[labels] = Watched(
                refs,
                manifest.missing_token,
                getattr(table, "unseen", None),
                bool(getattr(table, "map_unknown_to_missing", False)),
            )

    def observe(self, labels: Labels, columns: Mapping[str, np.ndarray]) -> None:
        """A durable prediction's columns, counted at the next flush."""
        if labels in self.watched:
            self._pending.append((labels, columns))
            if len(self._pending) >= _MAX_PENDING:
                self.count()

    def _current(self, w: Watched) -> list[np.ndarray]:
        slot = int(self.clock() // self.step)
        if not w.slices or w.slices[-1][0] != slot:
            w.slices.append((slot, w.zeros()))
        while w.slices[0][0] <= slot - SLICES:
            w.slices.popleft()
        return w.slices[-1][1]

    def count(self) -> None:
        """Bin every pending request's columns: a few numpy calls per feature and version."""
        pending, self._pending = self._pending, []
        grouped: dict[Labels, list[Mapping[str, np.ndarray]]] = {}
        for labels, columns in pending:
            grouped.setdefault(labels, []).append(columns)
        for labels, parts in grouped.items():
            w = self.watched[labels]
            counts = self._current(w)
            for k, ref in enumerate(w.features):
                col = [p[ref.input] for p in parts]
                values = col[0] if len(col) == 1 else np.concatenate(col)
                got = bin_counts(values, ref, w.missing_token)
                counts[k] += got
                key = (*labels, ref.name)
                if ref.kind == "numeric" and (outside := int(got[0] + got[-2])):
                    self.out_of_range.inc(key, outside)
                if got[-1]:
                    self.missing.inc(key, int(got[-1]))
        for labels, w in self.watched.items():
            self._drain_unseen(labels, w)

    def _drain_unseen(self, labels: Labels, w: Watched) -> None:
        """The unseen levels the feature table met since the last flush, into the unseen
        bin (out of the missing one where they were served as missing) and the counter."""
        if not w.unseen:
            return
        taken = dict(w.unseen)
        w.unseen.subtract(taken)  # what another thread adds meanwhile stays for next time
        counts = self._current(w)
        for k, ref in enumerate(w.features):
            n = taken.get(ref.name, 0)
            if ref.kind != "categorical" or n <= 0:
                continue
            counts[k][-2] += n
            if w.map_unknown:
                counts[k][-1] -= min(n, int(counts[k][-1]))
            self.unseen_levels.inc((*labels, ref.name), n)

    def flush(self) -> None:
        """Count what is pending and share this worker's window into the shared gauge."""
        self.count()
        for labels, w in self.watched.items():
            self._current(w)
            for k, ref in enumerate(w.features):
                total = np.sum([c[k] for _, c in w.slices], axis=0)
                for b, value in enumerate(total.tolist()):
                    key = (*labels, ref.name, str(b))
                    if self._shared.get(key) != value:  # a write only where a count moved
                        self._shared[key] = value
                        self.window_rows.set(key, float(value))
        buffers = (self.window_rows, self.out_of_range, self.missing, self.unseen_levels)
        for buffer in (*buffers, self.constant):
            buffer.flush()

    # -- at a scrape: the window of every live worker against training ------------------------
    def drift(self, merged: Any, min_rows: int) -> dict[Labels, list[FeatureDrift]]:
        """Per watched version, each feature's window (all workers) against training."""
        counts: dict[tuple[str, ...], dict[str, float]] = {}
        for sample in merged.samples if merged is not None else ():
            lab = sample.labels
            key = (lab["model_name"], lab["model_version"], lab["feature"])
            counts.setdefault(key, {})[lab["bin"]] = sample.value
        out: dict[Labels, list[FeatureDrift]] = {}
        for labels, w in self.watched.items():
            rows = out.setdefault(labels, [])
            for ref in w.features:
                found = counts.get((*labels, ref.name), {})
                served = [found.get(str(b), 0.0) for b in range(ref.bins)]
                n = int(sum(served))
                value = None
                if n >= min_rows:
                    value = float(psi(np.array(served), np.array(ref.counts)))
                rows.append(
                    FeatureDrift(ref.name, ref.kind, n, value, ref.bin_labels(), served, ref.counts)
                )
        return out

    def derive(self, families: Mapping[str, Any], min_rows: int) -> Iterator[Any]:
        """``iabma_feature_drift`` from the merged window counts of this scrape."""
        from prometheus_client.core import GaugeMetricFamily

        gauge = GaugeMetricFamily(
            DRIFT,
            "Population stability index of each feature's served values over the window "
            "(all live workers) against the training rows; reported from "
            "IABMA_DRIFT_MIN_ROWS rows on. Under 0.1 stable, over 0.25 a major shift.",
            labels=(*MODEL_LABELS, "feature"),
        )
        for labels, features in self.drift(families.get(WINDOW), min_rows).items():
            for d in features:
                if d.psi is not None:
                    gauge.add_metric([*labels, d.feature], d.psi)
        yield gauge
