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
from training.combiners.selection import SearchOutcome, SelectionConfig
from training.evidence import Evidence
from training.nn.trainer import Member, train_members

#: lambda_pool's points besides the free network (0); past 10 the gate is the pool to
#: within a few hundredths of a nat in log-weight, which the guard's fallback ships exactly.
POOL_KL_GRID = (0.0, 0.3, 1.0, 3.0, 10.0)


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
    candidates of the held-out record) and the search outcome with them in it.
    """
    base = members[found.chosen.candidate]
    path = [replace(base, pool_kl_weight=float(lp)) for lp in grid if lp > 0]
    if not path or not found.splits:
        return members, found
    ids = list(range(len(members), len(members) + len(path)))
    logits: dict[int, list[np.ndarray]] = {k: [] for k in ids}
    nets: dict[int, list[list[Layers]]] = {k: [] for k in ids}
    for split in found.splits:
        res = train_members(
            Z[split.train],
            split.lik_train,
            log_priors[:, split.train],
            path,
            epochs=found.epochs_run,
            validation=(Z[split.held_out], split.lik_held),
            record_val_logits=True,
            snapshots=found.held.folds,
            log_reference=split.log_pool,
            **config.net_kwargs(),
        )
        assert res.val_logits is not None
        for i, k in enumerate(ids):
            logits[k].append(res.val_logits[:, i])
            if res.snapshots is not None:
                nets[k].append(res.snapshots[i])
    lik = np.concatenate([s.lik_held for s in found.splits])
    stacked = {k: np.concatenate(v, axis=1) for k, v in logits.items()}
    held = replace(
        found.held,
        logits={**found.held.logits, **stacked},
        nll={**found.held.nll, **{k: entry_nll(lg, lik) for k, lg in stacked.items()}},
        nets={**found.held.nets, **nets},
    )
    chosen = choose_network(held, np.ones(len(held.rows), dtype=bool), config, ev)
    return [*members, *path], replace(found, held=held, chosen=chosen)
