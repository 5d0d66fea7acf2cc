"""The search's held-out record, and the choice of a network from it.

:class:`HeldOut` keeps every surviving candidate's logits, mixture NLL and networks at every
epoch on the rows each split held out; :func:`choose_network` picks the candidate, its
epoch and its temperature on any subset of those rows, so that the guard can repeat the
choice without the rows that judge it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from app.bundle.mixture import log_sum_exp
from training.combiners.fallback import fit_temperature
from training.evidence import Evidence
from training.nn.adam import log_softmax
from training.nn.net import softmax_f32

if TYPE_CHECKING:
    from training.combiners.selection import SelectionConfig

Layers = list[tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class HeldOut:
    """Every survivor's held-out predictions, pooled over the selection's splits.

    One entry per (split, held-out row); a row held out in several splits (repeated
    cross-validation) has several entries.
    """

    rows: np.ndarray  # (N,) the training row of each entry
    split: np.ndarray  # (N,) the split that held it out
    steer: np.ndarray  # (N,) bool: the row steered a training pass (halving, stopping)
    logits: dict[int, np.ndarray]  # survivor -> (epochs, N, m) gate logits
    nll: dict[int, np.ndarray]  # survivor -> (epochs, N) mixture NLL at temperature 1
    pooled: np.ndarray  # (N, m) stacking's pool, fitted on the entry's split's training rows
    nets: dict[int, list[list[Layers]]]  # survivor -> per split, its layers after each epoch
    folds: bool  # the splits are folds (every row held out once per repeat)

    def row_mean(self, values: np.ndarray, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of ``entries`` (sorted) and the mean of ``values`` (one per entry) over
        each row's entries: a row held out by several splits is judged by their average."""
        rows, inverse = np.unique(self.rows[entries], return_inverse=True)
        total = np.zeros((len(rows), *values.shape[1:]))
        np.add.at(total, inverse, values)
        return rows, total / np.bincount(inverse)[(...,) + (None,) * (values.ndim - 1)]


@dataclass(frozen=True)
class NetworkChoice:
    """A candidate, the epoch it is taken at, and its mixture temperature."""

    candidate: int
    epoch: int
    temperature: float
    scores: dict[int, tuple[int, float]]  # survivor -> (best epoch, held-out NLL there)

    def weights(self, held: HeldOut, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of these held-out entries and the chosen network's weights there."""
        w = softmax_f32(held.logits[self.candidate][self.epoch][entries])
        return held.row_mean(w, entries)

    def bag(self, held: HeldOut) -> list[Layers]:
        """The chosen candidate's network of every split, at the chosen epoch."""
        return [per_epoch[self.epoch] for per_epoch in held.nets[self.candidate]]


def entry_nll(logits: np.ndarray, log_lik: np.ndarray) -> np.ndarray:
    """(epochs, N, m) gate logits and (N, m) L -> (epochs, N) mixture NLL."""
    return -log_sum_exp(log_softmax(logits.astype(np.float64)) + log_lik[None], axis=2)


def choose_network(
    held: HeldOut, use: np.ndarray, config: SelectionConfig, ev: Evidence
) -> NetworkChoice:
    """The candidate with the lowest held-out NLL over the entries ``use``, its epoch
    (the best, or the earliest within one paired standard error of it) and its
    temperature, all judged on those entries alone."""
    scores: dict[int, tuple[int, float]] = {}
    for k, nll in held.nll.items():
        curve = nll[:, use].mean(axis=1)
        epoch = int(np.argmin(curve)) if config.early_stopping else len(curve) - 1
        scores[k] = (epoch, float(curve[epoch]))
    winner = min(scores, key=lambda k: scores[k][1])
    epoch = scores[winner][0]
    if config.early_stopping and config.stopping_rule == "one_se":
        epoch = one_se_epoch(held.nll[winner][: epoch + 1, use])
    fixed = config.temperature
    temperature = float(fixed) if isinstance(fixed, (int, float)) else 1.0
    choice = NetworkChoice(winner, epoch, temperature, scores)
    if fixed == "auto":
        rows, w = choice.weights(held, use)
        choice = replace(choice, temperature=fit_temperature(w, ev.rows(rows)))
    return choice


def one_se_epoch(per_row: np.ndarray) -> int:
    """The earliest epoch no worse than the last by one paired standard error.

    ``per_row`` is (epochs, rows) held-out NLL up to the best epoch. Each row's NLL at an
    earlier epoch is compared with its own NLL at the best, so the test sees the
    difference the extra training makes rather than how much rows differ from one
    another (which would stop far too early).
    """
    diff = per_row - per_row[-1]
    se = diff.std(axis=1, ddof=1) / np.sqrt(diff.shape[1])
    return int(np.flatnonzero(diff.mean(axis=1) <= se)[0])
