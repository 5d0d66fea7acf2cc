"""An audit record: built from an answered prediction, stored as rows, read back as JSON.

The input is kept as configured by ``IABMA_AUDIT_PAYLOAD``: ``full`` stores the instances
and their hash, ``hash`` only the sha256, ``off`` neither. The hash is taken over the
canonical JSON of the instances (keys sorted, no spaces, UTF-8), so anyone holding an input
can find its record by hashing it the same way.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_us() -> int:
    delta = datetime.now(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def iso_from_us(us: int) -> str:
    stamp = _EPOCH + timedelta(microseconds=int(us))
    return stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def input_sha256(instances: list[dict[str, Any]]) -> str:
    return hashlib.sha256(canonical_json(instances).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class AuditRecord:
    request_id: str
    created_us: int
    model: str
    version: str
    route: str
    task: str
    experts: tuple[str, ...]
    weights: np.ndarray  # (n, m)
    items: list[dict[str, Any]]  # the per-instance answer, as sent
    latency_ms: float
    input_mode: str
    instances: list[dict[str, Any]]

    def record_row(self) -> dict[str, Any]:
        """The ``iabma_audit_records`` row (JSON encoded here, on the writer thread)."""
        mean = self.weights.mean(axis=0)
        text = canonical_json(self.instances) if self.input_mode != "off" else None
        return {
            "request_id": self.request_id,
            "created_us": self.created_us,
            "model": self.model,
            "version": self.version,
            "route": self.route,
            "task": self.task,
            "n_instances": int(self.weights.shape[0]),
            "top_expert": self.experts[int(np.argmax(mean))],
            "latency_ms": float(self.latency_ms),
            "input_mode": self.input_mode,
            "input_sha256": (
                hashlib.sha256(text.encode("utf-8")).hexdigest() if text is not None else None
            ),
            "input_json": text if self.input_mode == "full" else None,
            "predictions_json": json.dumps(self.items, separators=(",", ":"), allow_nan=False),
        }

    def expert_rows(self, record_id: int) -> list[dict[str, Any]]:
        n, m = self.weights.shape
        sums = self.weights.sum(axis=0).tolist()
        tops = np.bincount(self.weights.argmax(axis=1), minlength=m).tolist()
        return [
            {
                "record_id": record_id,
                "expert": e,
                "weight_sum": sums[j],
                "top_count": tops[j],
                "n": n,
            }
            for j, e in enumerate(self.experts)
        ]


def record_json(row: Any) -> dict[str, Any]:
    """A stored record as ``GET /weights`` returns it."""
    stored: dict[str, Any] = {"mode": row.input_mode}
    if row.input_sha256 is not None:
        stored["sha256"] = row.input_sha256
    if row.input_json is not None:
        stored["instances"] = json.loads(row.input_json)
    return {
        "request_id": row.request_id,
        "time": iso_from_us(row.created_us),
        "model": row.model,
        "version": row.version,
        "route": row.route,
        "task": row.task,
        "n_instances": row.n_instances,
        "top_expert": row.top_expert,
        "latency_ms": row.latency_ms,
        "input": stored,
        "predictions": json.loads(row.predictions_json),
    }
