"""The service's Prometheus metrics, shared by all worker processes of one server.

Names follow Prometheus conventions (``_total``, ``_seconds``) and every ``iabma_*``
series carries ``model_name`` and ``model_version``. Updates are buffered per process
(:mod:`app.metrics.buffer`) and written into prometheus_client's multiprocess files
(:mod:`app.metrics.multiprocess`); any worker's ``/metrics`` adds up every worker's files. The
exposition adds ``process_*`` per live worker (``pid`` label), ``python_gc_*`` summed
over workers, and ``python_info``.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from app.bundle.manifest import Manifest, WeightHistogram
from app.metrics.alerts import RealisedWindow
from app.metrics.buffer import (
    CounterBuffer,
    GaugeBuffer,
    HistogramBuffer,
    Labels,
    SummaryBuffer,
)
from app.metrics.drift import DriftCollector, WeightWindow
from app.metrics.families import (
    BATCH_BUCKETS,
    GRAPH_BUCKETS,
    LATENCY_BUCKETS,
    WEIGHT_BUCKETS,
    families,
)
from app.metrics.inputs import InputWindow
from app.metrics.multiprocess import multiprocess_dir
from app.metrics.workers import WorkerProcessCollector

FLUSH_SECONDS = 1.0
# The mixture's label among the experts' in iabma_realised_nll: no expert name starts with _.
MIXTURE = "_mixture"
_FEW_ROWS = 8
_MAX_PENDING = 4096  # predictions held for the next flush; more are counted at once
# The GC's counts are the process's, whichever app (tests build several) flushes them.
_GC_LOCK = threading.Lock()
_GC_SEEN = [[0, 0, 0] for _ in range(3)]


class ServiceMetrics:
    """Buffered families of one app; ``flush`` shares them, ``render`` exposes all workers."""

    def __init__(
        self,
        drift_window_seconds: float = 3600.0,
        drift_min_rows: int = 100,
        realised_window_rows: int = 500,
    ) -> None:
        from prometheus_client import CollectorRegistry, PlatformCollector
        from prometheus_client.multiprocess import MultiProcessCollector

        self.directory = multiprocess_dir()
        f = families()
        self.requests = CounterBuffer(f.requests)
        self.request_seconds = HistogramBuffer(f.request_seconds, LATENCY_BUCKETS, self.requests)
        self.rows = CounterBuffer(f.rows)
        self.graph_seconds = HistogramBuffer(f.graph_seconds, GRAPH_BUCKETS)
        self.batch_requests = HistogramBuffer(f.batch_requests, BATCH_BUCKETS)
        self.batch_waits = CounterBuffer(f.batch_waits)
        self.gate_weight = HistogramBuffer(f.gate_weight, WEIGHT_BUCKETS)
        self.audit_depth = GaugeBuffer(f.audit_depth)
        self.audit_commit_seconds = HistogramBuffer(f.audit_commit_seconds, LATENCY_BUCKETS)
        self.audit_records = CounterBuffer(f.audit_records)
        self.audit_failures = CounterBuffer(f.audit_failures)
        self.reloads = CounterBuffer(f.reloads)
        self.served = GaugeBuffer(f.served)
        self.refused = GaugeBuffer(f.refused)
        self.feedback = CounterBuffer(f.feedback)
        self.realised_nll = SummaryBuffer(f.realised_nll)
        self.window = WeightWindow(drift_window_seconds)
        self._predicted: list[tuple[Labels, str, Sequence[str], np.ndarray, float]] = []
        self.window_rows = GaugeBuffer(f.drift_window)
        self.inputs = InputWindow(drift_window_seconds)
        self.realised = RealisedWindow(realised_window_rows)
        self._buffers = (
            self.requests, self.request_seconds, self.rows, self.graph_seconds,
            self.batch_requests, self.batch_waits, self.gate_weight, self.audit_depth,
            self.audit_commit_seconds, self.audit_records, self.audit_failures, self.reloads,
            self.served, self.refused, self.feedback, self.realised_nll, self.window_rows,
        )  # fmt: skip
        self._gc = (f.gc_collections, f.gc_collected, f.gc_uncollectable)
        self.registry = CollectorRegistry(auto_describe=False)
        shared = MultiProcessCollector(None, path=str(self.directory))
        derived = (
            lambda fs: self.inputs.derive(fs, drift_min_rows),
            lambda fs: self.realised.derive(fs, drift_min_rows),
        )
        self.drift = DriftCollector(shared, self.window, drift_min_rows, derived)
        self.registry.register(self.drift)
        self.registry.register(WorkerProcessCollector(self.directory))
        PlatformCollector(registry=self.registry)

    # -- what the service records ------------------------------------------------------------
    def request_done(self, labels: Labels, seconds: float) -> None:
        """An answered request (model, version, route, method, status): its duration, and
        through the same slot its count in ``iabma_http_requests_total``."""
        self.request_seconds.observe(labels, seconds)

    def predicted(
        self,
        model: Labels,
        route: str,
        experts: Sequence[str],
        weights: np.ndarray,
        seconds: float,
    ) -> None:
        """A durable prediction: its rows, graph time and weights. Kept as it is until the
        next flush, which counts all of them at once: the weights of many single-row
        requests go through numpy once instead of a bisect per row and expert each."""
        self._predicted.append((model, route, experts, weights, seconds))
        if len(self._predicted) >= _MAX_PENDING:
            self._count_predictions()

    def _count_predictions(self) -> None:
        pending, self._predicted = self._predicted, []
        by_model: dict[tuple[Labels, Sequence[str]], list[np.ndarray]] = {}
        for model, route, experts, weights, seconds in pending:
            self.graph_seconds.observe((*model, "ensemble"), seconds)
            self.rows.inc((*model, route), weights.shape[0])
            by_model.setdefault((model, experts), []).append(weights)
        for (model, experts), parts in by_model.items():
            weights = parts[0] if len(parts) == 1 else np.concatenate(parts)
            self.observe_weights(model, experts, weights)

    def observe_graphs(self, model: Labels, timings: dict[str, float]) -> None:
        for graph, seconds in timings.items():
            self.graph_seconds.observe((*model, graph), seconds)

    def observe_batch(self, model: Labels, requests: int, waited: bool) -> None:
        self.batch_requests.observe(model, requests)
        if waited:
            self.batch_waits.inc(model)

    def observe_weights(self, model: Labels, experts: Sequence[str], weights: np.ndarray) -> None:
        self.window.observe(model, weights)
        if weights.shape[0] <= _FEW_ROWS:  # numpy's per-call cost exceeds a few bisects
            for row in weights.tolist():
                for expert, w in zip(experts, row, strict=True):
                    self.gate_weight.observe((*model, expert), w)
            return
        for j, expert in enumerate(experts):
            self.gate_weight.observe_many((*model, expert), weights[:, j])

    def observe_outcomes(self, model: Labels, experts: Sequence[str], nll: np.ndarray) -> None:
        """Accepted outcomes of rows ``model`` served: ``nll`` (k, 1 + m) holds each row's
        realised NLL, the mixture's then each expert's."""
        k = int(nll.shape[0])
        self.feedback.inc((*model, "accepted"), k)
        for name, total in zip((MIXTURE, *experts), nll.sum(axis=0).tolist(), strict=True):
            self.realised_nll.observe_total((*model, name), k, total)
        self.realised.observe(model, nll)

    def serving(
        self,
        model: Labels,
        previous: Labels | None,
        experts: Sequence[str] = (),
        histogram: WeightHistogram | None = None,
        manifest: Manifest | None = None,
        table: Any = None,
    ) -> None:
        """Mark ``model`` as this worker's served version (and ``previous`` as no longer);
        watch its weights for drift against ``histogram``, its training rows' weights, and
        its inputs against the ``manifest``'s reference."""
        if histogram is not None:
            self.window.watch(model, experts, histogram)
        if manifest is not None:
            self.inputs.watch(model, manifest, table)
            self.realised.watch(model, manifest)
        if previous is not None and previous != model:
            self.served.set(previous, 0)
        self.served.set(model, 1)
        self.refused.set(model, 0)

    # -- sharing and exposing ----------------------------------------------------------------
    def flush(self) -> None:
        """Move this process's buffered updates into the shared files (event loop thread)."""
        self._count_predictions()
        self.window.share(self.window_rows)
        self.inputs.flush()
        self.realised.flush()
        for buffer in self._buffers:
            buffer.flush()
        with _GC_LOCK:
            for generation, stats in enumerate(gc.get_stats()):
                seen = _GC_SEEN[generation]
                now = (stats["collections"], stats["collected"], stats["uncollectable"])
                for k, family in enumerate(self._gc):
                    if now[k] > seen[k]:
                        family.labels(str(generation)).inc(now[k] - seen[k])
                        seen[k] = now[k]

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """Every worker's metrics as text; OpenMetrics when ``accept`` asks for it."""
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    async def run_flusher(self, before: Callable[[], None] | None = None) -> None:
        """Flush once a second until cancelled, and once more when cancelled; ``before``
        refreshes gauges that are read rather than counted (the audit queue depth)."""
        try:
            while True:
                await asyncio.sleep(FLUSH_SECONDS)
                if before is not None:
                    before()
                self.flush()
        finally:
            self.flush()
