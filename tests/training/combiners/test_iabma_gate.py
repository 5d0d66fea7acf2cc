"""IABMAGate's options on real evidence (the paper's simulation experts)."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace

import numpy as np
import pytest

from app.bundle.prior import baseline_for_new_inputs
from training.combiners.iabma_gate import KL_GRID, IABMAGate
from training.combiners.selection import HALVING_FRACTION, SURVIVORS, selection_splits
from training.errors import NotFittedError, ParameterError
from training.evidence import prior_energy


@pytest.fixture(scope="module")
def fitted_inputs(simulation_fit):
    est, train = simulation_fit.est, simulation_fit.train
    return est.encoder_.transform(est.columns(train.X)), est.evidence_


def test_a_fixed_setting_trains_once_without_search(fitted_inputs) -> None:
    Z, ev = fitted_inputs
    gate = IABMAGate(
        kl_weight=0.1, objective="elbo", early_stopping=False, temperature=None, epochs=3
    ).fit(Z, ev)
    assert gate.search_results_ == []
    assert gate.selected_ == {
        "objective": "elbo",
        "kl_weight": 0.1,
        "pool_kl_weight": 0.0,
        "prior_temperature": 1.0,
        "epochs": 3,
        "temperature": 1.0,
        "networks": 1,
    }
    w = gate.weights(Z[:10])
    assert w.shape == (10, 5) and np.allclose(w.sum(axis=1), 1.0)


def test_auto_searches_the_grid_with_halving(fitted_inputs) -> None:
    Z, ev = fitted_inputs
    gate = IABMAGate(epochs=16).fit(Z, ev)
    # 2 objectives x 6 lambdas (lambda=0 shared); the network clearly wins here, so no
    # point of the path toward the pool is trained (test_pool_path.py)
    assert len(gate.search_results_) == 12
    assert all(r["pool_kl_weight"] == 0 for r in gate.search_results_)
    pruned = [r for r in gate.search_results_ if "pruned_after_epoch" in r]
    assert len(pruned) == 12 - SURVIVORS
    assert all(r["pruned_after_epoch"] == 16 // HALVING_FRACTION for r in pruned)
    assert gate.n_selection_folds_ == 3  # 1000 rows: 3 folds
    kept = min((r for r in gate.search_results_ if "epochs" in r), key=lambda r: r["val_nll"])
    assert gate.selected_["objective"] == kept["objective"]
    assert gate.selected_["kl_weight"] == kept["kl_weight"]
    assert 0.25 <= gate.temperature_ <= 4.0


def test_selection_folds_follow_the_data_size(fitted_inputs) -> None:
    Z, ev = fitted_inputs
    small = np.arange(400)
    gate = IABMAGate(epochs=4, kl_weight=0.0, objective="marginal").fit(Z[small], ev.rows(small))
    assert gate.n_selection_folds_ == 5  # below 1000 rows: 5 folds
    twice = IABMAGate(epochs=4, kl_weight=0.0, objective="marginal", selection_repeats=2)
    assert twice.fit(Z[small], ev.rows(small)).n_selection_folds_ == 10
    one = IABMAGate(
        epochs=4, kl_weight=0.0, objective="marginal", selection_folds=1, selection_repeats=1
    ).fit(Z, ev)
    assert one.n_selection_folds_ == 1


def test_the_selection_reads_a_frozen_config_not_the_gate(fitted_inputs) -> None:
    _, ev = fitted_inputs
    config = IABMAGate(selection_folds="auto", random_state=3).selection_config()
    with pytest.raises(FrozenInstanceError):
        config.epochs = 1  # type: ignore[misc]  # writing a frozen field is what fails
    assert (config.folds, config.random_state, config.epochs) == ("auto", 3, 40)
    assert len(selection_splits(config, ev)) == 3  # 1000 rows: 3 folds, once
    one = selection_splits(replace(config, folds=1, validation_fraction=0.25), ev)
    ((train, held_out),) = one
    assert len(held_out) == 250 and len(np.intersect1d(train, held_out)) == 0


def test_sum_reduction_baseline_is_the_total(fitted_inputs) -> None:
    Z, ev = fitted_inputs
    gate = IABMAGate(
        energy_reduction="sum",
        kl_weight=0.05,
        objective="elbo",
        early_stopping=False,
        temperature=None,
        epochs=2,
    ).fit(Z, ev)
    assert np.allclose(gate.prior_baseline_, baseline_for_new_inputs(prior_energy(ev), "sum"))
    assert np.allclose(gate.prior_baseline_, prior_energy(ev).sum(axis=0))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"kl_weight": -1}, "kl_weight=-1"),
        ({"kl_weight": "big"}, "kl_weight='big'"),
        ({"objective": "mle"}, "objective='mle'"),
        ({"energy_reduction": "max"}, "energy_reduction='max'"),
        ({"energy_scale": "huge"}, "energy_scale='huge'"),
        ({"stopping_rule": "late"}, "stopping_rule='late'"),
        ({"validation_fraction": 0.9}, "validation_fraction=0.9"),
        ({"epochs": 0}, "epochs=0"),
        ({"batch_size": 2.5}, "batch_size=2.5"),
        ({"learning_rate": 0}, "learning_rate=0"),
        ({"temperature": -2}, "temperature=-2"),
        ({"selection_folds": 0}, "selection_folds=0"),
        ({"prior_temperature": 0}, "prior_temperature=0"),
    ],
)
def test_bad_parameters_are_named(fitted_inputs, params, message) -> None:
    Z, ev = fitted_inputs
    with pytest.raises(ParameterError, match=message):
        IABMAGate(**params).fit(Z, ev)


def test_weights_before_fit() -> None:
    with pytest.raises(NotFittedError):
        IABMAGate().weights(np.zeros((2, 2), dtype=np.float32))


def test_a_pass_stops_once_no_candidate_improves(fitted_inputs) -> None:
    """With early stopping, the first pass of the search ends ``n_iter_no_change`` epochs
    after its last improvement on its steering rows (1000 rows: the first of 3 folds,
    every held-out row), and the later passes train to its length, so that their rows
    only judge; without it, every pass runs all its epochs."""
    from training.combiners import selection
    from training.nn import trainer

    Z, ev = fitted_inputs
    runs: list[tuple[int, np.ndarray]] = []
    real = trainer.train_members

    def spy(*args, **kwargs):
        res = real(*args, **kwargs)
        runs.append((res.epochs_run, res.val_nll))
        return res

    kw = {"kl_weight": 0.0, "objective": "marginal", "epochs": 200, "learning_rate": 1e-2}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(selection, "train_members", spy)
        IABMAGate(n_iter_no_change=3, **kw).fit(Z, ev)
        stopped = list(runs)
        runs.clear()
        IABMAGate(early_stopping=False, n_iter_no_change=3, **kw).fit(Z, ev)
    assert [r for r, _ in runs] == [200, 200, 200]
    (first, nll), *later = stopped
    assert first < 200 and first - 1 - int(np.argmin(nll[:first, 0])) == 3
    assert nll.shape[0] == 200 and np.isnan(nll[first:]).all()
    assert [r for r, _ in later] == [first, first]


def test_n_iter_no_change_is_checked(fitted_inputs) -> None:
    Z, ev = fitted_inputs
    with pytest.raises(ParameterError, match="n_iter_no_change"):
        IABMAGate(n_iter_no_change=0).fit(Z, ev)


def test_auto_prior_temperature_trains_a_member_per_temperature(fitted_inputs) -> None:
    """``prior_temperature="auto"`` with the default grid, 1 and 4: each lambda > 0 is
    tried under both (lambda = 0 ignores the prior: one member per objective)."""
    Z, ev = fitted_inputs
    gate = IABMAGate(prior_temperature="auto", epochs=8).fit(Z, ev)
    tried = [
        (r["objective"], r["kl_weight"], r["prior_temperature"])
        for r in gate.search_results_
        if r["pool_kl_weight"] == 0
    ]
    positive = [lam for lam in KL_GRID if lam > 0]
    assert sorted(tried) == sorted(
        [(o, lam, tau) for o in ("elbo", "marginal") for lam in positive for tau in (1.0, 4.0)]
        + [(o, 0.0, 1.0) for o in ("elbo", "marginal")]
    )
    assert gate.prior_temperature_ == gate.selected_["prior_temperature"] in (1.0, 4.0)


def test_each_member_trains_against_the_prior_at_its_own_temperature(fitted_inputs) -> None:
    """Members train side by side from one seed, each against the prior at its own
    temperature: changing the second member's temperature changes its score and leaves
    the first's, bit for bit. The gate ships the temperature of the member that won,
    wherever it stands in the grid."""
    Z, ev = fitted_inputs
    kw = {
        "kl_grid": (1.0,),
        "objective": "elbo",
        "epochs": 8,
        "n_iter_no_change": None,
        "pool_kl_weight": 0.0,
    }
    runs = {
        grid: IABMAGate(prior_temperature="auto", prior_temperature_grid=grid, **kw).fit(Z, ev)
        for grid in ((0.05, 4.0), (0.05, 0.05), (0.05, 1.0))
    }
    scores = {grid: [r["val_nll"] for r in g.search_results_] for grid, g in runs.items()}
    firsts, seconds = zip(*scores.values(), strict=True)
    assert len(set(firsts)) == 1 and len(set(seconds)) == 3
    for grid, gate in runs.items():
        assert [r["prior_temperature"] for r in gate.search_results_] == list(grid)
        kept = min((r for r in gate.search_results_ if "epochs" in r), key=lambda r: r["val_nll"])
        assert gate.selected_["prior_temperature"] == gate.prior_temperature_
        assert gate.prior_temperature_ == kept["prior_temperature"]
    # Here the second member wins: the shipped temperature is not the grid's first.
    assert runs[(0.05, 4.0)].prior_temperature_ == 4.0
