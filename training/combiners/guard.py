"""The guard: whether the chosen network ships, or stacking's pool does.

The network is judged on held-out rows that took no part in choosing it: the choice of
candidate, epoch and temperature is repeated without each group of judging rows, then
scored on the group. It ships only if its paired advantage over the pool exceeds
``guard_se`` corrected resampled standard errors (:func:`corrected_se`; docs/method.md,
"The guard").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from training.combiners.choice import HeldOut, choose_network
from training.combiners.fallback import (
    calibrated_pool,
    fit_temperature,
    pooled_weights,
    row_nll,
)
from training.combiners.selection import SelectionConfig
from training.evidence import Evidence

GateKind = Literal["network", "stacking"]
#: The plain gates scored beside the network; the pool ("stacking") is its rival.
PLAIN = ("uniform", "best_single", "stacking")
#: Groups the judging rows are split into when the folds do not give groups.
GROUPS = 5


@dataclass(frozen=True)
class GateChoice:
    """Which gate ships, its temperature, and the evidence for the choice."""

    kind: GateKind
    temperature: float
    constant: np.ndarray | None  # (m,) weights unless the network ships
    held_out_nll: dict[str, float] = field(default_factory=dict)
    advantage: float = 0.0  # the network's mean paired NLL advantage over the pool
    standard_error: float = 0.0
    rows: int = 0  # the rows that judged it
    reason: str = ""


def judging_groups(held: HeldOut, seed: int) -> list[np.ndarray]:
    """The rows that judge the network, in groups: the rows that never steered the
    search, grouped by the first split that held them out (the folds), or at random."""
    rows = np.unique(held.rows[~held.steer])
    first = {int(r): int(s) for r, s in zip(held.rows[::-1], held.split[::-1], strict=True)}
    labels = np.array([first[int(r)] for r in rows])
    if len(np.unique(labels)) < 2:
        labels = np.random.default_rng(seed).permutation(len(rows)) % GROUPS
    return [rows[labels == g] for g in np.unique(labels)]


def plain_weights(held: HeldOut, ev: Evidence, outside: np.ndarray) -> dict[str, np.ndarray]:
    """Each plain gate's weights at every entry, fitted without the rows ``outside``
    leaves out: the best expert by mean log-likelihood over the others."""
    n, m = len(held.rows), ev.m
    best = int(np.argmax(ev.log_lik[outside].mean(axis=0)))
    return {
        "uniform": np.full((n, m), 1.0 / m),
        "best_single": np.tile(np.eye(m)[best], (n, 1)),
        "stacking": held.pooled,
    }


def corrected_se(diff: np.ndarray, groups: np.ndarray | None, test_train_ratio: float) -> float:
    """Nadeau and Bengio's corrected resampled standard error of ``diff.mean()``.

    ``diff`` is per judged row; ``groups`` says which split's networks judged each row
    (None: every row was judged by one split's). Rows judged by the same networks share
    those networks' training noise, so the rows are not independent draws: the variance
    of one split's mean difference is estimated from the splits' means, floored at the
    rows' own noise ``s_row^2 / n_split`` (the least it can be, and steadier with few
    splits), and scaled by ``1/J + n_test/n_train`` for ``J`` overlapping splits (Nadeau &
    Bengio 2003). With one split the training noise cannot be estimated: the rows' SE
    is scaled by the same factor at ``J = 1``.
    """
    if len(diff) < 2:
        return 0.0
    row_var = float(diff.var(ddof=1))
    if groups is None or len(np.unique(groups)) < 2:
        return float(np.sqrt((1.0 + test_train_ratio) * row_var / len(diff)))
    names, sizes = np.unique(groups, return_counts=True)
    means = np.array([diff[groups == g].mean() for g in names])
    split_var = max(float(means.var(ddof=1)), row_var / float(sizes.mean()))
    return float(np.sqrt((1.0 / len(names) + test_train_ratio) * split_var))


def guard(
    held: HeldOut, config: SelectionConfig, ev: Evidence, test_train_ratio: float = 0.25
) -> GateChoice:
    """Cross-fit the choice of the network, then ship it or the best plain gate.

    ``test_train_ratio``: a split's held-out rows over its training rows, for
    :func:`corrected_se`.
    """
    calibrate = config.temperature == "auto"
    groups = judging_groups(held, config.random_state)
    per_row: dict[str, list[np.ndarray]] = {k: [] for k in ("network", *PLAIN)}
    judged = []
    for group in groups:
        inside = np.isin(held.rows, group)
        net = choose_network(held, ~inside, config, ev)
        rows, w = net.weights(held, inside)
        judged.append(rows)
        per_row["network"].append(row_nll(w, ev.rows(rows), net.temperature))
        outside = np.setdiff1d(np.arange(ev.n), group)
        for kind, weights in plain_weights(held, ev, outside).items():
            t = net.temperature
            if calibrate:
                fit_rows, fit_w = held.row_mean(weights[~inside], np.flatnonzero(~inside))
                t = fit_temperature(fit_w, ev.rows(fit_rows))
            _, w = held.row_mean(weights[inside], np.flatnonzero(inside))
            per_row[kind].append(row_nll(w, ev.rows(rows), t))
    scores = {k: np.concatenate(v) for k, v in per_row.items()}
    n_judged = len(np.concatenate(judged))
    nll = {k: float(v.mean()) for k, v in scores.items()}
    # The pool is the rival and what ships instead: it holds the uniform average and the
    # best expert as special cases, and picking among plain gates on these rows would add
    # a noisy choice of its own. Their scores are reported beside it.
    diff = scores["stacking"] - scores["network"]
    labels = np.concatenate([np.full(len(r), g) for g, r in enumerate(judged)])
    se = corrected_se(diff, labels if held.folds else None, test_train_ratio)
    advantage = float(diff.mean())
    ships = advantage > config.guard_se * se
    listed = ", ".join(f"{k} {v:.4f}" for k, v in nll.items())
    verdict = (
        f"the network beats the pool by {advantage:.4f} NLL (se {se:.4f})"
        if ships
        else f"the network does not beat the pool by more than {config.guard_se:g} se "
        f"(advantage {advantage:+.4f}, se {se:.4f})"
    )
    where = (
        f"{verdict} on {n_judged} held-out rows that took no part in choosing it; "
        f"held-out NLL: {listed}"
    )
    everywhere = np.ones(len(held.rows), dtype=bool)
    if ships:
        chosen = choose_network(held, everywhere, config, ev)
        return GateChoice(
            "network",
            chosen.temperature,
            None,
            nll,
            advantage,
            se,
            n_judged,
            where,
        )
    if config.tempered:
        constant = calibrated_pool(ev, config.pool_penalty)[0]
    else:
        constant = pooled_weights(ev.log_lik, config.pool_penalty)
    if calibrate:
        fit_rows, fit_w = held.row_mean(held.pooled, np.flatnonzero(everywhere))
        t = fit_temperature(fit_w, ev.rows(fit_rows))
    else:
        t = choose_network(held, everywhere, config, ev).temperature
    return GateChoice("stacking", t, constant, nll, advantage, se, n_judged, where)
