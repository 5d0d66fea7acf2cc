"""The graded path from the chosen network to stacking's pool.

After the search has chosen a candidate, the same candidate is trained again on every
split with its objective plus ``lambda_pool * KL(q(. | x) || w_pool)``, ``w_pool`` the
pool fitted on the split's training rows, for each ``lambda_pool`` of a grid: 0 is the
free network, and as ``lambda_pool`` grows the gate approaches the pool, which is the
path's end (``lambda_pool = inf``, the guard's fallback). The points join the search's
held-out record, so the cross-fitted choice (and the guard's repetition of it) picks
``lambda_pool`` with the epoch and the temperature. docs/method.md, "The gate".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from training.combiners.choice import Layers, choose_network, entry_nll
from training.combiners.fallback import row_nll
from training.combiners.selection import SearchOutcome, SelectionConfig
from training.evidence import Evidence
from training.nn.trainer import Member, train_members

#: lambda_pool's points besides the free network (0); past 10 the gate is the pool to
#: within a few hundredths of a nat in log-weight, which the guard's fallback ships exactly.
POOL_KL_GRID = (0.0, 0.3, 1.0, 3.0, 10.0)
#: The path is not walked when the free network already beats the pool by this many
#: (per-row) standard errors on the held-out rows: the path's pool end cannot win there,
#: and on the simulation, bike and california the walked path chose 0 anyway.
CLEAR_WIN_SE = 4.0


def clearly_wins(found: SearchOutcome, ev: Evidence) -> bool:
    """Whether the search's network beats the split pools on every held-out entry by more
    than ``CLEAR_WIN_SE`` standard errors, both at the network's temperature."""
    everywhere = np.ones(len(found.held.rows), dtype=bool)
    rows, w = found.chosen.weights(found.held, everywhere)
    _, pooled = found.held.row_mean(found.held.pooled, np.flatnonzero(everywhere))
    t = found.chosen.temperature
    diff = row_nll(pooled, ev.rows(rows), t) - row_nll(w, ev.rows(rows), t)
    se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else np.inf
    return bool(diff.mean() > CLEAR_WIN_SE * se)


def extend_path(
    config: SelectionConfig,
    Z: np.ndarray,
    ev: Evidence,
    log_priors: np.ndarray,
    members: list[Member],
    found: SearchOutcome,
    grid: Sequence[float],
) -> tuple[list[Member], SearchOutcome]:
    """Train the chosen candidate at each positive ``lambda_pool`` of ``grid`` on every
    split, for as many epochs as the search ran, and choose again on all candidates.

    Returns the members with the path's points appended (their indices are the new
    candidates of the held-out record) and the search outcome with them in it; both
    unchanged where the network :func:`clearly_wins`.
    """
    base = members[found.chosen.candidate]
    path = [replace(base, pool_kl_weight=float(lp)) for lp in grid if lp > 0]
    if not path or not found.splits or clearly_wins(found, ev):
        return members, found
    ids = list(range(len(members), len(members) + len(path)))
    logits: dict[int, list[np.ndarray]] = {k: [] for k in ids}
    nets: dict[int, list[list[Layers]]] = {k: [] for k in ids}
    # As in the search: the first split's steering rows end its pass (the points start at
    # the pool and often settle sooner than the free network did); the others train as long.
    steer = np.flatnonzero(found.held.steer[found.held.split == 0])
    epochs = found.epochs_run
    for s, split in enumerate(found.splits):
        first = s == 0 and config.early_stopping
        res = train_members(
            Z[split.train],
            split.lik_train,
            log_priors[:, split.train],
            path,
            epochs=epochs,
            validation=(Z[split.held_out], split.lik_held),
            record_val_logits=True,
            patience=config.patience if first else None,
            steer=steer if first else None,
            snapshots=found.held.folds,
            log_reference=split.log_pool,
            **config.net_kwargs(),
        )
        assert res.val_logits is not None
        epochs = min(epochs, res.epochs_run)
        for i, k in enumerate(ids):
            logits[k].append(res.val_logits[:, i])
            if res.snapshots is not None:
                nets[k].append(res.snapshots[i])
    lik = np.concatenate([s.lik_held for s in found.splits])
    stacked = {k: np.concatenate([lg[:epochs] for lg in v], axis=1) for k, v in logits.items()}
    nets = {k: [per_epoch[:epochs] for per_epoch in v] for k, v in nets.items()}
    held = replace(
        found.held,
        logits={**found.held.logits, **stacked},
        nll={**found.held.nll, **{k: entry_nll(lg, lik) for k, lg in stacked.items()}},
        nets={**found.held.nets, **nets},
    )
    chosen = choose_network(held, np.ones(len(held.rows), dtype=bool), config, ev)
    return [*members, *path], replace(found, held=held, chosen=chosen)
