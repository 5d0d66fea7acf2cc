"""The gate's numpy trainer: its closed-form gradient, backward pass and Adam against
torch's autograd and optimiser."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.nn.adam import FlatAdam, backward, forward, log_softmax
from training.nn.net import PosteriorNet, mlp_logits, softmax_f32
from training.nn.trainer import Member, _Objectives, member_objective, train_members


@pytest.fixture()
def batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    B, d, m = 37, 6, 4
    return {
        "z": torch.randn(B, d, generator=g),
        "L": torch.log_softmax(torch.randn(B, m, generator=g) * 3, -1),
        "lp": torch.log_softmax(torch.randn(B, m, generator=g), -1),
    }


def _objective_case(members: list[Member], seed: int) -> tuple[torch.Tensor, ...]:
    """Random logits, likelihoods and one random prior per member."""
    g = torch.Generator().manual_seed(seed)
    K, B, m = len(members), 41, 5
    logits = torch.randn(K, B, m, generator=g, dtype=torch.float64) * 2
    L = torch.log_softmax(torch.randn(B, m, generator=g, dtype=torch.float64) * 3, -1)
    priors = torch.log_softmax(torch.randn(K, B, m, generator=g, dtype=torch.float64) * 2, -1)
    return logits, L, priors


@pytest.mark.parametrize("objective", ["elbo", "marginal"])
@pytest.mark.parametrize("kl_weight", [0.0, 0.1, 10.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_objectives_gradient_equals_autograd(objective: str, kl_weight: float, seed: int) -> None:
    """``_Objectives.gradient`` itself, against autograd of ``member_objective``, per point."""
    members = [Member(objective, kl_weight, prior_index=k) for k in range(3)]  # type: ignore[arg-type]
    _check_gradient(members, seed)


def test_mixed_objectives_gradient_equals_autograd() -> None:
    """Members of both objectives in one batch take the ``np.where`` branch."""
    members = [Member("elbo", 0.1, 0), Member("marginal", 10.0, 1), Member("marginal", 0.0, 2)]
    obj = _check_gradient(members, 5)
    assert obj.any_marginal and not obj.all_marginal


def _check_gradient(members: list[Member], seed: int) -> _Objectives:
    logits, L, priors = _objective_case(members, seed)
    obj = _Objectives.build(members, priors.numpy())
    # In float64 throughout, so that the comparison is tight.
    obj.log_prior = priors.numpy().transpose(1, 0, 2).copy()
    obj.lam = obj.lam.astype(np.float64)
    got = obj.gradient(torch.log_softmax(logits, -1).numpy(), L.numpy(), obj.log_prior)

    leaf = logits.clone().requires_grad_(True)
    lam = torch.from_numpy(obj.lam[:, :, 0])
    marginal = torch.from_numpy(obj.marginal[:, :, 0])
    # The mean over rows scales every row's gradient by 1/B; undo it to compare per row.
    total = member_objective(leaf, L, priors, lam, marginal).sum() * logits.shape[1]
    (want,) = torch.autograd.grad(total, leaf)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-10, rtol=1e-9)
    return obj


def test_closed_form_backward_equals_autograd(batch) -> None:
    """The layer-by-layer backward pass, fed by ``_Objectives.gradient``, equals autograd."""
    members = [Member("elbo", 0.3), Member("marginal", 0.1), Member("elbo", 10.0)]
    net = PosteriorNet(
        batch["z"].shape[1],
        batch["L"].shape[1],
        members=len(members),
        generator=torch.Generator().manual_seed(0),
    )
    obj = _Objectives.build(members, batch["lp"].numpy()[None])
    lam, marginal = torch.from_numpy(obj.lam[:, :, 0]), torch.from_numpy(obj.marginal[:, :, 0])
    loss = -member_objective(net(batch["z"]), batch["L"], batch["lp"], lam, marginal).sum()
    loss.backward()
    want = torch.cat([p.grad.reshape(-1) for p in [*net.weights, *net.biases]]).numpy()

    opt = FlatAdam(net, 1e-3)
    logits, hidden = forward(opt, batch["z"].numpy())
    g = obj.gradient(log_softmax(logits), batch["L"].numpy(), obj.log_prior)
    backward(opt, g * (-1.0 / len(batch["L"])), hidden)
    np.testing.assert_allclose(opt.grad, want, atol=1e-6, rtol=1e-5)


def test_flat_adam_matches_torch_optim(batch) -> None:
    net = PosteriorNet(6, 4, members=2, generator=torch.Generator().manual_seed(1))
    ref = PosteriorNet(6, 4, members=2, generator=torch.Generator().manual_seed(1))
    opt = FlatAdam(net, 1e-2)
    torch_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(5)
    for _ in range(20):
        grads = [torch.randn(p.shape, generator=g) for p in ref.parameters()]
        for p, gr in zip(ref.parameters(), grads, strict=True):
            p.grad = gr.clone()
        torch_opt.step()
        opt.grad[:] = torch.cat([gr.reshape(-1) for gr in grads]).numpy()
        opt.step()
    want = torch.cat([p.detach().reshape(-1) for p in ref.parameters()]).numpy()
    np.testing.assert_allclose(opt.theta, want, atol=1e-6)


def test_the_forward_pass_is_the_torch_module(batch) -> None:
    """The numpy forward pass computes what :class:`PosteriorNet` does, member by member."""
    net = PosteriorNet(6, 4, members=3, generator=torch.Generator().manual_seed(2))
    opt = FlatAdam(net, 1e-3)
    with torch.no_grad():
        want = net(batch["z"]).numpy()
    np.testing.assert_allclose(forward(opt, batch["z"].numpy())[0], want, atol=1e-6)


def _data(n: int = 300, d: int = 3, m: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, d)).astype(np.float32)
    L = np.log(rng.dirichlet(np.ones(m), size=n))
    lp = np.log(np.full((1, n, m), 1.0 / m))
    return Z, L, lp


def test_training_is_deterministic_for_a_seed() -> None:
    Z, L, lp = _data()
    a = train_members(Z, L, lp, [Member("elbo", 0.1)], random_state=7, epochs=3)
    b = train_members(Z, L, lp, [Member("elbo", 0.1)], random_state=7, epochs=3)
    c = train_members(Z, L, lp, [Member("elbo", 0.1)], random_state=8, epochs=3)
    for (wa, ba), (wb, bb) in zip(a.layers[0], b.layers[0], strict=True):
        assert np.array_equal(wa, wb) and np.array_equal(ba, bb)
    assert not np.array_equal(a.layers[0][0][0], c.layers[0][0][0])


def test_members_train_independently() -> None:
    """Member 0 ends the same whatever member 1 is: the summed loss does not couple them."""
    Z, L, lp = _data()
    a = train_members(Z, L, lp, [Member("marginal", 0.0), Member("elbo", 0.5)], epochs=2)
    b = train_members(Z, L, lp, [Member("marginal", 0.0), Member("elbo", 0.0)], epochs=2)
    for (wa, ba), (wb, bb) in zip(a.layers[0], b.layers[0], strict=True):
        np.testing.assert_allclose(wa, wb, atol=1e-6)
        np.testing.assert_allclose(ba, bb, atol=1e-6)
    assert not np.allclose(a.layers[1][0][0], b.layers[1][0][0])


def test_validation_records_every_epoch() -> None:
    Z, L, lp = _data(400)
    res = train_members(
        Z[:300],
        L[:300],
        lp[:, :300],
        [Member("marginal", 0.0)],
        epochs=6,
        validation=(Z[300:], L[300:]),
        record_val_logits=True,
    )
    assert res.val_nll is not None and res.val_nll.shape == (6, 1)
    assert res.val_logits is not None and res.val_logits.shape == (6, 1, 100, 3)
    # The last epoch's recorded logits are the returned network's.
    from training.nn.net import mlp_logits

    np.testing.assert_allclose(res.val_logits[-1, 0], mlp_logits(Z[300:], res.layers[0]), atol=1e-5)


def test_a_large_kl_weight_pulls_q_onto_the_prior(simulation_fit) -> None:
    """lambda -> inf: the KL term dominates, so the fitted q is the adaptive prior itself.

    Compared as the mean absolute difference per weight: the prior is a function of the
    experts' outputs that the (64, 32, 16) network can only approximate, so a few rows
    near the circle's edge stay further off (up to 0.07 here) at any lambda.
    """
    from app.bundle.prior import log_prior_at_training_points
    from training.evidence import prior_energy

    est, train = simulation_fit.est, simulation_fit.train
    Z = est.encoder_.transform(est.columns(train.X))
    ev = est.evidence_
    log_prior = log_prior_at_training_points(prior_energy(ev), "mean", 1.0)
    prior = np.exp(log_prior)
    kw = {"epochs": 100, "learning_rate": 3e-3, "random_state": 0}
    for objective in ("elbo", "marginal"):
        res = train_members(Z, ev.log_lik, log_prior[None], [Member(objective, 1e4)], **kw)
        q = softmax_f32(mlp_logits(Z, res.layers[0]))
        assert np.abs(q - prior).mean() < 1e-2, objective
    # The same training at lambda = 0 does not land on the prior: the test can fail.
    free = train_members(Z, ev.log_lik, log_prior[None], [Member("marginal", 0.0)], **kw)
    assert np.abs(softmax_f32(mlp_logits(Z, free.layers[0])) - prior).mean() > 0.05


def test_a_pass_that_stops_before_the_halving_epoch_halves_when_it_stops() -> None:
    Z, L, lp = _data(400)
    members = [Member("marginal", 0.0), Member("elbo", 0.3), Member("elbo", 3.0)]
    res = train_members(
        Z[:300],
        L[:300],
        lp[:, :300],
        members,
        epochs=200,
        learning_rate=1e-2,
        validation=(Z[300:], L[300:]),
        prune=(150, 1),
        patience=2,
    )
    assert res.epochs_run < 150 and res.pruned_after == res.epochs_run
    kept = [i for i, layers in enumerate(res.layers) if layers is not None]
    assert val_best(res, kept[0]) == min(val_best(res, i) for i in range(len(members)))
    assert len(kept) == 1


def val_best(res, i: int) -> float:
    assert res.val_nll is not None
    return float(np.nanmin(res.val_nll[:, i]))


def test_only_the_steering_rows_decide_the_halving_and_the_stop() -> None:
    """A pass steered by some validation rows halves and stops exactly as a pass that
    sees only those rows; the other rows are scored, never consulted."""
    Z, L, lp = _data(500)
    members = [Member("marginal", 0.0), Member("elbo", 0.3), Member("elbo", 3.0)]
    steer = np.arange(0, 200, 2)
    common = {
        "epochs": 60,
        "learning_rate": 1e-2,
        "prune": (4, 1),
        "patience": 3,
        "record_val_logits": True,
    }
    val = (Z[300:], L[300:])
    steered = train_members(
        Z[:300], L[:300], lp[:, :300], members, validation=val, steer=steer, **common
    )
    alone = train_members(
        Z[:300], L[:300], lp[:, :300], members, validation=(val[0][steer], val[1][steer]), **common
    )
    assert (steered.epochs_run, steered.pruned_after) == (alone.epochs_run, alone.pruned_after)
    assert [x is None for x in steered.layers] == [x is None for x in alone.layers]
    assert steered.val_logits is not None and alone.val_logits is not None
    np.testing.assert_allclose(steered.val_logits[:, :, steer], alone.val_logits, atol=1e-6)


def test_snapshots_are_the_networks_after_each_epoch() -> None:
    """Member k's snapshot after epoch e is the network a pass of e + 1 epochs returns."""
    Z, L, lp = _data()
    members = [Member("marginal", 0.0), Member("elbo", 0.3)]
    res = train_members(Z, L, lp, members, epochs=4, snapshots=True)
    assert res.snapshots is not None and sorted(res.snapshots) == [0, 1]
    for epochs in (1, 3):
        short = train_members(Z, L, lp, members, epochs=epochs)
        for k in (0, 1):
            for (wa, ba), (wb, bb) in zip(
                res.snapshots[k][epochs - 1], short.layers[k], strict=True
            ):
                assert np.array_equal(wa, wb) and np.array_equal(ba, bb)
    for (wa, _), (wb, _) in zip(res.snapshots[1][-1], res.layers[1], strict=True):
        assert np.array_equal(wa, wb)


@pytest.mark.parametrize("objective", ["elbo", "marginal"])
def test_the_pull_toward_the_pool_is_a_second_kl_term(objective: str) -> None:
    """With ``pool_kl_weight``, the gradient is autograd's of
    ``fit - lam KL(q || p) - lam_pool KL(q || w)``: the two pulls folded into one KL term
    toward their geometric mixture move ``q`` exactly as the two terms do."""
    members = [
        Member(objective, 0.3, 0, 2.0),  # type: ignore[arg-type]
        Member(objective, 0.0, 0, 5.0),  # type: ignore[arg-type]
        Member(objective, 0.1, 0, 0.0),  # type: ignore[arg-type]
    ]
    logits, L, priors = _objective_case(members, 4)
    prior = priors[:1]  # one prior, shared
    log_w = torch.log_softmax(torch.tensor([0.5, -1.0, 2.0, 0.0, 0.3], dtype=torch.float64), 0)
    obj = _Objectives.build(members, prior.numpy(), log_w.numpy())
    obj.log_prior = np.stack(
        [_mixed(mb, prior[0].numpy(), log_w.numpy()) for mb in members], axis=1
    )
    # In float64 throughout (the trainer keeps lam in float32), so the comparison is tight.
    obj.lam = np.array([mb.kl_weight + mb.pool_kl_weight for mb in members])[:, None, None]
    got = obj.gradient(torch.log_softmax(logits, -1).numpy(), L.numpy(), obj.log_prior)

    leaf = logits.clone().requires_grad_(True)
    lq = torch.log_softmax(leaf, -1)
    q = lq.exp()
    fit = torch.logsumexp(lq + L, -1) if objective == "marginal" else (q * L).sum(-1)
    lam = torch.tensor([mb.kl_weight for mb in members], dtype=torch.float64)[:, None]
    lam_pool = torch.tensor([mb.pool_kl_weight for mb in members], dtype=torch.float64)[:, None]
    total = (fit - lam * (q * (lq - prior)).sum(-1) - lam_pool * (q * (lq - log_w)).sum(-1)).sum()
    (want,) = torch.autograd.grad(total, leaf)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-10, rtol=1e-9)


def _mixed(mb: Member, lp: np.ndarray, log_w: np.ndarray) -> np.ndarray:
    total = mb.kl_weight + mb.pool_kl_weight
    return lp if total == 0 else (mb.kl_weight * lp + mb.pool_kl_weight * log_w) / total


def test_members_pulled_toward_the_pool_start_there_and_stay_near_it() -> None:
    """A member with a large ``pool_kl_weight`` starts at the reference weights (its
    output bias) and ends near them; one without it is not pulled there."""
    Z, L, lp = _data(n=400, m=3, seed=2)
    w = np.array([0.7, 0.2, 0.1])
    members = [Member("marginal", 0.0, 0, 1000.0), Member("marginal", 0.0)]
    start = train_members(Z, L, lp, members, epochs=0, log_reference=np.log(w))
    end = train_members(Z, L, lp, members, epochs=5, log_reference=np.log(w))
    for res, tol in ((start, 0.2), (end, 0.02)):
        assert res.layers[0] is not None and res.layers[1] is not None
        near = softmax_f32(mlp_logits(Z, res.layers[0]))
        assert np.abs(near - w).max() < tol
    free = softmax_f32(mlp_logits(Z, end.layers[1]))
    assert np.abs(free - w).max() > 0.3
    with pytest.raises(ValueError, match="log_reference"):
        train_members(Z, L, lp, members, epochs=1)
