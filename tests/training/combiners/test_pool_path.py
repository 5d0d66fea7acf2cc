"""The graded path from the chosen network to stacking's pool (``pool_kl_weight``)."""

from __future__ import annotations

import numpy as np
import pytest

from training.combiners.fallback import POOL_PENALTY, calibrated_pool
from training.combiners.iabma_gate import IABMAGate
from training.combiners.pool_path import POOL_KL_GRID
from training.errors import ParameterError
from training.evidence import regression_evidence


@pytest.fixture(scope="module")
def fitted_inputs(simulation_fit):
    est, train = simulation_fit.est, simulation_fit.train
    return est.encoder_.transform(est.columns(train.X)), est.evidence_


def test_the_path_runs_from_the_free_network_to_the_pool(fitted_inputs) -> None:
    """A fixed lambda_pool of 0 is the free network; a very large one gives the pool's
    weights at every input, and the search records each point it tried."""
    Z, ev = fitted_inputs
    kw = {"kl_weight": 0.0, "objective": "marginal", "epochs": 6, "fallback": False}
    pool = calibrated_pool(ev, POOL_PENALTY)[0]  # 1000 rows: the light penalty
    far = IABMAGate(pool_kl_weight=1e4, **kw).fit(Z, ev)
    assert far.selected_["pool_kl_weight"] == 1e4
    assert np.abs(far.weights(Z[:200]) - pool).max() < 0.05
    free = IABMAGate(pool_kl_weight=0.0, **kw).fit(Z, ev)
    assert np.abs(free.weights(Z[:200]) - pool).max() > 0.3


def _one_expert_rules(n: int = 400, seed: int = 0):
    """One regression expert nearly exact everywhere: the pool is the better gate."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 5)).astype(np.float32)
    y = rng.normal(size=n)
    noise = np.column_stack([0.05 * rng.normal(size=n), rng.normal(size=(n, 3))])
    sigmas = np.sqrt(np.mean(noise**2, axis=0))
    return Z, regression_evidence(y[:, None] + noise, y, sigmas, y_low=-4.0, y_high=4.0)


def test_the_path_is_walked_where_the_network_does_not_clearly_win() -> None:
    """Each point of the grid is trained and recorded, and the chosen one goes to the
    manifest; the shipped gate there stays within 0.02 of the pool's weights."""
    Z, ev = _one_expert_rules()
    walked = IABMAGate(epochs=8, random_state=0).fit(Z, ev)
    tried = [r["pool_kl_weight"] for r in walked.search_results_]
    assert tried[-4:] == [p for p in POOL_KL_GRID if p > 0] and set(tried[:-4]) == {0.0}
    assert walked.selected_["pool_kl_weight"] in POOL_KL_GRID
    assert walked.manifest_params()["selected"]["pool_kl_weight"] in POOL_KL_GRID


def test_a_network_that_clearly_wins_skips_the_path(fitted_inputs) -> None:
    """On the simulation the input says which expert to trust and the free network beats
    the pool by far more than CLEAR_WIN_SE: no point of the path is trained, and weights
    that move with the input ship."""
    Z, ev = fitted_inputs
    gate = IABMAGate(epochs=16, random_state=0).fit(Z, ev)
    assert all(r["pool_kl_weight"] == 0 for r in gate.search_results_)
    assert gate.selected_["gate"] == "network" and gate.selected_["pool_kl_weight"] == 0
    assert gate.weights(Z[:200]).std(axis=0).max() > 0.2


@pytest.mark.parametrize(("param", "value"), [("pool_kl_weight", -1.0), ("pool_penalty", 0.0)])
def test_bad_pool_settings_are_named(fitted_inputs, param: str, value: float) -> None:
    Z, ev = fitted_inputs
    with pytest.raises(ParameterError, match=param):
        IABMAGate(**{param: value}).fit(Z, ev)
