"""Realised-performance alerts: the last outcomes' realised NLL, the mixture's and each
expert's, against the bundle's held-out reference, with a standard error.

Each worker keeps the NLL of its last ``IABMA_REALISED_WINDOW_ROWS`` accepted outcomes
and shares their count, sum and sum of squares as ``livesum`` gauges. A scrape adds them
up over live workers and gives, per expert and for the mixture (``_mixture``):
``iabma_realised_nll_excess`` (window mean less the held-out mean),
``iabma_realised_nll_excess_se`` (its standard error: the window's and the reference's,
in quadrature) and ``iabma_realised_nll_z`` (their ratio). The documented alert is
``z > ALERT_Z`` (deploy/prometheus/iabma-alerts.yml). A bundle without the reference
publishes none of them.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from app.bundle.manifest import Manifest
from app.bundle.reference import MIXTURE_KEY, PerformanceReference
from app.metrics.buffer import GaugeBuffer, Labels
from app.metrics.families import MODEL_LABELS

ALERT_Z = 3.0  # the window's NLL above the held-out one by this many standard errors
SUMS = ("rows", "sum", "sumsq")
WINDOW = "iabma_realised_window"


@cache
def alert_families() -> Any:
    """The window's shared sums, once per process (see :mod:`app.metrics.families`)."""
    import prometheus_client as prom

    return prom.Gauge(
        WINDOW,
        "The last IABMA_REALISED_WINDOW_ROWS accepted outcomes of each live worker: their "
        "rows, and the sum and sum of squares of their realised NLL (stat), per expert and "
        "for the mixture (_mixture).",
        (*MODEL_LABELS, "expert", "stat"),
        multiprocess_mode="livesum",
        registry=None,
    )


@dataclass
class Watched:
    reference: PerformanceReference
    names: tuple[str, ...]  # the mixture, then the experts, as the NLL columns come
    rows: collections.deque[np.ndarray] = field(default_factory=collections.deque)
    held: int = 0


@dataclass(frozen=True)
class Excess:
    """One series' window against the held-out reference."""

    rows: int
    mean: float
    reference: float
    excess: float
    se: float

    @property
    def z(self) -> float:
        return self.excess / self.se if self.se > 0 else 0.0


class RealisedWindow:
    """This worker's last ``rows`` outcomes' realised NLL, per watched version."""

    def __init__(self, rows: int = 500) -> None:
        self.size = rows
        self.watched: dict[Labels, Watched] = {}
        self.gauge = GaugeBuffer(alert_families())
        self._shared: dict[Labels, float] = {}

    def watch(self, labels: Labels, manifest: Manifest) -> None:
        reference = manifest.performance_reference
        if reference is not None and labels not in self.watched:
            names = (MIXTURE_KEY, *manifest.expert_names)
            self.watched[labels] = Watched(reference, names)

    def observe(self, labels: Labels, nll: np.ndarray) -> None:
        """Accepted outcomes' NLL (k, 1 + m): the mixture's, then each expert's."""
        w = self.watched.get(labels)
        if w is None:
            return
        w.rows.append(np.asarray(nll, dtype=np.float64))
        w.held += len(nll)
        while w.held - len(w.rows[0]) >= self.size:
            w.held -= len(w.rows.popleft())

    def flush(self) -> None:
        for labels, w in self.watched.items():
            if not w.rows:
                continue
            x = np.concatenate(list(w.rows))[-self.size :]
            sums = (np.full(x.shape[1], float(len(x))), x.sum(axis=0), (x * x).sum(axis=0))
            for j, name in enumerate(w.names):
                for stat, values in zip(SUMS, sums, strict=True):
                    key = (*labels, name, stat)
                    value = float(values[j])
                    if self._shared.get(key) != value:
                        self._shared[key] = value
                        self.gauge.set(key, value)
        self.gauge.flush()

    def excess(self, merged: Any, min_rows: int) -> dict[Labels, dict[str, Excess]]:
        """Per watched version and series: the window of every live worker against the
        reference, from ``min_rows`` rows on."""
        sums: dict[tuple[str, ...], dict[str, float]] = {}
        for sample in merged.samples if merged is not None else ():
            lab = sample.labels
            key = (lab["model_name"], lab["model_version"], lab["expert"])
            sums.setdefault(key, {})[lab["stat"]] = sample.value
        out: dict[Labels, dict[str, Excess]] = {}
        for labels, w in self.watched.items():
            per = out.setdefault(labels, {})
            for name in w.names:
                got = sums.get((*labels, name), {})
                n = got.get("rows", 0.0)
                ref = w.reference.nll.get(name)
                if n < max(min_rows, 2) or ref is None:
                    continue
                mean = got.get("sum", 0.0) / n
                var = max(got.get("sumsq", 0.0) / n - mean * mean, 0.0) * n / (n - 1)
                se = math.sqrt(var / n + ref.sd**2 / w.reference.rows)
                per[name] = Excess(int(n), mean, ref.mean, mean - ref.mean, se)
        return out

    def derive(self, families: Mapping[str, Any], min_rows: int) -> Iterator[Any]:
        """The three alert gauges from the merged window sums of this scrape."""
        from prometheus_client.core import GaugeMetricFamily

        labels = (*MODEL_LABELS, "expert")
        made: Sequence[tuple[str, str]] = (
            ("iabma_realised_nll_excess", "Realised NLL over the window less the held-out NLL."),
            (
                "iabma_realised_nll_excess_se",
                "Standard error of iabma_realised_nll_excess (window and reference).",
            ),
            (
                "iabma_realised_nll_z",
                f"iabma_realised_nll_excess in standard errors; alert above {ALERT_Z:g}.",
            ),
        )
        gauges = [GaugeMetricFamily(name, doc, labels=labels) for name, doc in made]
        for model, per in self.excess(families.get(WINDOW), min_rows).items():
            for name, e in per.items():
                for gauge, value in zip(gauges, (e.excess, e.se, e.z), strict=True):
                    gauge.add_metric([*model, name], value)
        yield from gauges
