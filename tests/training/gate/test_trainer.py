"""The gate's trainer: its closed-form gradient and Adam against torch's own."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.gate.net import PosteriorNet
from training.gate.trainer import (
    Member,
    _backward,
    _FlatAdam,
    _forward,
    member_objective,
    train_members,
)


@pytest.fixture()
def batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    B, d, m = 37, 6, 4
    return {
        "z": torch.randn(B, d, generator=g),
        "L": torch.log_softmax(torch.randn(B, m, generator=g) * 3, -1),
        "lp": torch.log_softmax(torch.randn(B, m, generator=g), -1),
    }


@pytest.mark.parametrize(
    "members",
    [
        [Member("elbo", 0.3)],
        [Member("marginal", 0.0)],
        [Member("elbo", 0.0), Member("marginal", 0.1), Member("elbo", 1.0)],
    ],
)
def test_closed_form_gradient_equals_autograd(batch, members) -> None:
    K = len(members)
    net = PosteriorNet(
        batch["z"].shape[1],
        batch["L"].shape[1],
        members=K,
        generator=torch.Generator().manual_seed(0),
    )
    lam = torch.tensor([mb.kl_weight for mb in members])[:, None]
    marginal = torch.tensor([mb.objective == "marginal" for mb in members])[:, None]
    loss = -member_objective(net(batch["z"]), batch["L"], batch["lp"], lam, marginal).sum()
    loss.backward()
    want = torch.cat([p.grad.reshape(-1) for p in [*net.weights, *net.biases]])

    opt = _FlatAdam(net, 1e-3)
    with torch.no_grad():
        logits, hidden = _forward(opt, batch["z"])
        lq = torch.log_softmax(logits, -1)
        q, L = lq.exp(), batch["L"]
        m3 = marginal[:, :, None]
        g = torch.where(m3, torch.softmax(lq + L, -1) - q, q * (L - (q * L).sum(-1, keepdim=True)))
        diff = lq - batch["lp"]
        g = g - lam[:, :, None] * q * (diff - (q * diff).sum(-1, keepdim=True))
        _backward(opt, g * (-1.0 / len(L)), hidden)
    assert torch.allclose(opt.grad, want, atol=1e-6, rtol=1e-5)


def test_flat_adam_matches_torch_optim(batch) -> None:
    net = PosteriorNet(6, 4, members=2, generator=torch.Generator().manual_seed(1))
    ref = PosteriorNet(6, 4, members=2, generator=torch.Generator().manual_seed(1))
    opt = _FlatAdam(net, 1e-2)
    torch_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(5)
    for _ in range(20):
        grads = [torch.randn(p.shape, generator=g) for p in ref.parameters()]
        for p, gr in zip(ref.parameters(), grads, strict=True):
            p.grad = gr.clone()
        torch_opt.step()
        opt.grad.copy_(torch.cat([gr.reshape(-1) for gr in grads]))
        opt.step()
    want = torch.cat([p.detach().reshape(-1) for p in ref.parameters()])
    assert torch.allclose(opt.theta, want, atol=1e-6)


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
    from training.gate.net import mlp_logits

    np.testing.assert_allclose(res.val_logits[-1, 0], mlp_logits(Z[300:], res.layers[0]), atol=1e-5)
