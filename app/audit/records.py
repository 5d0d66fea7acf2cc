"""An audit record: built from an answered prediction, stored as rows, read back as JSON.

It holds what an auditor needs as compact arrays, and the input as ``IABMA_AUDIT_PAYLOAD``
says (``full``, ``hash`` or ``off``; the hash is keyed, :mod:`app.audit.hashkey`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

import numpy as np
import orjson

from app.bundle.mixture import INTERVAL
from app.contract.answers import UNCERTAINTY

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
REGRESSION_FIELDS = 4  # mean, std, lower, upper


def now_us() -> int:
    delta = datetime.now(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def iso_from_us(us: int) -> str:
    stamp = _EPOCH + timedelta(microseconds=int(us))
    return stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")


def canonical_json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _hmac(key: bytes, text: bytes) -> str:
    return hmac.new(key, text, hashlib.sha256).hexdigest()


def _blob(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype="<f8").tobytes()


@dataclass(frozen=True)
class AuditRecord:
    request_id: str
    created_us: int
    model: str
    version: str
    route: str
    task: str
    experts: tuple[str, ...]
    classes: tuple[Any, ...] | None  # classification labels
    weights: np.ndarray  # (n, m)
    prediction: np.ndarray  # (n, C) probabilities, or (n, 4) mean, std, lower, upper
    uncertainty: np.ndarray  # (n, 4)
    latency_ms: float
    input_mode: str
    instances: list[dict[str, Any]] | Callable[[], list[dict[str, Any]]]
    hash_key: bytes = field(repr=False)

    def log_values(self) -> tuple[Any, ...]:
        """The ``iabma_audit_log`` row, in :data:`LOG_COLUMNS` order."""
        text = None
        if self.input_mode != "off":
            rows = self.instances() if callable(self.instances) else self.instances
            text = canonical_json(rows)
        sums, tops, top = weight_summary(self.weights, self.experts)
        return (
            self.request_id,
            self.created_us,
            self.model,
            self.version,
            self.route,
            self.task,
            int(self.weights.shape[0]),
            top,
            float(self.latency_ms),
            _names_json(self.experts),
            None if self.classes is None else _names_json(self.classes),
            _blob(self.weights),
            _blob(self.prediction),
            _blob(self.uncertainty),
            _blob(sums),
            np.asarray(tops, dtype="<i8").tobytes(),
            self.input_mode,
            _hmac(self.hash_key, text) if text is not None else None,
            text.decode("utf-8") if self.input_mode == "full" and text else None,
        )


LOG_COLUMNS = (
    "request_id", "created_us", "model", "version", "route", "task", "n_instances",
    "top_expert", "latency_ms", "experts", "classes", "weights", "prediction", "uncertainty",
    "weight_sums", "top_counts", "input_mode", "input_hash", "input_json",
)  # fmt: skip


def weight_summary(
    weights: np.ndarray, experts: tuple[str, ...]
) -> tuple[np.ndarray, list[int], str]:
    """Each expert's weight summed over the rows, how often it was on top, and the top
    expert of the whole record (largest mean weight)."""
    sums = weights.sum(axis=0)
    tops = np.bincount(weights.argmax(axis=1), minlength=len(experts)).tolist()
    return sums, tops, experts[int(np.argmax(sums))]


@lru_cache(maxsize=64)
def _names_json(names: tuple[Any, ...]) -> str:
    return json.dumps(list(names))


def record_json(row: Any) -> dict[str, Any]:
    """A stored record as ``GET /weights`` returns it, rebuilt from its arrays."""
    stored: dict[str, Any] = {"mode": row.input_mode}
    if row.input_hash is not None:
        stored["hmac_sha256"] = row.input_hash
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
        "predictions": instances_json(row),
    }


def instances_json(row: Any) -> list[dict[str, Any]]:
    experts = json.loads(row.experts)
    n = int(row.n_instances)
    w = np.frombuffer(row.weights, "<f8").reshape(n, len(experts)).tolist()
    u = np.frombuffer(row.uncertainty, "<f8").reshape(n, len(UNCERTAINTY)).tolist()
    if row.task == "classification":
        classes = json.loads(row.classes)
        p = np.frombuffer(row.prediction, "<f8").reshape(n, len(classes))
        labels, keys = p.argmax(axis=1).tolist(), [str(c) for c in classes]
        prediction = [
            {"label": classes[labels[i]], "probabilities": dict(zip(keys, r, strict=True))}
            for i, r in enumerate(p.tolist())
        ]
    else:
        r = np.frombuffer(row.prediction, "<f8").reshape(n, REGRESSION_FIELDS).tolist()
        prediction = [
            {"mean": a, "std": b, "interval": {"level": INTERVAL, "lower": lo, "upper": hi}}
            for a, b, lo, hi in r
        ]
    return [
        {
            "prediction": prediction[i],
            "weights": dict(zip(experts, w[i], strict=True)),
            "uncertainty": dict(zip(UNCERTAINTY, u[i], strict=True)),
        }
        for i in range(n)
    ]
