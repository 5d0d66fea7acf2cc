"""Pydantic models of the HTTP contract, for the OpenAPI schema at /docs.

Requests are validated by our own code on the raw JSON (see :mod:`app.core.inputs`) so that an
error can name ``instances[3].age`` precisely, and responses are serialised directly; these
models describe both, and the tests validate real responses against them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FeatureValue = float | str | None


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PredictRequest(_Doc):
    instances: list[dict[str, FeatureValue]] = Field(
        description="Rows: every feature of the model, null for a missing value.",
        examples=[[{"x1": 0.5, "x2": -1.0}]],
    )
    format: Literal["rows", "columnar"] = Field(
        "rows", description="rows: one object per instance; columnar: one array per field."
    )
    include: list[Literal["prediction", "weights", "experts", "uncertainty"]] = Field(
        default=["prediction", "weights", "experts", "uncertainty"],
        description="The parts of the answer to return.",
    )


class ClassPrediction(_Doc):
    label: int | str
    probabilities: dict[str, float] = Field(description="Class label (as text) to probability.")


class Interval(_Doc):
    level: float
    lower: float
    upper: float


class RegressionPrediction(_Doc):
    mean: float
    std: float
    interval: Interval = Field(description="Central interval of the mixture.")


class ExpertRegression(_Doc):
    mean: float
    std: float


class Uncertainty(_Doc):
    """Classification: entropies in nats, selection normalised to [0, 1].
    Regression: variances in squared target units, selection normalised to [0, 1]."""

    total: float
    aleatoric: float
    epistemic: float
    selection: float


class InstanceResult(_Doc):
    prediction: ClassPrediction | RegressionPrediction
    weights: dict[str, float] = Field(description="Gate weight per expert; they sum to 1.")
    experts: dict[str, ClassPrediction | ExpertRegression] = Field(
        description="Each expert's own prediction."
    )
    uncertainty: Uncertainty


class PredictResponse(_Doc):
    model: str
    version: str
    request_id: str
    task: str
    predictions: list[InstanceResult]


class StoredInput(_Doc):
    mode: str = Field(description="full, hash or off (IABMA_AUDIT_PAYLOAD)")
    hmac_sha256: str | None = Field(
        None,
        description="HMAC-SHA256 of the canonical JSON of the instances, keyed by the trail's "
        "secret (IABMA_AUDIT_HASH_KEY)",
    )
    instances: list[dict[str, Any]] | None = None


class AuditedInstance(_Doc):
    """A row of an audited answer, rebuilt from the stored arrays (no experts' outputs)."""

    prediction: ClassPrediction | RegressionPrediction
    weights: dict[str, float]
    uncertainty: Uncertainty


class AuditRecordOut(_Doc):
    request_id: str
    time: str
    model: str
    version: str
    route: str
    task: str
    n_instances: int
    top_expert: str
    latency_ms: float
    input: StoredInput
    predictions: list[AuditedInstance]


class GateWeights(_Doc):
    model: str
    version: str
    request_id: str
    weights: dict[str, float]
    top_expert: str


class ExpertAggregate(_Doc):
    mean_weight: float
    argmax_share: float


class Aggregate(_Doc):
    records: int
    instances: int
    experts: dict[str, ExpertAggregate]


class RecordPage(_Doc):
    model: str
    filter: dict[str, Any]
    records: list[AuditRecordOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")
    aggregate: Aggregate


class ErrorDetail(_Doc):
    code: str
    message: str
    field: str


class ErrorInfo(ErrorDetail):
    details: list[ErrorDetail] | None = None


class ErrorBody(_Doc):
    error: ErrorInfo


class OipError(_Doc):
    error: str


class Reloaded(_Doc):
    model: str
    version: str
    previous_version: str | None
    changed: bool


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 404, 413, 415, 422, 503)
}
