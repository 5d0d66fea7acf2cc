"""A group commit's rows, built together on the writer thread.

Each row is the one :meth:`AuditRecord.log_values` gives, value for value (the chain's
digests cover them). What costs is the answer's packing: numpy calls on a handful of
numbers, 12 of the 17 us a single-row record took, on the writer thread that holds the
GIL the event loop needs meanwhile. Records alike in shape (same task, rows, experts,
classes) have their arrays stacked and packed in one pass (:func:`packing.pack_many`).

A record whose row cannot be built gets the exception in its place, and the others their
rows: one request's fault fails that request alone (docs/design.md, "Audit trail").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from app.audit.store import packing
from app.audit.store.records import AuditRecord

_Shape = tuple[Any, ...]
Built = tuple[Any, ...] | Exception  # a record's row, or why it could not be built


def _shape(rec: AuditRecord) -> _Shape:
    """What records must share for their arrays to be packed together."""
    outputs = rec.expert_outputs
    spread = rec.expert_spread
    return (
        rec.task,
        rec.weights.shape,
        rec.prediction.shape,
        rec.uncertainty.shape,
        None if outputs is None else outputs.shape,
        # The model's, the same for a version's records; part of every regression blob.
        None if outputs is None or spread is None else np.asarray(spread, "<f8").tobytes(),
    )


def log_rows(records: Sequence[AuditRecord]) -> list[Built]:
    """Each record's :meth:`AuditRecord.log_values`, in order, or the exception that
    building it raised."""
    if len(records) == 1:
        return [_row(records[0])]
    groups: dict[_Shape, list[int]] = {}
    for k, rec in enumerate(records):
        groups.setdefault(_shape(rec), []).append(k)
    out: list[Built | None] = [None] * len(records)
    for at in groups.values():
        alike = [records[k] for k in at]
        try:
            built = _alike_rows(alike) if len(at) > 1 else [_row(alike[0])]
        except Exception:  # a record's arrays spoil the stack: each on its own
            built = [_row(rec) for rec in alike]
        for k, row in zip(at, built, strict=True):
            out[k] = row
    return out  # type: ignore[return-value]  # every place is filled


def _row(rec: AuditRecord, answer: bytes | None = None, top: int | None = None) -> Built:
    """One record's row (around ``answer`` and ``top`` when made with others'), or the
    exception that stopped it."""
    try:
        if answer is None or top is None:
            return rec.log_values()
        return rec.row(answer, top)
    except Exception as exc:
        return exc


def _alike_rows(alike: list[AuditRecord]) -> list[Built]:
    """The rows of records alike in shape, their arrays packed in one pass."""
    first = alike[0]
    outputs = None
    if first.expert_outputs is not None:
        outputs = np.stack([r.expert_outputs for r in alike])  # type: ignore[misc]
    weights = np.stack([r.weights for r in alike])
    packed = packing.pack_many(
        first.task,
        weights,
        np.stack([r.prediction for r in alike]),
        np.stack([r.uncertainty for r in alike]),
        outputs,
        first.expert_spread,
    )
    # One row each: its sum over rows is the row itself. Larger records sum as before
    # (numpy's sums over a different axis order need not round alike).
    if weights.shape[1] == 1:
        top = weights[:, 0, :].argmax(axis=1).tolist()
    else:
        top = [r.top() for r in alike]
    return [_row(rec, packed[j], top[j]) for j, rec in enumerate(alike)]
