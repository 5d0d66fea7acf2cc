"""Frames in, columns out: what ``predict_frame`` sends and what it returns.

The service takes rows (``{"instances": [...]}``) and can answer one array per field
(``"format": "columnar"``, :class:`app.contract.columns.PredictColumnarAnswer`), which is
flattened here into one list per column. A pandas DataFrame, a pyarrow Table or a mapping of columns
becomes rows here, with NaN, ``pd.NA``, ``NaT`` and nulls sent as ``null`` (a missing
value). pandas, numpy and pyarrow are imported only when a caller hands over, or asks
for, one of their objects.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from app.client.errors import InvalidResponse
from app.client.results import Label
from app.contract.columns import ExpertColumns, PredictColumnarAnswer
from app.contract.reader import Unreadable, read


@dataclass(frozen=True)
class ColumnarResult:
    """One list per field, in row order. Parts left out by ``include`` are ``None``.

    Classification fills ``label`` and ``probabilities`` (one row of ``len(classes)``
    numbers per instance); regression fills ``mean``, ``std`` and the interval's
    ``lower``/``upper`` at ``interval_level``. ``weights`` rows follow ``experts``.
    """

    model: str
    version: str
    request_id: str
    task: str
    n: int
    experts: tuple[str, ...]
    classes: tuple[Label, ...] | None
    label: Sequence[Label] | None = None
    probabilities: Sequence[Sequence[float]] | None = None
    mean: Sequence[float] | None = None
    std: Sequence[float] | None = None
    interval_level: float | None = None
    lower: Sequence[float] | None = None
    upper: Sequence[float] | None = None
    weights: Sequence[Sequence[float]] | None = None
    expert_labels: Sequence[Sequence[Label]] | None = None
    expert_probabilities: Sequence[Sequence[Sequence[float]]] | None = None
    expert_means: Sequence[Sequence[float]] | None = None
    # Regression: one std per expert, or per row and expert (a bundle whose experts give
    # their own per-row variance).
    expert_std: Sequence[float] | Sequence[Sequence[float]] | None = None
    uncertainty: Mapping[str, Sequence[float]] | None = None
    # Every batch's request id, in row order, when the frame went in several (one if not).
    request_ids: tuple[str, ...] = ()
    index: Any = field(default=None, compare=False, repr=False)  # the input frame's index

    def __len__(self) -> int:
        return self.n

    def columns(self) -> dict[str, list[Any]]:
        """A flat table: ``label``, ``probability.<class>``, ``weight.<expert>``,
        ``expert.<expert>.mean``, ``uncertainty.total``, ... one list per column."""
        n, out = len(self), dict[str, list[Any]]()
        if self.label is not None:
            out["label"] = list(self.label)
        if self.probabilities is not None:
            out.update(_split(self.probabilities, [f"probability.{c}" for c in self.classes or ()]))
        for name in ("mean", "std", "lower", "upper"):
            part = getattr(self, name)
            if part is not None:
                out[name] = list(part)
        if self.weights is not None:
            out.update(_split(self.weights, [f"weight.{e}" for e in self.experts]))
        if self.expert_labels is not None:
            out.update(_split(self.expert_labels, [f"expert.{e}.label" for e in self.experts]))
        if self.expert_probabilities is not None:
            for j, e in enumerate(self.experts):
                rows = [r[j] for r in self.expert_probabilities]
                out.update(
                    _split(rows, [f"expert.{e}.probability.{c}" for c in self.classes or ()])
                )
        if self.expert_means is not None:
            out.update(_split(self.expert_means, [f"expert.{e}.mean" for e in self.experts]))
        std = self.expert_std
        if std is not None and len(std) and isinstance(std[0], Sequence):
            per_row = cast(Sequence[Sequence[float]], std)
            out.update(_split(per_row, [f"expert.{e}.std" for e in self.experts]))
        elif std is not None:
            out.update({f"expert.{e}.std": [s] * n for e, s in zip(self.experts, std, strict=True)})
        for k, v in (self.uncertainty or {}).items():
            out[f"uncertainty.{k}"] = list(v)
        return out

    def to_pandas(self) -> Any:
        """The flat table as a DataFrame, on the input frame's index when it had one."""
        import pandas as pd

        return pd.DataFrame(self.columns(), index=self.index)

    def to_arrow(self) -> Any:
        import pyarrow as pa

        return pa.table(self.columns())


def _split(rows: Sequence[Sequence[Any]], names: list[str]) -> dict[str, list[Any]]:
    return {name: [r[j] for r in rows] for j, name in enumerate(names)}


def columnar_result(body: Any, index: Any = None) -> ColumnarResult:
    """The columnar answer, read by the contract (:class:`PredictColumnarAnswer`)."""
    try:
        answer = read(PredictColumnarAnswer, body, "the columnar /predict answer")
    except (Unreadable, KeyError, TypeError, ValueError) as exc:
        raise InvalidResponse(str(exc)) from None
    p, interval = answer.predictions, answer.predictions.interval
    experts = p.experts or ExpertColumns()
    return ColumnarResult(
        model=answer.model,
        version=answer.version,
        request_id=answer.request_id,
        task=answer.task,
        n=p.n,
        experts=answer.experts,
        classes=answer.classes,
        label=p.label,
        probabilities=p.probabilities,
        mean=p.mean,
        std=p.std,
        interval_level=None if interval is None else interval.level,
        lower=None if interval is None else interval.lower,
        upper=None if interval is None else interval.upper,
        weights=p.weights,
        expert_labels=experts.label,
        expert_probabilities=experts.probabilities,
        expert_means=experts.mean,
        expert_std=experts.std,
        uncertainty=None if p.uncertainty is None else dict(vars(p.uncertainty)),
        request_ids=(answer.request_id,),
        index=index,
    )


def _cell(v: Any) -> Any:
    """A JSON value for one cell: missing markers to None, numpy scalars to Python."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    item = getattr(v, "item", None)
    if item is not None and not isinstance(v, (str, bytes)):
        v = item()
        return None if isinstance(v, float) and math.isnan(v) else v
    return v


def _named(names: list[Any]) -> list[str]:
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise TypeError(
            f"frame column names must be text (the model's feature names); got {bad[:5]!r}"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"frame column names must be unique; repeated: {twice[:5]!r}")
    return list(names)


def frame_rows(frame: Any) -> tuple[list[dict[str, Any]], Any]:
    """``(rows, index)``: a DataFrame, pyarrow Table/RecordBatch or mapping of columns as
    JSON-ready rows, and the index to put on the answer (a DataFrame's own, else None)."""
    module = type(frame).__module__.split(".", 1)[0]
    if module == "pandas" and hasattr(frame, "to_dict"):
        names = _named(list(frame.columns))
        # object dtype first, so where() can put None in numeric columns as well.
        clean = frame.astype(object).where(frame.notna(), None)
        rows = [dict(zip(names, map(_cell, r), strict=True)) for r in clean.itertuples(False, None)]
        return rows, frame.index
    if module == "pyarrow" and hasattr(frame, "to_pylist"):
        names = _named(list(frame.column_names))
        rows = [{k: _cell(v) for k, v in r.items()} for r in frame.to_pylist()]
        return rows, None
    if isinstance(frame, Mapping):
        names = _named(list(frame))
        columns = [list(frame[k]) for k in names]
        lengths = {len(c) for c in columns}
        if len(lengths) > 1:
            raise ValueError(f"frame columns differ in length: {sorted(lengths)}")
        return [
            dict(zip(names, map(_cell, r), strict=True)) for r in zip(*columns, strict=True)
        ], None
    raise TypeError(
        "frame must be a pandas DataFrame, a pyarrow Table or RecordBatch, or a mapping of "
        f"column name to values; got {type(frame).__name__}"
    )
