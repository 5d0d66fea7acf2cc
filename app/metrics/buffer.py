"""Per-process write buffers in front of prometheus_client's multiprocess values: updates
add into plain dicts on the event loop, and :meth:`flush` moves the sums into the shared
files once a second and before each scrape (docs/design.md, "Metrics")."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any

import numpy as np

Labels = tuple[str, ...]


class _Buffer:
    def __init__(self, family: Any) -> None:
        self.family = family
        self._children: dict[Labels, Any] = {}

    def child(self, labels: Labels) -> Any:
        c = self._children.get(labels)
        if c is None:
            c = self._children[labels] = self.family.labels(*labels)
        return c


class CounterBuffer(_Buffer):
    def __init__(self, family: Any) -> None:
        super().__init__(family)
        self.pending: dict[Labels, float] = {}

    def inc(self, labels: Labels, amount: float = 1.0) -> None:
        pending = self.pending
        pending[labels] = pending.get(labels, 0.0) + amount

    def flush(self) -> None:
        pending, self.pending = self.pending, {}
        for labels, amount in pending.items():
            self.child(labels).inc(amount)


class GaugeBuffer(_Buffer):
    def __init__(self, family: Any) -> None:
        super().__init__(family)
        self.pending: dict[Labels, float] = {}

    def set(self, labels: Labels, value: float) -> None:
        self.pending[labels] = value

    def flush(self) -> None:
        pending, self.pending = self.pending, {}
        for labels, value in pending.items():
            self.child(labels).set(value)


class SummaryBuffer(_Buffer):
    """Per label set: a count and a sum (a summary without quantiles), added at flush."""

    def __init__(self, family: Any) -> None:
        super().__init__(family)
        self.pending: dict[Labels, list[float]] = {}

    def observe_total(self, labels: Labels, count: int, total: float) -> None:
        """``count`` observations adding up to ``total``."""
        slot = self.pending.setdefault(labels, [0.0, 0.0])
        slot[0] += count
        slot[1] += total

    def flush(self) -> None:
        pending, self.pending = self.pending, {}
        for labels, (count, total) in pending.items():
            child = self.child(labels)
            # What observe() does once per value (prometheus_client has no bulk observe).
            child._count.inc(count)
            child._sum.inc(total)


class HistogramBuffer(_Buffer):
    """Per label set: counts per bucket (not cumulative) and the sum, added at flush;
    ``counted``: a counter with the same labels that counts every observation too, kept in
    the same slot rather than a second dict of its own."""

    def __init__(
        self, family: Any, buckets: Sequence[float], counted: CounterBuffer | None = None
    ) -> None:
        super().__init__(family)
        self.counted = counted
        self.bounds = (*buckets, float("inf"))
        self._edges = np.asarray(buckets, dtype=np.float64)
        self.pending: dict[Labels, list[Any]] = {}

    def _slot(self, labels: Labels) -> list[Any]:
        slot = self.pending.get(labels)
        if slot is None:
            slot = self.pending[labels] = [[0] * len(self.bounds), 0.0]
        return slot

    def observe(self, labels: Labels, value: float) -> None:
        slot = self._slot(labels)
        # prometheus_client's rule: a value goes to the first bucket with value <= bound.
        slot[0][bisect_left(self.bounds, value)] += 1
        slot[1] += value

    def observe_many(self, labels: Labels, values: np.ndarray) -> None:
        slot = self._slot(labels)
        idx = np.searchsorted(self._edges, values, side="left")
        for i, c in enumerate(np.bincount(idx, minlength=len(self.bounds)).tolist()):
            slot[0][i] += c
        slot[1] += float(np.sum(values))

    def flush(self) -> None:
        pending, self.pending = self.pending, {}
        for labels, (counts, total) in pending.items():
            child = self.child(labels)
            # prometheus_client has no bulk observe; its histogram child keeps one value per
            # bucket and one for the sum, and adding to them is what observe() does.
            # tests/app/test_prometheus_metrics.py checks both give the same exposition.
            for i, c in enumerate(counts):
                if c:
                    child._buckets[i].inc(c)
            child._sum.inc(total)
            if self.counted is not None:
                self.counted.child(labels).inc(sum(counts))
