"""Typed results: frozen dataclasses that mirror the service's JSON answers.

Parsers read the fields the contract promises and ignore any others, so a newer server that
adds a field does not break an older client. The parts of a prediction that ``include``
left out are ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.client.errors import InvalidResponse

Label = int | str


@dataclass(frozen=True)
class Interval:
    level: float
    lower: float
    upper: float


@dataclass(frozen=True)
class ClassPrediction:
    label: Label
    probabilities: Mapping[str, float]  # class label as text -> probability


@dataclass(frozen=True)
class RegressionPrediction:
    mean: float
    std: float
    interval: Interval


@dataclass(frozen=True)
class ExpertRegression:
    mean: float
    std: float


@dataclass(frozen=True)
class Uncertainty:
    """Classification: entropies in nats; regression: variances; selection in [0, 1]."""

    total: float
    aleatoric: float
    epistemic: float
    selection: float


Prediction = ClassPrediction | RegressionPrediction


@dataclass(frozen=True)
class InstanceResult:
    prediction: Prediction | None
    weights: Mapping[str, float] | None  # expert -> gate weight; they sum to 1
    experts: Mapping[str, ClassPrediction | ExpertRegression] | None
    uncertainty: Uncertainty | None

    @property
    def top_expert(self) -> str | None:
        return max(self.weights, key=self.weights.__getitem__) if self.weights else None


@dataclass(frozen=True)
class PredictResult:
    model: str
    version: str
    request_id: str
    task: str
    predictions: tuple[InstanceResult, ...]
    # Every batch's request id, in row order, when the rows went in several (one if not).
    request_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoredInput:
    """The audited input: the rows (``full``), their keyed hash (``hash``), or nothing."""

    mode: str
    digest: str | None
    instances: tuple[Mapping[str, Any], ...] | None


@dataclass(frozen=True)
class AuditRecord:
    request_id: str
    time: datetime
    model: str
    version: str
    route: str
    task: str
    n_instances: int
    top_expert: str
    latency_ms: float
    input: StoredInput
    predictions: tuple[InstanceResult, ...]  # experts' own outputs are not audited


@dataclass(frozen=True)
class GateWeights:
    """The gate's weights for one input, now (not audited)."""

    model: str
    version: str
    request_id: str
    weights: Mapping[str, float]
    top_expert: str


@dataclass(frozen=True)
class ExpertAggregate:
    mean_weight: float
    argmax_share: float


@dataclass(frozen=True)
class Aggregate:
    records: int
    instances: int
    experts: Mapping[str, ExpertAggregate]


@dataclass(frozen=True)
class RecordPage:
    model: str
    filter: Mapping[str, Any]
    records: tuple[AuditRecord, ...]
    next_cursor: str | None
    aggregate: Aggregate


@dataclass(frozen=True)
class Feature:
    name: str
    dtype: str  # "float" or "string"
    categories: tuple[str, ...] | None


@dataclass(frozen=True)
class ExpertInfo:
    name: str
    kind: str
    features: tuple[str, ...]  # the features this expert reads, by their user names
    metrics: Mapping[str, float]


@dataclass(frozen=True)
class ModelInfo:
    """``GET /models``: the served bundle. ``manifest`` keeps every field as sent."""

    name: str
    version: str
    task: str
    features: tuple[Feature, ...]
    experts: tuple[ExpertInfo, ...]
    classes: tuple[Label, ...] | None
    metrics: Mapping[str, Mapping[str, float]]
    created_at: datetime
    manifest: Mapping[str, Any]


def _obj(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidResponse(f"expected {what} to be an object, got {type(value).__name__}")
    return value


def _floats(value: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in value.items()}


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def class_or_regression(p: Mapping[str, Any]) -> Prediction:
    if "label" in p:
        return ClassPrediction(p["label"], _floats(p["probabilities"]))
    i = p["interval"]
    return RegressionPrediction(
        float(p["mean"]), float(p["std"]), Interval(i["level"], i["lower"], i["upper"])
    )


def _expert(p: Mapping[str, Any]) -> ClassPrediction | ExpertRegression:
    if "label" in p:
        return ClassPrediction(p["label"], _floats(p["probabilities"]))
    return ExpertRegression(float(p["mean"]), float(p["std"]))


def instance(raw: Mapping[str, Any]) -> InstanceResult:
    p, w, e, u = (raw.get(k) for k in ("prediction", "weights", "experts", "uncertainty"))
    return InstanceResult(
        prediction=None if p is None else class_or_regression(p),
        weights=None if w is None else _floats(w),
        experts=None if e is None else {k: _expert(v) for k, v in e.items()},
        uncertainty=None if u is None else Uncertainty(**_floats(u)),
    )


def predict_result(body: Any) -> PredictResult:
    b = _obj(body, "the /predict answer")
    return PredictResult(
        b["model"], b["version"], b["request_id"], b["task"],
        tuple(instance(r) for r in b["predictions"]), (b["request_id"],),
    )  # fmt: skip


def _stored_input(raw: Mapping[str, Any]) -> StoredInput:
    digest = next((raw[k] for k in ("hmac_sha256", "sha256") if raw.get(k)), None)
    rows = raw.get("instances")
    return StoredInput(str(raw["mode"]), digest, None if rows is None else tuple(rows))


def audit_record(body: Any) -> AuditRecord:
    b = _obj(body, "an audit record")
    return AuditRecord(
        request_id=b["request_id"],
        time=_time(b["time"]),
        model=b["model"],
        version=b["version"],
        route=b["route"],
        task=b["task"],
        n_instances=int(b["n_instances"]),
        top_expert=b["top_expert"],
        latency_ms=float(b["latency_ms"]),
        input=_stored_input(_obj(b["input"], "input")),
        predictions=tuple(instance(r) for r in b["predictions"]),
    )


def gate_weights(body: Any) -> GateWeights:
    b = _obj(body, "the gate's weights")
    return GateWeights(
        b["model"], b["version"], b["request_id"], _floats(b["weights"]), b["top_expert"]
    )


def record_page(body: Any) -> RecordPage:
    b = _obj(body, "a page of audit records")
    agg = _obj(b["aggregate"], "aggregate")
    experts = {
        k: ExpertAggregate(float(v["mean_weight"]), float(v["argmax_share"]))
        for k, v in agg["experts"].items()
    }
    return RecordPage(
        model=b["model"],
        filter=dict(b["filter"]),
        records=tuple(audit_record(r) for r in b["records"]),
        next_cursor=b.get("next_cursor"),
        aggregate=Aggregate(int(agg["records"]), int(agg["instances"]), experts),
    )


def model_info(body: Any) -> ModelInfo:
    b = _obj(body, "the /models answer")
    features = b["features"]
    by_input = {f.get("input"): f["name"] for f in features}
    classes: Sequence[Label] | None = b.get("target", {}).get("classes")
    return ModelInfo(
        name=b["name"],
        version=b["version"],
        task=b["task"],
        features=tuple(
            Feature(
                f["name"],
                f["dtype"],
                None if f.get("categories") is None else tuple(f["categories"]),
            )
            for f in features
        ),
        experts=tuple(
            ExpertInfo(
                e["name"],
                e.get("kind", ""),
                tuple(by_input.get(i, i) for i in e.get("inputs", ())),
                _floats(e.get("metrics", {})),
            )
            for e in b["experts"]
        ),
        classes=None if classes is None else tuple(classes),
        metrics={k: _floats(v) for k, v in b.get("metrics", {}).items()},
        created_at=_time(b["created_at"]),
        manifest=b,
    )
