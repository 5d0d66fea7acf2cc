"""The guard: the network ships only if it beats the pool on rows that took no part in
choosing it, by more than its standard error."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from training.combiners.choice import choose_network
from training.combiners.fallback import calibrated_pool, row_nll
from training.combiners.guard import judging_groups
from training.combiners.iabma_gate import IABMAGate
from training.combiners.selection import search_candidates
from training.combiners.stacking import cv_penalty
from training.evidence import regression_evidence
from training.nn.trainer import Member
from training.onnx_graph import GraphBuilder


def _evidence(kind: str, n: int = 1200, seed: int = 0, width: int = 3):
    """Gate features and regression evidence of four experts.

    ``dominated``: expert 0 is far better than the others everywhere.
    ``exchangeable``: four experts with independent errors of the same size everywhere;
    nothing in x says which to trust, so their average is the best gate.
    """
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, width)).astype(np.float32)
    y = Z[:, 0] + 0.2 * rng.normal(size=n)
    if kind == "dominated":
        noise = np.column_stack([0.2 * rng.normal(size=n), rng.normal(size=(n, 3))])
    else:
        noise = 0.6 * rng.normal(size=(n, 4))
    means = y[:, None] + noise
    sigmas = np.sqrt(np.mean(noise**2, axis=0))
    return Z, regression_evidence(means, y, sigmas, y_low=float(y.min()), y_high=float(y.max()))


def _served_weights(gate: IABMAGate, Z: np.ndarray) -> np.ndarray:
    g = GraphBuilder("gate")
    z = g.add_input("z", TensorProto.FLOAT, Z.shape[1])
    g.add_output("w", gate.to_onnx(g, z))
    sess = ort.InferenceSession(g.build().SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"z": Z})[0]


def _one_expert_rules(n: int, seed: int):
    """Four regression experts, one nearly exact everywhere (error sd 0.05 against 1): the
    best gate is a constant that puts almost all the weight on it, which the pool fits
    directly and a network has to learn from a start near the uniform average."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, 5)).astype(np.float32)
    y = rng.normal(size=n)
    noise = np.column_stack([0.05 * rng.normal(size=n), rng.normal(size=(n, 3))])
    sigmas = np.sqrt(np.mean(noise**2, axis=0))
    ev = regression_evidence(y[:, None] + noise, y, sigmas, y_low=-4.0, y_high=4.0)
    return Z, ev


def test_what_ships_is_no_worse_than_the_pool_where_the_pool_is_the_better_gate() -> None:
    """On 300 rows where one expert rules everywhere, the pool is truly better than the
    free network: on 5,000 fresh rows the network trained without the pull toward the pool
    loses to it in at least 8 of 10 seeds. What the guard ships (the pool, or a point of
    the path near it) is never worse than the pool there by more than 0.0005 nats."""
    free_loses, excess = 0, []
    for seed in range(10):
        Z, ev = _one_expert_rules(300, seed)
        Z_new, ev_new = _one_expert_rules(5000, seed + 100)
        gate = IABMAGate(random_state=seed).fit(Z, ev)
        assert "took no part in choosing it" in gate.selected_["gate_reason"]
        free = IABMAGate(random_state=seed, fallback=False, pool_kl_weight=0.0).fit(Z, ev)
        w, t = calibrated_pool(ev, cv_penalty(ev))
        pool = row_nll(np.tile(w, (ev_new.n, 1)), ev_new, t).mean()
        free_loses += row_nll(free.weights(Z_new), ev_new, free.temperature_).mean() > pool
        excess.append(row_nll(gate.weights(Z_new), ev_new, gate.temperature_).mean() - pool)
    assert free_loses >= 8
    assert max(excess) < 5e-4, excess


@pytest.mark.parametrize("kind", ["dominated", "exchangeable"])
def test_a_shipped_pool_is_one_constant_vector_and_exports_as_one(kind: str) -> None:
    Z, ev = _evidence(kind)
    # The free network against the pool (no path, whose points near the pool can win by
    # a hair), so that the pool ships.
    gate = IABMAGate(epochs=8, random_state=0, pool_kl_weight=0.0).fit(Z, ev)
    sel = gate.selected_
    assert sel["gate"] == "stacking", sel["gate_reason"]
    assert sel["gate_advantage"] <= sel["gate_standard_error"]
    assert set(sel["held_out_nll"]) == {"network", "uniform", "best_single", "stacking"}
    w = gate.weights(Z[:7])
    np.testing.assert_allclose(w, np.tile(w[0], (7, 1)))
    if kind == "dominated":
        assert w[0, 0] > 0.95  # nearly all the weight on the good expert
    else:
        np.testing.assert_allclose(w[0], np.full(4, 0.25), atol=0.05)
    np.testing.assert_allclose(_served_weights(gate, Z[:7]), w, atol=1e-6)


def test_the_network_ships_where_the_input_says_which_expert_to_trust(simulation_fit) -> None:
    """The simulation: polynomial experts on one half, circles on the other."""
    sel = simulation_fit.est.combiner_.selected_
    assert sel["gate"] == "network", sel["gate_reason"]
    assert sel["gate_advantage"] > sel["gate_standard_error"] > 0
    nll = sel["held_out_nll"]
    assert nll["network"] < min(nll["uniform"], nll["best_single"], nll["stacking"])


def test_the_judging_rows_take_no_part_in_choosing_the_network(simulation_fit) -> None:
    """For each group of judging rows, the choice made without it (candidate, epoch and
    temperature) does not move when everything the search recorded on those rows is
    replaced; and no judging row steered a training pass."""
    est = simulation_fit.est
    Z = est.encoder_.transform(est.columns(simulation_fit.train.X))
    ev = est.evidence_
    gate = IABMAGate(epochs=8, random_state=0)
    config = gate.selection_config()
    members = [Member("marginal", 0.0), Member("marginal", 0.1, 0), Member("elbo", 0.0)]
    priors = np.log(np.full((1, ev.n, ev.m), 1.0 / ev.m))
    held = search_candidates(config, Z, ev, priors, members).held
    groups = judging_groups(held, config.random_state)
    steering = np.unique(held.rows[held.steer])
    assert len(groups) >= 2
    rng = np.random.default_rng(0)
    for group in groups:
        assert not np.isin(group, steering).any()
        inside = np.isin(held.rows, group)
        scrambled = replace(
            held,
            logits={
                k: np.where(inside[None, :, None], rng.normal(size=v.shape), v).astype(v.dtype)
                for k, v in held.logits.items()
            },
            nll={
                k: np.where(inside[None, :], rng.exponential(size=v.shape), v)
                for k, v in held.nll.items()
            },
        )
        before = choose_network(held, ~inside, config, ev)
        after = choose_network(scrambled, ~inside, config, ev)
        assert (after.candidate, after.epoch, after.temperature) == (
            before.candidate,
            before.epoch,
            before.temperature,
        )


def test_the_shipped_network_averages_the_fold_networks_and_exports_so(simulation_fit) -> None:
    """With folds (1000 rows: 3), the gate is the chosen candidate of every fold at the
    chosen epoch; the served graph computes the same average."""
    gate = simulation_fit.est.combiner_
    assert gate.selected_["networks"] == len(gate.networks_) == gate.n_selection_folds_ == 3
    Z = simulation_fit.est.encoder_.transform(simulation_fit.est.columns(simulation_fit.test.X))
    w = gate.weights(Z[:50])
    np.testing.assert_allclose(_served_weights(gate, Z[:50]), w, atol=1e-6)
    Zt = simulation_fit.est.encoder_.transform(simulation_fit.est.columns(simulation_fit.train.X))
    single = IABMAGate(bagging=False, fallback=False, epochs=8, random_state=0)
    assert len(single.fit(Zt, simulation_fit.est.evidence_).networks_) == 1


def test_no_fallback_keeps_the_network() -> None:
    Z, ev = _evidence("exchangeable")
    gate = IABMAGate(epochs=4, fallback=False, random_state=0).fit(Z, ev)
    assert "gate" not in gate.selected_ and len(gate.networks_) == gate.n_selection_folds_ == 3
