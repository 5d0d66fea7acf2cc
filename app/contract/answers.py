"""The answers of the data routes as frozen dataclasses: ``POST /predict``, ``GET /weights``
and ``POST /admin/reload``, and the error body.

Field metadata says what a generic reader or schema cannot guess: ``doc``; ``keys`` (a
mapping whose keys are the bundle's ``experts`` or ``classes``); ``enum`` and ``const``
(values the bundle fixes); ``omit`` (a part left out of the answer rather than null);
``json`` (the names on the wire, the one sent first); ``wire=False`` (not on the wire at all).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, ClassVar

Label = int | str


@dataclass(frozen=True)
class Interval:
    level: float = field(metadata={"const": "interval"})
    lower: float
    upper: float


@dataclass(frozen=True)
class ClassPrediction:
    task: ClassVar[str] = "classification"
    label: Label = field(metadata={"enum": "classes"})
    probabilities: Mapping[str, float] = field(
        metadata={"doc": "Probability per class label.", "keys": "classes"}
    )


@dataclass(frozen=True)
class RegressionPrediction:
    task: ClassVar[str] = "regression"
    mean: float
    std: float
    interval: Interval = field(metadata={"doc": "Central interval of the mixture."})


@dataclass(frozen=True)
class ExpertRegression:
    task: ClassVar[str] = "regression"
    mean: float
    std: float


@dataclass(frozen=True)
class Uncertainty:
    """Classification: entropies in nats; regression: variances in squared target units;
    selection normalised to [0, 1]."""

    total: float
    aleatoric: float
    epistemic: float
    selection: float


UNCERTAINTY: tuple[str, ...] = tuple(f.name for f in fields(Uncertainty))
Prediction = ClassPrediction | RegressionPrediction
ExpertPrediction = ClassPrediction | ExpertRegression


@dataclass(frozen=True)
class InstanceResult:
    """One row of the answer: the parts asked for with ``include`` (all by default)."""

    prediction: Prediction | None = field(default=None, metadata={"omit": True})
    weights: Mapping[str, float] | None = field(
        default=None,
        metadata={"omit": True, "keys": "experts", "doc": "Gate weight per expert; they sum to 1."},
    )
    experts: Mapping[str, ExpertPrediction] | None = field(
        default=None,
        metadata={"omit": True, "keys": "experts", "doc": "Each expert's own prediction."},
    )
    uncertainty: Uncertainty | None = field(default=None, metadata={"omit": True})

    @property
    def top_expert(self) -> str | None:
        return max(self.weights, key=self.weights.__getitem__) if self.weights else None


@dataclass(frozen=True)
class PredictResult:
    model: str = field(metadata={"const": "name"})
    version: str
    request_id: str
    task: str = field(metadata={"const": "task"})
    predictions: tuple[InstanceResult, ...]
    # Every batch's request id, in row order, when the client sent the rows in several.
    request_ids: tuple[str, ...] = field(default=(), metadata={"wire": False})


@dataclass(frozen=True)
class StoredInput:
    """The audited input: the rows (``full``), their keyed hash (``hash``), or nothing."""

    mode: str = field(metadata={"doc": "full, hash or off (IABMA_AUDIT_PAYLOAD)"})
    digest: str | None = field(
        default=None,
        metadata={
            "json": ("hmac_sha256", "sha256"),  # the first is sent; older servers sent the other
            "doc": "HMAC-SHA256 of the canonical JSON of the instances, keyed by the trail's "
            "secret (IABMA_AUDIT_HASH_KEY)",
        },
    )
    instances: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True)
class AuditRecord:
    """An audited answer, rebuilt from the stored arrays."""

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
    predictions: tuple[InstanceResult, ...]


@dataclass(frozen=True)
class GateWeights:
    """The gate's weights for one input, now (not audited)."""

    model: str = field(metadata={"const": "name"})
    version: str
    request_id: str
    weights: Mapping[str, float] = field(
        metadata={"doc": "Gate weight per expert; they sum to 1.", "keys": "experts"}
    )
    top_expert: str = field(metadata={"enum": "experts"})


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
    next_cursor: str | None = field(metadata={"doc": "Pass as ?cursor= for the next page."})
    aggregate: Aggregate


@dataclass(frozen=True)
class Reloaded:
    model: str
    version: str
    previous_version: str | None
    changed: bool


@dataclass(frozen=True)
class ErrorDetail:
    code: str
    message: str
    field: str


@dataclass(frozen=True)
class ErrorInfo:
    code: str
    message: str
    field: str
    details: tuple[ErrorDetail, ...] | None = None


@dataclass(frozen=True)
class ErrorBody:
    error: ErrorInfo


@dataclass(frozen=True)
class OipError:
    error: str
