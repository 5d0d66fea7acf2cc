"""Realised scores: each served row against its outcome, from what its record kept.

A row's scores are a (1 + m, 3) array: the mixture's, then each expert's, ``nll`` and two
more: classification ``correct`` (the label served was the outcome) and ``brier``;
regression ``squared_error`` and ``covered`` (the outcome inside the central 90%
interval). Nothing is predicted again: the mixture's answer, the weights and the experts'
own outputs are the record's.

Every score is finite: a probability, or a density, below :data:`TINY` counts as
``TINY``, so an NLL is at most :data:`NLL_CAP` (690.8 nats); a regression outcome is
within its model's range (:mod:`app.core.outcomes`), so its squared error is finite too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.audit.store.packing import REGRESSION_FIELDS
from app.audit.store.records import served_experts
from app.bundle.mixture import mix_regression
from app.bundle.normal import gaussian_logpdf

KINDS = 3  # scores per row and predictor: nll, then correct and brier, or error and covered
Z90 = 1.6448536269514722  # the standard normal's 95% quantile: an expert's 90% interval
TINY = 1e-300  # a probability of 0 would be an infinite NLL; the served ones never are
NLL_CAP = float(-np.log(TINY))  # 690.78: the NLL of a probability or density of TINY


@dataclass(frozen=True)
class Served:
    """What one audit record served, as its row holds it."""

    record_id: int
    request_id: str
    created_us: int
    version: str
    task: str
    n: int
    experts: str  # JSON list of names
    classes: str | None  # JSON list of labels (classification)
    weights: bytes
    prediction: bytes
    expert_outputs: bytes | None  # None: written before the experts' outputs were kept


@dataclass(frozen=True)
class Scored:
    """Rows of one version, scored: ``picks`` are their positions in the caller's list."""

    version: str
    experts: str
    picks: list[int]
    weights: np.ndarray  # (k, m)
    scores: np.ndarray  # (k, 1 + m, KINDS)


def score(rows: Sequence[tuple[Served, int, float]]) -> list[Scored]:
    """Score ``(record, row, outcome)`` triples; the outcome is a class index or a number.

    Rows are grouped by version (whose records share experts, classes and spreads) and
    each group's records are read as one array, so the work is a few numpy calls a group.
    """
    groups: dict[tuple[str, str], list[int]] = {}
    for k, (rec, _, _) in enumerate(rows):
        groups.setdefault((rec.version, rec.experts), []).append(k)
    return [_group(rows, picks) for picks in groups.values()]


def _group(rows: Sequence[tuple[Served, int, float]], picks: list[int]) -> Scored:
    first = rows[picks[0]][0]
    m = len(json.loads(first.experts))
    classes = len(json.loads(first.classes)) if first.classes is not None else 0
    order: dict[int, int] = {}
    records: list[Served] = []
    for k in picks:
        rec = rows[k][0]
        if rec.record_id not in order:
            order[rec.record_id] = len(records)
            records.append(rec)
    starts = np.cumsum([0] + [r.n for r in records])[:-1]
    at = np.array([starts[order[rows[k][0].record_id]] + rows[k][1] for k in picks])
    weights = np.frombuffer(b"".join(r.weights for r in records), "<f8").reshape(-1, m)[at]
    width = classes if first.task == "classification" else REGRESSION_FIELDS
    answer = np.frombuffer(b"".join(r.prediction for r in records), "<f8").reshape(-1, width)
    # Each record's blob holds its rows' outputs; regression's end with the version's spread.
    spread = served_experts(first.expert_outputs, first.task, first.n, m, classes)
    assert spread is not None
    size = 8 * m * (classes or 1)
    blobs = b"".join(_outputs(r)[: size * r.n] for r in records)
    outputs = np.frombuffer(blobs, "<f8").reshape(-1, m, classes or 1)[at]
    y = np.array([rows[k][2] for k in picks])
    if first.task == "classification":
        scores = classification(answer[at], outputs, y.astype(np.int64))
    else:
        assert spread.std is not None
        means = outputs[:, :, 0]
        std = _spreads(records, size, m, spread.std)
        std = std if std.ndim == 1 else std[at]
        scores = regression(weights, answer[at], means, std, spread.temperature, y)
    return Scored(first.version, first.experts, picks, weights, scores)


def _spreads(records: list[Served], size: int, m: int, first: np.ndarray) -> np.ndarray:
    """The experts' stds: the version's (m,) when every record kept the same, else each
    record's rows' own (the bundle serves per-row sds), stacked as (rows, m)."""
    tails = [_outputs(r)[size * r.n :] for r in records]
    if first.ndim == 1 and all(t == tails[0] for t in tails):
        return first
    per = [
        np.broadcast_to(np.frombuffer(t, "<f8")[:-1].reshape(-1, m), (r.n, m))
        for t, r in zip(tails, records, strict=True)
    ]
    return np.concatenate(per)


def _outputs(rec: Served) -> bytes:
    assert rec.expert_outputs is not None, "refused before scoring (app.core.feedback)"
    return rec.expert_outputs


def classification(proba: np.ndarray, experts: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``proba`` (k, C) served mixture, ``experts`` (k, m, C) served experts, ``y`` class
    indices (k,)."""
    k, m, c = experts.shape
    rows = np.arange(k)
    onehot = np.eye(c)[y]
    out = np.empty((k, 1 + m, KINDS))
    out[:, 0, 0] = -np.log(np.maximum(proba[rows, y], TINY))
    out[:, 0, 1] = proba.argmax(axis=1) == y
    out[:, 0, 2] = ((proba - onehot) ** 2).sum(axis=1)
    out[:, 1:, 0] = -np.log(np.maximum(experts[rows, :, y], TINY))
    out[:, 1:, 1] = experts.argmax(axis=2) == y[:, None]
    out[:, 1:, 2] = ((experts - onehot[:, None, :]) ** 2).sum(axis=2)
    return out


def regression(
    weights: np.ndarray,
    answer: np.ndarray,
    means: np.ndarray,
    std: np.ndarray,
    temperature: float,
    y: np.ndarray,
) -> np.ndarray:
    """``answer`` (k, 4) the served mean, std and 90% interval; ``means`` (k, m) the
    experts' served means, ``std`` (m,) or (k, m) their served stds; the mixture's components are
    the experts tempered by ``temperature``, as the served graph mixes them."""
    k, m = means.shape
    out = np.empty((k, 1 + m, KINDS))
    out[:, 0, 0] = np.minimum(-mix_regression(weights, means, std, temperature).logpdf(y), NLL_CAP)
    out[:, 0, 1] = (y - answer[:, 0]) ** 2
    out[:, 0, 2] = (answer[:, 2] <= y) & (y <= answer[:, 3])
    out[:, 1:, 0] = np.minimum(-gaussian_logpdf(y[:, None], means, std), NLL_CAP)
    out[:, 1:, 1] = (y[:, None] - means) ** 2
    out[:, 1:, 2] = np.abs(y[:, None] - means) <= Z90 * std
    return out
