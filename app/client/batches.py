"""More rows than one request takes: split into batches of ``batch_rows``, answers joined
back in row order. Each batch is its own audited request (``<id>.<k>``), and an error
names the row in the whole frame (``instances[2517].age``), or the outcome among all the
outcomes sent (``outcomes[2517].outcome``)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from app.client.columnar import ColumnarResult
from app.client.errors import ClientError, FieldError, InvalidResponse
from app.client.results import FeedbackResult, PredictResult
from app.contract.request import REQUEST_ID

DEFAULT_BATCH_ROWS = 1000  # the service's default IABMA_MAX_BATCH_ROWS
_INSTANCE = re.compile(r"^(instances|outcomes)\[(\d+)\]")
# The fields that hold one entry per row.
_ROWS = (
    "label", "probabilities", "mean", "std", "lower", "upper", "weights", "expert_labels",
    "expert_probabilities", "expert_means",
)  # fmt: skip


def check_batch_rows(batch_rows: int) -> int:
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise ValueError(f"batch_rows must be a whole number >= 1, got {batch_rows!r}")
    return batch_rows


def split(rows: list[Any], batch_rows: int) -> list[list[Any]]:
    """The rows in batches of at most ``batch_rows``; an empty frame stays one (empty)
    request, which the service refuses with its own message."""
    check_batch_rows(batch_rows)
    return [rows[i : i + batch_rows] for i in range(0, len(rows), batch_rows)] or [rows]


def batch_ids(request_id: str | None, batches: int) -> list[str | None]:
    """Each batch's request id: the caller's as it is for one batch (the service judges
    it), ``<id>.<k>`` for several, and None (a fresh id per batch) when the caller gave
    none."""
    if request_id is None:
        return [None] * batches
    if batches == 1:
        return [request_id]
    ids: list[str | None] = [f"{request_id}.{k}" for k in range(batches)]
    last = str(ids[-1])
    if not REQUEST_ID.match(last):
        raise ValueError(
            f"request_id {request_id!r} is not a valid X-Request-ID once batch numbers are "
            f"added ({last!r}): 1-128 characters among letters, digits and ._:/+=-"
        )
    return ids


def shift(err: ClientError, offset: int) -> ClientError:
    """``err`` with its ``instances[i]`` (or ``outcomes[i]``) fields counted from the
    first row of all."""
    if offset == 0:
        return err

    def moved(name: str) -> str:
        return _INSTANCE.sub(lambda m: f"{m.group(1)}[{int(m.group(2)) + offset}]", name, count=1)

    err.field = moved(err.field)
    err.details = tuple(FieldError(d.code, d.message, moved(d.field)) for d in err.details)
    return err


def _same_model(parts: Sequence[ColumnarResult | PredictResult]) -> None:
    first = parts[0]
    for part in parts[1:]:
        if (part.model, part.version) != (first.model, first.version):
            raise InvalidResponse(
                f"the model changed from version {first.version} to {part.version} between "
                f"batches (request {part.request_id}); send the rows again",
                request_id=part.request_id,
            )


def join_feedback(parts: Sequence[FeedbackResult]) -> FeedbackResult:
    """The batches' counts, added up (one key posted them all: the first names it)."""
    return FeedbackResult(
        accepted=sum(p.accepted for p in parts),
        duplicates=sum(p.duplicates for p in parts),
        poster=parts[0].poster if parts else None,
    )


def join_rows(parts: Sequence[PredictResult]) -> PredictResult:
    """One answer from the batches' answers, in row order."""
    _same_model(parts)
    if len(parts) == 1:
        return parts[0]
    return dataclasses.replace(
        parts[0],
        predictions=tuple(item for p in parts for item in p.predictions),
        request_ids=tuple(p.request_id for p in parts),
    )


def join(parts: Sequence[ColumnarResult], index: Any) -> ColumnarResult:
    """One answer from the batches' answers, in row order, on the frame's ``index``."""
    _same_model(parts)
    first = parts[0]
    if any((p.experts, p.classes) != (first.experts, first.classes) for p in parts):
        raise InvalidResponse("the model's experts or classes changed between batches")
    if len(parts) == 1:
        return dataclasses.replace(first, index=index)
    joined: dict[str, Any] = {}
    for name in _ROWS:
        values = [getattr(p, name) for p in parts]
        joined[name] = None if values[0] is None else [v for vs in values for v in vs]
    if first.uncertainty is not None:
        joined["uncertainty"] = {
            k: [v for p in parts for v in (p.uncertainty or {})[k]] for k in first.uncertainty
        }
    return dataclasses.replace(
        first,
        **joined,
        n=sum(p.n for p in parts),
        request_ids=tuple(p.request_id for p in parts),
        index=index,
    )
