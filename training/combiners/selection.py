"""How :class:`~training.combiners.iabma_gate.IABMAGate` chooses its network on training rows.

:func:`search_candidates` trains every candidate ``(objective, kl_weight, prior
temperature)`` on the selection's splits and keeps each survivor's held-out logits and
networks at every epoch (:class:`~training.combiners.choice.HeldOut`), and chooses on all
of them. docs/method.md, "The gate", says why each step is so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from training.combiners.choice import HeldOut, Layers, NetworkChoice, choose_network, entry_nll
from training.combiners.fallback import (
    POOL_PENALTY,
    calibrated_pool,
    pooled_weights,
    tempered_log_lik,
)
from training.errors import ParameterError
from training.evidence import Evidence
from training.nn.trainer import Member, train_members
from training.splits import folds, inner_split

# (rows up to, folds): small data is compared by cross-validation, where the cost is low
# and one split would be noise; above 3000 rows one validation split holds enough rows.
# (3 folds on california's 16,512 rows judged on 11,000 rows, not 1,650, but the gate's
# fit took 1.8x as long: past the tenth of the paper's time.)
AUTO_FOLDS = ((999, 5), (3000, 3))
# (rows up to, repeats): none by default. The shipped gate averages the fold networks,
# which steadies the choice of epochs that repeats were once needed for on small data.
AUTO_REPEATS: tuple[tuple[int, int], ...] = ()
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
    guard_se: float = 1.0
    tempered: bool = True
    progress: bool = False
    pool_penalty: float = POOL_PENALTY  # the L2 weight on the logits of stacking's pool

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
class SplitData:
    """One split's rows as the search trained on them, kept for the path's pass."""

    train: np.ndarray  # the (capped) training rows
    held_out: np.ndarray
    log_pool: np.ndarray  # (m,) log weights of stacking's pool fitted on ``train``
    lik_train: np.ndarray  # (len(train), m) the experts' tempered log-likelihoods
    lik_held: np.ndarray


@dataclass(frozen=True)
class SearchOutcome:
    held: HeldOut
    chosen: NetworkChoice  # on every held-out entry
    steps_per_epoch: int
    pruned: dict[int, tuple[int, float]]  # candidate -> (after epoch, best held-out NLL)
    n_splits: int
    splits: tuple[SplitData, ...] = ()
    epochs_run: int = 0  # the length every split trained for


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


def steering_rows(
    config: SelectionConfig, ev: Evidence, splits: list[tuple[np.ndarray, np.ndarray]]
) -> np.ndarray:
    """The held-out rows of the first split that steer the search (halving, stopping).

    With folds, that is the first fold; with one validation split, a random half of it,
    so that the other half is left to judge the network without bias.
    """
    va = splits[0][1]
    if _auto(config.folds, AUTO_FOLDS, ev.n, "selection_folds") > 1:
        return va
    rng = np.random.default_rng(config.random_state)
    return np.sort(rng.choice(va, size=max(1, len(va) // 2), replace=False))


def search_candidates(
    config: SelectionConfig,
    Z: np.ndarray,
    ev: Evidence,
    log_priors: np.ndarray,
    members: list[Member],
) -> SearchOutcome:
    """Train every candidate on the selection's splits and keep the survivors' held-out
    logits; choose on all of them.

    Only the first split's steering rows decide the halving and the end of a pass; the
    later splits train every survivor to the first split's length.
    """
    splits = selection_splits(config, ev)
    steer = steering_rows(config, ev, splits)
    rng = np.random.default_rng(config.random_state)
    alive = list(range(len(members)))
    pruned: dict[int, tuple[int, float]] = {}
    logits: dict[int, list[np.ndarray]] = {k: [] for k in alive}
    nets: dict[int, list[list[Layers]]] = {k: [] for k in alive}
    folded = _auto(config.folds, AUTO_FOLDS, ev.n, "selection_folds") > 1
    pooled: list[np.ndarray] = []
    held_lik: list[np.ndarray] = []
    kept: list[SplitData] = []
    steps_per_epoch, epochs_cap = 1, config.epochs
    halve_at = max(1, config.epochs // HALVING_FRACTION)
    for split, (tr, va) in enumerate(splits):
        if config.search_max_rows is not None and len(tr) > config.search_max_rows:
            tr = np.sort(rng.choice(tr, size=config.search_max_rows, replace=False))
        steps_per_epoch = -(-len(tr) // config.batch_size)
        first = split == 0
        if config.tempered:
            pool, t_split = calibrated_pool(ev.rows(tr), config.pool_penalty)
        else:
            pool, t_split = pooled_weights(ev.log_lik[tr], config.pool_penalty), 1.0
        # The networks learn weights for the experts as they will be served: tempered
        # at the temperature the pool found on the same training rows.
        lik_tr, lik_va = (tempered_log_lik(ev.rows(i), t_split) for i in (tr, va))
        res = train_members(
            Z[tr],
            lik_tr,
            log_priors[:, tr],
            [members[k] for k in alive],
            epochs=epochs_cap,
            validation=(Z[va], lik_va),
            record_val_logits=True,
            prune=(halve_at, SURVIVORS)
            if first and len(alive) > SURVIVORS and config.epochs >= 4
            else None,
            patience=config.patience if first and config.early_stopping else None,
            steer=np.flatnonzero(np.isin(va, steer)) if first else None,
            snapshots=folded,
            log_reference=np.log(np.clip(pool, 1e-300, None)),
            **config.net_kwargs(),
        )
        assert res.val_nll is not None and res.val_logits is not None
        epochs_cap = min(epochs_cap, res.epochs_run)
        survivors = []
        for i, k in enumerate(alive):
            if res.layers[i] is None:
                assert res.pruned_after is not None
                pruned[k] = (res.pruned_after, float(np.nanmin(res.val_nll[:, i])))
                continue
            survivors.append(k)
            logits[k].append(res.val_logits[:, i])
            if res.snapshots is not None:
                nets[k].append(res.snapshots[i])
        alive = survivors
        pooled.append(np.tile(pool, (len(va), 1)))
        held_lik.append(lik_va)
        kept.append(SplitData(tr, va, np.log(np.clip(pool, 1e-300, None)), lik_tr, lik_va))
    rows = np.concatenate([va for _, va in splits])
    stacked = {k: np.concatenate([lg[:epochs_cap] for lg in logits[k]], axis=1) for k in alive}
    held = HeldOut(
        rows=rows,
        split=np.concatenate([np.full(len(va), s) for s, (_, va) in enumerate(splits)]),
        steer=np.isin(rows, steer),
        logits=stacked,
        nll={k: entry_nll(lg, np.concatenate(held_lik)) for k, lg in stacked.items()},
        pooled=np.concatenate(pooled),
        nets={k: [per_epoch[:epochs_cap] for per_epoch in nets[k]] for k in alive},
        folds=folded,
    )
    chosen = choose_network(held, np.ones(len(rows), dtype=bool), config, ev)
    return SearchOutcome(
        held, chosen, steps_per_epoch, pruned, len(splits), tuple(kept), epochs_cap
    )


def report(found: SearchOutcome, n_members: int) -> list[dict[str, Any]]:
    """Per candidate: its best epoch and held-out NLL, or when it was pruned."""
    out: list[dict[str, Any]] = []
    for k in range(n_members):
        if k in found.chosen.scores:
            epoch, nll = found.chosen.scores[k]
            out.append({"epochs": epoch + 1, "val_nll": nll})
        else:
            out.append({"pruned_after_epoch": found.pruned[k][0], "val_nll": found.pruned[k][1]})
    return out
