"""The Prometheus families this process writes, created once per process.

In multiprocess mode a value is identified by its name and labels within a process's
file, so two apps in one process (tests build many) must share one family object per
name; otherwise each would overwrite the other's count in the same slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

MODEL_LABELS = ("model_name", "model_version")
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
GRAPH_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5,
)  # fmt: skip
WEIGHT_BUCKETS = tuple(round(0.1 * k, 1) for k in range(1, 11))
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Families:
    requests: Any
    request_seconds: Any
    rows: Any
    graph_seconds: Any
    batch_requests: Any
    batch_waits: Any
    gate_weight: Any
    audit_depth: Any
    audit_commit_seconds: Any
    audit_records: Any
    audit_failures: Any
    reloads: Any
    served: Any
    refused: Any
    feedback: Any
    realised_nll: Any
    drift_window: Any
    gc_collections: Any
    gc_collected: Any
    gc_uncollectable: Any


@cache
def families() -> Families:
    """Build the families; call :func:`app.metrics.multiprocess.multiprocess_dir` first."""
    import prometheus_client

    make = _Maker(prometheus_client)
    return Families(
        **_request_families(make), **_audit_families(make), **_model_families(make),
        **_gc_families(make),
    )  # fmt: skip


class _Maker:
    """Families labelled by model and version (gc's by generation), outside any registry:
    the multiprocess collector reads them from the files."""

    def __init__(self, prom: Any) -> None:
        self.prom = prom

    def counter(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Any:
        return self.prom.Counter(name, doc, (*MODEL_LABELS, *labels), registry=None)

    def histogram(self, name: str, doc: str, labels: tuple[str, ...], buckets: tuple) -> Any:
        labels = (*MODEL_LABELS, *labels)
        return self.prom.Histogram(name, doc, labels, buckets=buckets, registry=None)

    def gauge(self, name: str, doc: str, mode: str, labels: tuple[str, ...] = ()) -> Any:
        labels = (*MODEL_LABELS, *labels)
        return self.prom.Gauge(name, doc, labels, multiprocess_mode=mode, registry=None)

    def summary(self, name: str, doc: str, labels: tuple[str, ...]) -> Any:
        return self.prom.Summary(name, doc, (*MODEL_LABELS, *labels), registry=None)

    def gc_counter(self, name: str, doc: str) -> Any:
        return self.prom.Counter(name, doc, ("generation",), registry=None)


def _request_families(make: _Maker) -> dict[str, Any]:
    return {
        "requests": make.counter(
            "iabma_http_requests_total", "HTTP requests answered.", ("route", "method", "status")
        ),
        "request_seconds": make.histogram(
            "iabma_http_request_duration_seconds",
            "Time from request to the end of the response.",
            ("route", "method", "status"),
            LATENCY_BUCKETS,
        ),
        "rows": make.counter("iabma_predicted_rows_total", "Rows predicted.", ("route",)),
        "graph_seconds": make.histogram(
            "iabma_inference_duration_seconds",
            "onnxruntime time per batch and graph.",
            ("graph",),
            GRAPH_BUCKETS,
        ),
        "batch_requests": make.histogram(
            "iabma_batch_requests",
            "Requests merged into one graph run by dynamic batching.",
            (),
            BATCH_BUCKETS,
        ),
        "batch_waits": make.counter(
            "iabma_batch_waits_total",
            "Graph runs that waited for requests in flight (IABMA_BATCH_WAIT_MS).",
        ),
        "gate_weight": make.histogram(
            "iabma_gate_weight",
            "Gate weight of each expert per predicted row.",
            ("expert",),
            WEIGHT_BUCKETS,
        ),
    }


def _audit_families(make: _Maker) -> dict[str, Any]:
    return {
        "audit_depth": make.gauge(
            "iabma_audit_queue_depth",
            "Audit records waiting for, or inside, a commit (all live workers).",
            "livesum",
        ),
        "audit_commit_seconds": make.histogram(
            "iabma_audit_commit_duration_seconds",
            "Time of one group commit of audit records.",
            (),
            LATENCY_BUCKETS,
        ),
        "audit_records": make.counter("iabma_audit_records_total", "Audit records committed."),
        "audit_failures": make.counter(
            "iabma_audit_failures_total", "Group commits that failed (their requests got 503)."
        ),
    }


def _model_families(make: _Maker) -> dict[str, Any]:
    return {
        "reloads": make.counter(
            "iabma_reloads_total",
            "Bundle loads after start-up by outcome: ok, or refused (failed verification).",
            ("outcome",),
        ),
        "served": make.gauge(
            "iabma_model_served",
            "1 for the version each live worker (pid) serves, 0 for versions it served before.",
            "liveall",
        ),
        "refused": make.gauge(
            "iabma_model_refused",
            "1 while LATEST names a version this worker refused; the error is in the log "
            "and in GET /models.",
            "liveall",
        ),
        "feedback": make.counter(
            "iabma_feedback_total",
            "Outcomes posted to POST /feedback by result: accepted, duplicate (stored before "
            "with the same value), or rejected (their request was refused whole); labelled "
            "with the version that served the row (rejected: the serving version).",
            ("result",),
        ),
        "realised_nll": make.summary(
            "iabma_realised_nll",
            "Realised NLL of each accepted outcome under what was served, per expert and for "
            'the mixture (expert="mixture"); rate(_sum) / rate(_count) is the mean.',
            ("expert",),
        ),
        "drift_window": make.gauge(
            "iabma_weight_window_rows",
            "Rows served in the drift window (IABMA_DRIFT_WINDOW_SECONDS) by expert and bin of "
            "its gate weight (bin: the bin's upper edge), all live workers; "
            "iabma_weight_drift compares them with the training rows.",
            "livesum",
            ("expert", "bin"),
        ),
    }


def _gc_families(make: _Maker) -> dict[str, Any]:
    return {
        "gc_collections": make.gc_counter(
            "python_gc_collections_total", "Collections of each generation, all workers."
        ),
        "gc_collected": make.gc_counter(
            "python_gc_objects_collected_total", "Objects collected by the GC, all workers."
        ),
        "gc_uncollectable": make.gc_counter(
            "python_gc_objects_uncollectable_total",
            "Uncollectable objects found by the GC, all workers.",
        ),
    }
