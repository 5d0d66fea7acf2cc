"""Prometheus metrics without prometheus_client: counters, gauges, histograms, text format.

Every series carries ``model_name`` and ``model_version``. All updates happen on the event
loop thread, so no locks are needed. Each uvicorn worker process keeps its own numbers,
as with any Prometheus client that is not in multiprocess mode.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

import numpy as np

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
GRAPH_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5,
)  # fmt: skip
WEIGHT_BUCKETS = tuple(round(0.1 * k, 1) for k in range(1, 11))
MODEL_LABELS = ("model_name", "model_version")
_FEW_ROWS = 8
Labels = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return repr(int(value)) if float(value).is_integer() else repr(float(value))


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.help = help_text
        self.labelnames = (*MODEL_LABELS, *labelnames)

    def _labels(self, values: Labels, extra: str = "") -> str:
        pairs = [f'{k}="{_escape(v)}"' for k, v in zip(self.labelnames, values, strict=True)]
        if extra:
            pairs.append(extra)
        return "{" + ",".join(pairs) + "}"

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    def samples(self) -> list[str]:
        raise TypeError  # pragma: no cover - every subclass overrides

    def render(self) -> list[str]:
        return [*self.header(), *self.samples()]


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labelnames)
        self.values: dict[Labels, float] = {}

    def inc(self, labels: Labels, amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def samples(self) -> list[str]:
        return [f"{self.name}{self._labels(k)} {_number(v)}" for k, v in self.values.items()]


class Gauge(Counter):
    kind = "gauge"

    def set(self, labels: Labels, value: float) -> None:
        self.values[labels] = value


class Histogram(_Metric):
    kind = "histogram"

    def __init__(
        self, name: str, help_text: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        super().__init__(name, help_text, labelnames)
        self.buckets = (*buckets, float("inf"))
        self._edges = np.asarray(buckets, dtype=np.float64)
        # per label set: [per-bucket counts (not cumulative), sum, count]
        self.values: dict[Labels, list] = {}

    def _slot(self, labels: Labels) -> list:
        slot = self.values.get(labels)
        if slot is None:
            slot = self.values[labels] = [[0] * len(self.buckets), 0.0, 0]
        return slot

    def observe(self, labels: Labels, value: float) -> None:
        slot = self._slot(labels)
        slot[0][bisect_left(self.buckets, value)] += 1
        slot[1] += value
        slot[2] += 1

    def observe_many(self, labels: Labels, values: np.ndarray) -> None:
        slot = self._slot(labels)
        idx = np.searchsorted(self._edges, values, side="left")
        for i, c in enumerate(np.bincount(idx, minlength=len(self.buckets)).tolist()):
            slot[0][i] += c
        slot[1] += float(np.sum(values))
        slot[2] += int(values.size)

    def samples(self) -> list[str]:
        out = []
        for labels, (counts, total, count) in self.values.items():
            running = 0
            for le, c in zip(self.buckets, counts, strict=True):
                running += c
                bound = 'le="' + _number(le) + '"'
                out.append(f"{self.name}_bucket{self._labels(labels, bound)} {running}")
            out.append(f"{self.name}_sum{self._labels(labels)} {_number(total)}")
            out.append(f"{self.name}_count{self._labels(labels)} {count}")
        return out


class ServiceMetrics:
    """The service's metrics, named by Prometheus conventions (``_total``, ``_seconds``)."""

    def __init__(self) -> None:
        self.requests = Counter(
            "iabma_http_requests_total", "HTTP requests answered.", ("route", "method", "status")
        )
        self.request_seconds = Histogram(
            "iabma_http_request_duration_seconds",
            "Time from request to the end of the response.",
            ("route", "method", "status"),
            LATENCY_BUCKETS,
        )
        self.rows = Counter("iabma_predicted_rows_total", "Rows predicted.", ("route",))
        self.graph_seconds = Histogram(
            "iabma_inference_duration_seconds",
            "onnxruntime time per batch and graph (an expert's name, or gate).",
            ("graph",),
            GRAPH_BUCKETS,
        )
        self.gate_weight = Histogram(
            "iabma_gate_weight", "Gate weight of each expert per predicted row.", ("expert",),
            WEIGHT_BUCKETS,
        )  # fmt: skip
        self.audit_depth = Gauge(
            "iabma_audit_queue_depth", "Audit records waiting for, or inside, a commit."
        )
        self.audit_commit_seconds = Histogram(
            "iabma_audit_commit_duration_seconds",
            "Time of one group commit of audit records.",
            (),
            LATENCY_BUCKETS,
        )
        self.audit_records = Counter("iabma_audit_records_total", "Audit records committed.")
        self.audit_failures = Counter(
            "iabma_audit_failures_total", "Group commits that failed (their requests got 503)."
        )
        self.reloads = Counter("iabma_reloads_total", "Bundle reloads by outcome.", ("outcome",))
        self.all: list[_Metric] = [
            self.requests, self.request_seconds, self.rows, self.graph_seconds, self.gate_weight,
            self.audit_depth, self.audit_commit_seconds, self.audit_records, self.audit_failures,
            self.reloads,
        ]  # fmt: skip

    def observe_graphs(self, model: Labels, timings: dict[str, float]) -> None:
        for graph, seconds in timings.items():
            self.graph_seconds.observe((*model, graph), seconds)

    def observe_weights(self, model: Labels, experts: Sequence[str], weights: np.ndarray) -> None:
        if weights.shape[0] <= _FEW_ROWS:  # numpy's per-call cost exceeds a few bisects
            for row in weights.tolist():
                for expert, w in zip(experts, row, strict=True):
                    self.gate_weight.observe((*model, expert), w)
            return
        for j, expert in enumerate(experts):
            self.gate_weight.observe_many((*model, expert), weights[:, j])

    def render(self) -> str:
        lines: list[str] = []
        for metric in self.all:
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"
