"""The guard's error bar: Nadeau and Bengio's corrected resampled SE, and the false-ship
rate it gives where nothing in the input says which expert to trust."""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from training.combiners.guard import corrected_se
from training.combiners.iabma_gate import IABMAGate
from training.evidence import regression_evidence

SEEDS = 50


def _exchangeable(n: int, seed: int):
    """Four regression experts with independent errors of one size everywhere, and gate
    features unrelated to them: no gate can truly beat their pool."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 3)).astype(np.float32)
    y = Z[:, 0] + 0.2 * rng.normal(size=n)
    noise = 0.6 * rng.normal(size=(n, 4))
    sigmas = np.sqrt(np.mean(noise**2, axis=0))
    ev = regression_evidence(y[:, None] + noise, y, sigmas, y_low=y.min(), y_high=y.max())
    return Z, ev


def test_exchangeable_experts_ship_the_network_at_most_at_the_nominal_rate() -> None:
    """50 seeds of 300 rows (5 folds): the network ships in at most the nominal share of
    them (the normal tail beyond ``guard_se`` = 1, 15.9%), and the guard's mean held-out
    advantage is about 0 (within 0.005 nats and not above 0 by 2 of its SEs): the rows
    that judge the network took no part in choosing it."""
    ships, advantage = 0, []
    for seed in range(SEEDS):
        Z, ev = _exchangeable(300, seed)
        sel = IABMAGate(random_state=seed).fit(Z, ev).selected_
        ships += sel["gate"] == "network"
        advantage.append(sel["gate_advantage"])
    assert ships / SEEDS <= norm.sf(1.0), ships
    adv = np.array(advantage)
    se = adv.std(ddof=1) / np.sqrt(SEEDS)
    assert abs(adv.mean()) < 0.005 and adv.mean() < 2 * se, (adv.mean(), se)


def test_the_corrected_se_counts_the_splits_training_noise() -> None:
    """Rows judged by the same split's networks share its training noise: when the
    splits' means differ more than their rows' noise explains, the SE follows the means;
    it never falls below the rows' own SE with the Nadeau-Bengio factor."""
    rng = np.random.default_rng(0)
    groups = np.repeat([0, 1, 2, 3], 500)
    rows = rng.normal(0.0, 0.1, size=2000)
    naive = rows.std(ddof=1) / np.sqrt(len(rows))
    ratio = 1 / 3
    steady = corrected_se(rows, groups, ratio)
    # Equal split means: the floor, s_row^2 / n_split, with the factor (1/4 + 1/3).
    want = np.sqrt((1 / 4 + ratio) * rows.var(ddof=1) / 500)
    assert np.isclose(steady, want, rtol=0.3) and steady > naive
    shifted = rows + np.repeat([0.05, -0.05, 0.04, -0.04], 500)
    means = np.array([shifted[groups == g].mean() for g in range(4)])
    assert np.isclose(
        corrected_se(shifted, groups, ratio), np.sqrt((1 / 4 + ratio) * means.var(ddof=1))
    )
    # One split: the rows' SE scaled by 1 + n_test/n_train.
    one = corrected_se(rows, None, ratio)
    assert np.isclose(one, np.sqrt(1 + ratio) * naive)
    assert corrected_se(rows[:1], None, ratio) == 0.0
