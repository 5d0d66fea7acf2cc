"""How :class:`~training.combiners.iabma_gate.IABMAGate` chooses its variant on training rows.

Every candidate ``(objective, kl_weight, prior temperature)`` is scored by the mixture NLL
on held-out training rows, never on test data:

- small data is compared by k-fold cross-validation (every row held out once, repeated
  on the smallest data), large data on one validation split;
- in the first split all candidates train for a twelfth of the epochs, then only the
  ``SURVIVORS`` best go on (successive halving): the clearly worse candidates, large
  lambda mostly, never recover, and they would cost most of the time;
- with early stopping, a pass ends once ``patience`` epochs in a row improved no
  candidate; each split stops on its own, and only the epochs every split reached are
  compared;
- with early stopping the winner's training length is chosen too (lowest NLL, or the
  earliest epoch within one paired standard error of it);
- the mixture temperature is fitted on the winner's held-out predictions;
- the winner must then beat the uniform average, the best expert and stacking's linear
  pool on the same rows (:mod:`training.combiners.fallback`), or the best of those ships.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from app.bundle.mixture import log_sum_exp
from training.combiners.fallback import (
    POOL_PENALTY,
    GateChoice,
    choose_gate,
    fit_temperature,
    pooled_weights,
)
from training.errors import ParameterError
from training.evidence import Evidence
from training.nn.net import softmax_f32
from training.nn.trainer import Member, train_members
from training.splits import folds, inner_split

# (rows up to, folds): small data is compared by cross-validation, where the cost is low
# and one split would be noise; above 3000 rows one validation split holds enough rows.
AUTO_FOLDS = ((999, 5), (3000, 3))
# (rows up to, repeats): on the smallest data even 5 folds leave the choice of epochs noisy,
# and repeating the cross-validation with other folds is cheap there.
AUTO_REPEATS = ((999, 2),)
# Candidates still trained after the first twelfth of the epochs of the first split.
SURVIVORS = 2
HALVING_FRACTION = 12


@dataclass(frozen=True)
class SelectionConfig:
    """The gate's settings that the search reads, checked and fixed for one ``fit``.

    Each field is the :class:`~training.combiners.iabma_gate.IABMAGate` parameter of the
    same meaning; ``folds`` and ``repeats`` may still be ``"auto"``, resolved against the
    number of rows by :func:`selection_splits`.
    """

    epochs: int
    batch_size: int
    hidden: tuple[int, ...]
    learning_rate: float
    temperature: float | Literal["auto"] | None
    early_stopping: bool
    stopping_rule: Literal["one_se", "min"]
    fallback: bool
    folds: int | Literal["auto"]
    repeats: int | Literal["auto"]
    validation_fraction: float
    search_max_rows: int | None
    random_state: int
    patience: int | None = None
    progress: bool = False

    def net_kwargs(self) -> dict[str, Any]:
        """The network and optimiser settings, as :func:`train_members` takes them."""
        return {
            "hidden": self.hidden,
            "learning_rate": self.learning_rate,
            "batch_size": self.batch_size,
            "random_state": self.random_state,
            "progress": self.progress,
        }


@dataclass(frozen=True)
class SearchOutcome:
    winner: int  # index into the candidates
    steps: int  # optimiser steps the winner trained for when it scored best
    temperature: float
    scores: list[dict[str, Any]]  # per candidate: its epochs and val NLL, or when it was pruned
    n_splits: int
    choice: GateChoice | None = None  # the network against the plain gates, if compared


def _auto(value: Any, table: tuple[tuple[int, int], ...], n: int, name: str) -> int:
    if value == "auto":
        return next((k for rows, k in table if n <= rows), 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParameterError(name, value, "must be an integer >= 1 or 'auto'")
    return value


def selection_splits(config: SelectionConfig, ev: Evidence) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, held-out) index pairs over the gate's training rows."""
    k = _auto(config.folds, AUTO_FOLDS, ev.n, "selection_folds")
    repeats = _auto(config.repeats, AUTO_REPEATS, ev.n, "selection_repeats")
    seed = config.random_state
    if k == 1:
        return [
            inner_split(ev.y, ev.task, config.validation_fraction, seed + r) for r in range(repeats)
        ]
    return [
        (np.sort(tr), np.sort(va))
        for r in range(repeats)
        for tr, va in folds(ev.y, ev.task, k, seed + r)
    ]


def best_epochs(nll: np.ndarray, early_stopping: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate: the epoch index to keep (the last unless early stopping), its NLL."""
    if early_stopping:
        epochs = np.argmin(np.where(np.isfinite(nll), nll, np.inf), axis=0)
    else:
        epochs = np.full(nll.shape[1], nll.shape[0] - 1)
    return epochs, nll[epochs, np.arange(nll.shape[1])]


def one_se_epoch(
    epoch: int, logits: list[np.ndarray], held_out: list[np.ndarray], ev: Evidence
) -> int:
    """The earliest epoch no worse than ``epoch`` by one paired standard error.

    Each held-out row's NLL at an earlier epoch is compared with its own NLL at the best
    epoch, so the test sees the difference the extra training makes rather than how much
    rows differ from one another (which would stop far too early).
    """
    rows = ev.log_lik[np.concatenate(held_out)]
    lq = np.concatenate([lg[: epoch + 1] for lg in logits], axis=1).astype(np.float64)
    lq -= lq.max(axis=2, keepdims=True)
    lq -= np.log(np.exp(lq).sum(axis=2, keepdims=True))
    per_row = -log_sum_exp(lq + rows[None], axis=2)  # (epochs, rows)
    diff = per_row - per_row[epoch]
    se = diff.std(axis=1, ddof=1) / np.sqrt(diff.shape[1])
    return int(np.flatnonzero(diff.mean(axis=1) <= se)[0])


def search_candidates(
    config: SelectionConfig,
    Z: np.ndarray,
    ev: Evidence,
    log_priors: np.ndarray,
    members: list[Member],
) -> SearchOutcome:
    """Train and score every candidate on held-out rows; return the winner."""
    epochs_max = config.epochs
    calibrate = config.temperature == "auto"
    one_se = config.early_stopping and config.stopping_rule == "one_se"
    record = calibrate or one_se or config.fallback
    splits = selection_splits(config, ev)
    rng = np.random.default_rng(config.random_state)
    alive = list(range(len(members)))
    total = np.zeros((epochs_max, len(members)))
    count = np.zeros(len(members))
    pruned: dict[int, tuple[int, float]] = {}  # candidate -> (after epoch, best val NLL)
    logits: dict[int, list[np.ndarray]] = {k: [] for k in alive}
    held_out: dict[int, list[np.ndarray]] = {k: [] for k in alive}
    steps_per_epoch, epochs_cap = 1, epochs_max
    halve_at = max(1, epochs_max // HALVING_FRACTION)
    for split, (tr, va) in enumerate(splits):
        if config.search_max_rows is not None and len(tr) > config.search_max_rows:
            tr = np.sort(rng.choice(tr, size=config.search_max_rows, replace=False))
        steps_per_epoch = -(-len(tr) // config.batch_size)
        halve = split == 0 and len(alive) > SURVIVORS and epochs_max >= 4
        res = train_members(
            Z[tr],
            ev.log_lik[tr],
            log_priors[:, tr],
            [members[k] for k in alive],
            epochs=epochs_cap,
            validation=(Z[va], ev.log_lik[va]),
            record_val_logits=record,
            prune=(halve_at, SURVIVORS) if halve else None,
            patience=config.patience if config.early_stopping else None,
            **config.net_kwargs(),
        )
        assert res.val_nll is not None
        # Only the epochs that every split reached are compared: no later pass need
        # run longer than the shortest so far.
        epochs_cap = min(epochs_cap, res.epochs_run)
        survivors = []
        for i, k in enumerate(alive):
            history = res.val_nll[:, i]
            if res.layers[i] is None:
                assert res.pruned_after is not None
                pruned[k] = (res.pruned_after, float(np.nanmin(history)))
                continue
            survivors.append(k)
            total[: len(history), k] += history * len(va)
            count[k] += len(va)
            held_out[k].append(va)
            if record:
                assert res.val_logits is not None
                logits[k].append(res.val_logits[:, i])
        alive = survivors
    total[epochs_cap:] = np.nan
    epochs, scores = best_epochs(total[:, alive] / count[alive], config.early_stopping)
    best = int(np.argmin(scores))
    winner, epoch = alive[best], int(epochs[best])
    if one_se:
        epoch = one_se_epoch(epoch, logits[winner], held_out[winner], ev)
    fixed = config.temperature
    temperature = float(fixed) if isinstance(fixed, (int, float)) else 1.0
    choice = None
    if record:
        w = np.concatenate([softmax_f32(lg[epoch]) for lg in logits[winner]])
        rows = ev.rows(np.concatenate(held_out[winner]))
        if calibrate:
            temperature = fit_temperature(w, rows)
        if config.fallback:
            # Stacking's pooled weights for each split, fitted on its training rows only.
            pooled = np.concatenate(
                [
                    np.tile(pooled_weights(ev.log_lik[tr], POOL_PENALTY), (len(va), 1))
                    for tr, va in splits
                ]
            )
            everywhere = pooled_weights(ev.log_lik, POOL_PENALTY)
            choice = choose_gate(w, temperature, rows, ev, calibrate, (pooled, everywhere))
    report: list[dict[str, Any]] = []
    for k in range(len(members)):
        if k in alive:
            i = alive.index(k)
            report.append({"epochs": int(epochs[i]) + 1, "val_nll": float(scores[i])})
        else:
            report.append({"pruned_after_epoch": pruned[k][0], "val_nll": pruned[k][1]})
    steps = (epoch + 1) * steps_per_epoch
    return SearchOutcome(winner, steps, temperature, report, len(splits), choice)
