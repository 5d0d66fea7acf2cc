"""An audit record: built from an answered prediction, stored as rows, read back as JSON.

It holds what an auditor needs as compact arrays, each expert's own prediction among them
(:func:`served_experts` reads it back), and the input as ``IABMA_AUDIT_PAYLOAD`` says
(``full``, ``hash`` or ``off``; the hash is keyed, :mod:`app.audit.hashkey`).
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
    # Each expert's own prediction as served: (n, m, C) probabilities, or (n, m) means.
    expert_outputs: np.ndarray | None = None
    # Regression: each expert's std (m,), then the mixture's temperature.
    expert_spread: np.ndarray | None = None

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
            self._experts_blob(),
        )

    def _experts_blob(self) -> bytes | None:
        if self.expert_outputs is None:
            return None
        if self.expert_spread is None:
            return _blob(self.expert_outputs)
        return _blob(self.expert_outputs) + _blob(self.expert_spread)


LOG_COLUMNS = (
    "request_id", "created_us", "model", "version", "route", "task", "n_instances",
    "top_expert", "latency_ms", "experts", "classes", "weights", "prediction", "uncertainty",
    "weight_sums", "top_counts", "input_mode", "input_hash", "input_json", "expert_outputs",
)  # fmt: skip


@dataclass(frozen=True)
class ServedExperts:
    """What a record kept of its experts: ``outputs`` (n, m, C) probabilities or (n, m)
    means; regression also each expert's ``std`` (m,) and the mixture's ``temperature``."""

    outputs: np.ndarray
    std: np.ndarray | None = None
    temperature: float = 1.0


def served_experts(
    blob: bytes | None, task: str, n: int, m: int, classes: int
) -> ServedExperts | None:
    """The ``expert_outputs`` column read back; None for a record written before it."""
    if blob is None:
        return None
    values = np.frombuffer(blob, "<f8")
    if task == "classification":
        return ServedExperts(values.reshape(n, m, classes))
    return ServedExperts(values[: n * m].reshape(n, m), values[n * m : n * m + m], values[-1])


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


def _labelled(p: np.ndarray, classes: list[Any]) -> list[dict[str, Any]]:
    """Rows of class probabilities as ``{"label", "probabilities"}``."""
    labels, keys = p.argmax(axis=1).tolist(), [str(c) for c in classes]
    return [
        {"label": classes[labels[i]], "probabilities": dict(zip(keys, r, strict=True))}
        for i, r in enumerate(p.tolist())
    ]


def instances_json(row: Any) -> list[dict[str, Any]]:
    experts = json.loads(row.experts)
    n, m = int(row.n_instances), len(experts)
    w = np.frombuffer(row.weights, "<f8").reshape(n, m).tolist()
    u = np.frombuffer(row.uncertainty, "<f8").reshape(n, len(UNCERTAINTY)).tolist()
    classes = json.loads(row.classes) if row.task == "classification" else []
    served = served_experts(row.expert_outputs, row.task, n, m, len(classes))
    own: list[list[dict[str, Any]]] | None = None
    if row.task == "classification":
        p = np.frombuffer(row.prediction, "<f8").reshape(n, len(classes))
        prediction = _labelled(p, classes)
        if served is not None:
            per = [_labelled(served.outputs[:, j], classes) for j in range(m)]
            own = [[per[j][i] for j in range(m)] for i in range(n)]
    else:
        r = np.frombuffer(row.prediction, "<f8").reshape(n, REGRESSION_FIELDS).tolist()
        prediction = [
            {"mean": a, "std": b, "interval": {"level": INTERVAL, "lower": lo, "upper": hi}}
            for a, b, lo, hi in r
        ]
        if served is not None:
            assert served.std is not None
            std = served.std.tolist()
            own = [
                [{"mean": mu, "std": s} for mu, s in zip(means, std, strict=True)]
                for means in served.outputs.tolist()
            ]
    out = []
    for i in range(n):
        item: dict[str, Any] = {
            "prediction": prediction[i],
            "weights": dict(zip(experts, w[i], strict=True)),
        }
        if own is not None:
            item["experts"] = dict(zip(experts, own[i], strict=True))
        item["uncertainty"] = dict(zip(UNCERTAINTY, u[i], strict=True))
        out.append(item)
    return out
