"""The answers sent one array per field: ``POST /predict`` with ``format: columnar``, and
the Open Inference Protocol's output tensors (``POST /v2/models/{name}/infer``).

Metadata as in :mod:`app.contract.answers`, and: ``task`` (a field of that task's answers
only); ``need`` (always sent in that task's answers); ``shape`` (the sizes of nested
arrays: None for one entry per row, ``experts`` or ``classes`` for one per expert or
class); ``per_row_shape`` (the shape where the bundle serves per-row expert sds). A
``Sequence`` is a column, read as the list sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from app.contract.answers import Label

C, R = "classification", "regression"


def _part(task: str | None = None, **meta: Any) -> dict[str, Any]:
    """A part of the answer: sent when ``include`` asks for it (and only for ``task``)."""
    return {"omit": True, **({"task": task} if task else {}), **meta}


def _needed(task: str, **meta: Any) -> dict[str, Any]:
    """Sent in every answer of ``task``, absent from the other task's."""
    return {"omit": True, "task": task, "need": True, **meta}


@dataclass(frozen=True)
class IntervalColumns:
    level: float = field(metadata={"const": "interval"})
    lower: Sequence[float]
    upper: Sequence[float]


@dataclass(frozen=True)
class ExpertColumns:
    """Each expert's own prediction: per row, one entry per expert, in ``experts`` order;
    a regression expert's std is one number per expert, the same for every row, or one
    per row and expert where the bundle's experts give their own per-row variance."""

    label: Sequence[Sequence[Label]] | None = field(
        default=None, metadata=_needed(C, enum="classes", shape=(None, "experts"))
    )
    probabilities: Sequence[Sequence[Sequence[float]]] | None = field(
        default=None, metadata=_needed(C, shape=(None, "experts", "classes"))
    )
    mean: Sequence[Sequence[float]] | None = field(
        default=None, metadata=_needed(R, shape=(None, "experts"))
    )
    std: Sequence[float] | Sequence[Sequence[float]] | None = field(
        default=None,
        metadata=_needed(R, shape=("experts",), per_row_shape=(None, "experts")),
    )


@dataclass(frozen=True)
class UncertaintyColumns:
    total: Sequence[float]
    aleatoric: Sequence[float]
    epistemic: Sequence[float]
    selection: Sequence[float]


@dataclass(frozen=True)
class ColumnarPredictions:
    """One array per field, rows in instance order; the fields follow include."""

    label: Sequence[Label] | None = field(default=None, metadata=_part(C, enum="classes"))
    probabilities: Sequence[Sequence[float]] | None = field(
        default=None, metadata=_part(C, shape=(None, "classes"))
    )
    mean: Sequence[float] | None = field(default=None, metadata=_part(R))
    std: Sequence[float] | None = field(default=None, metadata=_part(R))
    interval: IntervalColumns | None = field(default=None, metadata=_part(R))
    weights: Sequence[Sequence[float]] | None = field(
        default=None, metadata=_part(shape=(None, "experts"))
    )
    experts: ExpertColumns | None = field(default=None, metadata=_part())
    uncertainty: UncertaintyColumns | None = field(default=None, metadata=_part())

    @property
    def n(self) -> int:
        """How many instances the answer holds, whichever parts it has."""
        for column in (self.label, self.mean, self.weights):
            if column is not None:
                return len(column)
        if self.uncertainty is not None:
            return len(self.uncertainty.total)
        assert self.experts is not None
        return len(self.experts.label or self.experts.mean or ())


@dataclass(frozen=True)
class PredictColumnarAnswer:
    """``POST /predict`` with ``format: columnar``."""

    model: str = field(metadata={"const": "name"})
    version: str
    request_id: str
    task: str = field(metadata={"const": "task"})
    format: Literal["columnar"]
    experts: tuple[str, ...] = field(metadata={"const": "experts"})
    predictions: ColumnarPredictions
    classes: tuple[Label, ...] | None = field(default=None, metadata=_needed(C, const="classes"))


UNCERTAINTY_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(UncertaintyColumns))


@dataclass(frozen=True)
class OutputTensor:
    """One output, row-major; ``parameters`` name its columns (``classes``, ``experts``,
    ``components``) or the interval's ``level``."""

    name: str = field(metadata={"enum": "outputs"})
    datatype: str
    shape: tuple[int, ...] = field(metadata={"minimum": 0})
    data: Sequence[float | str]
    parameters: Mapping[str, Any] | None = field(default=None, metadata=_part())


@dataclass(frozen=True)
class InferParameters:
    request_id: str
    task: str = field(metadata={"const": "task"})
    experts: tuple[str, ...] = field(metadata={"const": "experts"})


@dataclass(frozen=True)
class InferenceResponse:
    """``POST /v2/models/{name}/infer``: the outputs asked for, all by default."""

    model_name: str = field(metadata={"const": "name"})
    model_version: str
    id: str
    parameters: InferParameters
    outputs: tuple[OutputTensor, ...]
