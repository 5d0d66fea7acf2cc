"""A group commit's rows, built together on the writer thread.

Each row is the one :meth:`AuditRecord.log_values` gives, value for value (the chain's
digests cover them). What costs is the answer's packing: numpy calls on a handful of
numbers, 12 of the 17 us a single-row record took, on the writer thread that holds the
GIL the event loop needs meanwhile. Records alike in shape (same task, rows, experts,
classes) have their arrays stacked and packed in one pass (:func:`codec.pack_many`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from app.audit import codec
from app.audit.records import AuditRecord

_Shape = tuple[Any, ...]


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


def log_rows(records: Sequence[AuditRecord]) -> list[tuple[Any, ...]]:
    """Each record's :meth:`AuditRecord.log_values`, in order."""
    if len(records) == 1:
        return [records[0].log_values()]
    groups: dict[_Shape, list[int]] = {}
    for k, rec in enumerate(records):
        groups.setdefault(_shape(rec), []).append(k)
    answers: list[bytes] = [b""] * len(records)
    tops: list[int] = [0] * len(records)
    for at in groups.values():
        if len(at) == 1:
            rec = records[at[0]]
            answers[at[0]], tops[at[0]] = rec.answer(), rec.top()
            continue
        alike = [records[k] for k in at]
        first = alike[0]
        outputs = None
        if first.expert_outputs is not None:
            outputs = np.stack([r.expert_outputs for r in alike])  # type: ignore[misc]
        weights = np.stack([r.weights for r in alike])
        packed = codec.pack_many(
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
        for j, k in enumerate(at):
            answers[k], tops[k] = packed[j], top[j]
    return [rec.row(answers[k], tops[k]) for k, rec in enumerate(records)]
