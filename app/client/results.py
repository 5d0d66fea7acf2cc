"""Typed results: the contract's answers (:mod:`app.contract`), and ``GET /models`` as
:class:`ModelInfo`, read by the contract and arranged for a caller.

The answers are read by the contract's own reader, which takes the fields the contract
promises and ignores any others, so a newer server that adds a field does not break an
older client. The parts of a prediction that ``include`` left out are ``None``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from app.client.errors import InvalidResponse
from app.contract.answers import (
    AuditRecord,
    ClassPrediction,
    GateWeights,
    InstanceResult,
    Label,
    PredictResult,
    RecordPage,
    RegressionPrediction,
)
from app.contract.feedback import FeedbackResult
from app.contract.models import ModelsAnswer
from app.contract.performance import ClassScores, Performance, RegressionScores, TrustBin
from app.contract.reader import Unreadable, read

__all__ = [
    "AuditRecord",
    "ClassPrediction",
    "ClassScores",
    "ExpertInfo",
    "Feature",
    "FeedbackResult",
    "GateWeights",
    "InstanceResult",
    "Label",
    "ModelInfo",
    "Performance",
    "PredictResult",
    "RecordPage",
    "RegressionPrediction",
    "RegressionScores",
    "TrustBin",
]
T = TypeVar("T")


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


def _read(cls: type[T], body: Any, what: str) -> T:
    try:
        return read(cls, body, what)
    except (Unreadable, KeyError, TypeError, ValueError) as exc:
        raise InvalidResponse(str(exc)) from None


def predict_result(body: Any) -> PredictResult:
    result = _read(PredictResult, body, "the /predict answer")
    return dataclasses.replace(result, request_ids=(result.request_id,))


def audit_record(body: Any) -> AuditRecord:
    return _read(AuditRecord, body, "an audit record")


def gate_weights(body: Any) -> GateWeights:
    return _read(GateWeights, body, "the gate's weights")


def record_page(body: Any) -> RecordPage:
    return _read(RecordPage, body, "a page of audit records")


def feedback_result(body: Any) -> FeedbackResult:
    return _read(FeedbackResult, body, "the /feedback answer")


def performance(body: Any) -> Performance:
    return _read(Performance, body, "the /performance answer")


def model_info(body: Any) -> ModelInfo:
    """``GET /models``, read by the contract (:class:`ModelsAnswer`); ``manifest`` keeps
    the body as sent, fields this client does not know included."""
    answer = _read(ModelsAnswer, body, "the /models answer")
    by_input = {f.input: f.name for f in answer.features}
    return ModelInfo(
        name=answer.name,
        version=answer.version,
        task=answer.task,
        features=tuple(Feature(f.name, f.dtype, f.categories) for f in answer.features),
        experts=tuple(
            ExpertInfo(e.name, e.kind, tuple(by_input.get(i, i) for i in e.inputs), e.metrics)
            for e in answer.experts
        ),
        classes=answer.target.classes,
        metrics=answer.metrics,
        created_at=answer.created_at,
        manifest=body,
    )
