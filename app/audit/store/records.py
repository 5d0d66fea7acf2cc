"""An audit record: built from an answered prediction, stored as a row, read back as JSON.

It holds what an auditor needs as packed arrays (:mod:`app.audit.store.packing`), each expert's
own prediction among them, what it shares with its version's records as the id of their
row (:mod:`app.audit.store.version_rows`), and the input as ``IABMA_AUDIT_PAYLOAD`` says (``full``,
``hash`` or ``off``; the hash is keyed, :mod:`app.audit.store.hashkey`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from app.audit.store import packing
from app.bundle.digits import float32_values, significant
from app.bundle.mixture import INTERVAL
from app.contract.answers import UNCERTAINTY

if TYPE_CHECKING:
    from app.audit.store.version_rows import Version

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now_us() -> int:
    # One call where datetime arithmetic took four (0.09 against 0.33 us, on every request).
    return time.time_ns() // 1000


def iso_from_us(us: int) -> str:
    stamp = _EPOCH + timedelta(microseconds=int(us))
    return stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")


def canonical_json(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        # orjson writes integers of 64 bits at most. A longer one can pass validation: a
        # number within float32 written with 20 digits, which Python's parser keeps as an
        # int where orjson's reads a float, or a number spelling a category.
        pass
    return orjson.dumps(_within_64_bits(value), option=orjson.OPT_SORT_KEYS)


_INT_RANGE = range(-(2**63), 2**64)  # what orjson writes: int64 and uint64


def _within_64_bits(value: Any) -> Any:
    """``value`` with each integer orjson cannot write as the float it reads as (what
    orjson's own parser makes of it, and what the graph takes), or as its digits beyond
    float64."""
    if isinstance(value, dict):
        return {k: _within_64_bits(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_within_64_bits(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and value not in _INT_RANGE:
        try:
            return float(value)
        except OverflowError:
            return str(value)
    return value


def _hmac(key: bytes, text: bytes) -> bytes:
    # The key's inner and outer pads hashed once, copied for each record: 0.8 us a record
    # where keying a new HMAC took 1.2.
    mac = _keyed(key).copy()
    mac.update(text)
    return mac.digest()


@lru_cache(maxsize=8)
def _keyed(key: bytes) -> hmac.HMAC:
    return hmac.new(key, digestmod=hashlib.sha256)


def _blob(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype="<f8").tobytes()


# Not frozen: a frozen dataclass sets each of its 17 fields through object.__setattr__,
# and the record is made on the event loop for every prediction (2.7 against 0.9 us).
# Nothing changes a record once it is queued. app.core.trail.make_record passes the fields
# positionally: a new one goes last, with a default.
@dataclass(slots=True)
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
    # Regression: each expert's std (m,), or per row (n * m,) where the bundle serves the
    # experts' own per-row sds (app.bundle.spread), then the mixture's temperature.
    expert_spread: np.ndarray | None = None

    def version_key(self) -> tuple[Any, ...]:
        """What the record shares with its version's records
        (:mod:`app.audit.store.version_rows`)."""
        classes = None if self.classes is None else _names_json(self.classes)
        return (
            self.model, self.version, self.route, self.task, self.input_mode,
            _names_json(self.experts), classes,
        )  # fmt: skip

    def log_values(self) -> tuple[Any, ...]:
        """The ``iabma_audit_log`` row, in :data:`LOG_COLUMNS` order, its version as the
        :meth:`version_key` that the writer's connection turns into the row's id. A group's
        rows are built together by :func:`app.audit.write.group_rows.log_rows`, to the same
        values."""
        return self.row(self.answer(), self.top())

    def answer(self) -> bytes:
        """The ``answer`` column (:func:`app.audit.store.packing.pack`)."""
        return packing.pack(
            self.task,
            self.weights,
            self.prediction,
            self.uncertainty,
            self.expert_outputs,
            self.expert_spread,
        )

    def top(self) -> int:
        """The expert with the largest weight summed over the record's rows."""
        return int(np.argmax(self.weights.sum(axis=0)))

    def row(self, answer: bytes, top: int) -> tuple[Any, ...]:
        """:meth:`log_values` around its ``answer`` and ``top``, made elsewhere."""
        text = None
        if self.input_mode != "off":
            rows = self.instances() if callable(self.instances) else self.instances
            text = canonical_json(rows)
        return (
            packing.pack_request_id(self.request_id),
            self.created_us,
            self.version_key(),
            int(self.weights.shape[0]),
            top,
            round(self.latency_ms * 1000),
            _hmac(self.hash_key, text) if text is not None else None,
            text.decode("utf-8") if self.input_mode == "full" and text else None,
            answer,
        )


LOG_COLUMNS = (
    "request_id", "created_us", "version_id", "n_instances", "top", "latency_us",
    "input_hash", "input_json", "answer",
)  # fmt: skip
VERSION_AT = LOG_COLUMNS.index("version_id")
CREATED_AT = LOG_COLUMNS.index("created_us")


@dataclass(frozen=True)
class ServedExperts:
    """What a record kept of its experts: ``outputs`` (n, m, C) probabilities or (n, m)
    means; regression also each expert's ``std``, (m,) or per row (n, m), and the
    mixture's ``temperature``."""

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
    std = values[n * m : -1]
    if std.size != m:  # the experts' own per-row sds
        std = std.reshape(n, m)
    return ServedExperts(values[: n * m].reshape(n, m), std, values[-1])


@lru_cache(maxsize=64)
def _names_json(names: tuple[Any, ...]) -> str:
    return json.dumps(list(names))


def answer_of(row: Any, version: Version) -> packing.Answer:
    """A stored row's arrays (it has ``answer`` and ``n_instances``)."""
    m, classes = len(version.expert_names), len(version.class_labels)
    return packing.unpack(row.answer, version.task, int(row.n_instances), m, classes)


def served_blobs(row: Any, version: Version) -> tuple[bytes, bytes, bytes | None]:
    """A row's weights, prediction and experts' outputs as float64 blobs, the experts'
    with regression's spread after them (what :func:`served_experts` reads)."""
    a = answer_of(row, version)
    experts = None
    if a.expert_outputs is not None:
        experts = _blob(a.expert_outputs)
        if a.expert_spread is not None:
            experts += _blob(a.expert_spread)
    return _blob(a.weights), _blob(a.prediction), experts


def record_json(row: Any, version: Version) -> dict[str, Any]:
    """A stored record as ``GET /weights`` returns it, rebuilt from its arrays."""
    stored: dict[str, Any] = {"mode": version.input_mode}
    if row.input_hash is not None:
        stored["hmac_sha256"] = bytes(row.input_hash).hex()
    if row.input_json is not None:
        stored["instances"] = json.loads(row.input_json)
    experts = version.expert_names
    return {
        "request_id": packing.unpack_request_id(row.request_id),
        "time": iso_from_us(row.created_us),
        "model": version.model,
        "version": version.version,
        "route": version.route,
        "task": version.task,
        "n_instances": row.n_instances,
        "top_expert": experts[int(row.top)],
        "latency_ms": int(row.latency_us) / 1000,
        "input": stored,
        "predictions": instances_json(answer_of(row, version), version),
    }


def _labelled(p: np.ndarray, classes: list[Any]) -> list[dict[str, Any]]:
    """Rows of class probabilities as ``{"label", "probabilities"}``."""
    labels, keys = p.argmax(axis=1).tolist(), [str(c) for c in classes]
    return [
        {"label": classes[labels[i]], "probabilities": dict(zip(keys, r, strict=True))}
        for i, r in enumerate(float32_values(p))
    ]


def instances_json(a: packing.Answer, version: Version) -> list[dict[str, Any]]:
    experts = version.expert_names
    n, m = a.weights.shape
    # Numbers as the answer wrote them (app.bundle.digits).
    if version.task == "classification":
        w, u = float32_values(a.weights), float32_values(a.uncertainty)
    else:
        w, u = float32_values(a.weights), significant(a.uncertainty).tolist()
    classes = version.class_labels
    own: list[list[dict[str, Any]]] | None = None
    if version.task == "classification":
        prediction = _labelled(a.prediction, classes)
        if a.expert_outputs is not None:
            per = [_labelled(a.expert_outputs[:, j], classes) for j in range(m)]
            own = [[per[j][i] for j in range(m)] for i in range(n)]
    else:
        prediction = [
            {"mean": x, "std": b, "interval": {"level": INTERVAL, "lower": lo, "upper": hi}}
            for x, b, lo, hi in significant(a.prediction).tolist()
        ]
        if a.expert_outputs is not None:
            spread = a.expert_spread
            sds = np.ones(m) if spread is None else significant(spread[:-1].reshape(-1, m))
            own = [
                [{"mean": mu, "std": s} for mu, s in zip(means, std, strict=True)]
                for means, std in zip(
                    significant(a.expert_outputs).tolist(),
                    np.broadcast_to(sds, (n, m)).tolist(),
                    strict=True,
                )
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
