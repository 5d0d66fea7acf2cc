"""Minibatch Adam training of :class:`~training.nn.net.PosteriorNet` members.

Each member ``k`` maximises, per point, one of the objectives in docs/method.md ("The gate"):

- ``"elbo"`` (the paper's beta-ELBO): ``sum_j q_j L_ij - lambda_k KL(q || p_i)``;
- ``"marginal"``: ``log sum_j q_j f_j(y_i|x_i) - lambda_k KL(q || p_i)``; at
  ``lambda = 0`` this is the mixture-of-experts likelihood.

``p_i`` is member ``k``'s prior at training point ``i``. Members are independent: their
summed loss gives each its own gradient, and Adam's update is elementwise.

The network is tiny, so autograd's bookkeeping, not arithmetic, dominated a step (0.64 ms
against 0.16 ms). The step below therefore writes the gradient of the objective in closed
form: with ``q = softmax(a)``, ``d/da sum_j q_j L_j = q * (L - <q, L>)``,
``d/da logsumexp(log q + L) = softmax(log q + L) - q`` and
``d/da KL(q||p) = q * (log q - log p - KL)``. :func:`member_objective` is the autograd
reference; a test checks the two agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from training.nn.net import HIDDEN, PosteriorNet

Objective = Literal["elbo", "marginal"]
BETAS = (0.9, 0.999)
EPS = 1e-8


@dataclass(frozen=True)
class Member:
    objective: Objective
    kl_weight: float
    prior_index: int = 0  # which of the supplied log priors this member regularises toward


@dataclass
class TrainResult:
    layers: list[list[tuple[np.ndarray, np.ndarray]] | None]  # per member; None if pruned
    val_nll: np.ndarray | None  # (epochs, K) mixture NLL on the validation rows
    val_logits: np.ndarray | None  # (epochs, K, n_val, m) gate logits on them, if recorded


def member_objective(
    logits: torch.Tensor,
    log_lik: torch.Tensor,
    log_prior: torch.Tensor,
    kl_weight: torch.Tensor,
    marginal: torch.Tensor,
) -> torch.Tensor:
    """(K,) mean per-point objective; differentiable reference for the manual gradient."""
    lq = torch.log_softmax(logits, dim=-1)
    q = lq.exp()
    fit = torch.where(marginal, torch.logsumexp(lq + log_lik, dim=-1), (q * log_lik).sum(-1))
    kl = (q * (lq - log_prior)).sum(-1)
    return (fit - kl_weight * kl).mean(dim=1)


class _Threads:
    """Pin torch to one thread while training: the gate is too small to gain from two."""

    def __enter__(self) -> None:
        self.saved = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads(self.saved)


class _FlatAdam:
    """All parameters in one flat tensor with per-layer views; Adam as in torch.optim."""

    def __init__(self, net: PosteriorNet, lr: float) -> None:
        tensors = [*net.weights, *net.biases]
        self.theta = torch.cat([t.detach().reshape(-1) for t in tensors])
        self.m = torch.zeros_like(self.theta)
        self.v = torch.zeros_like(self.theta)
        self.lr, self.t = lr, 0
        self.shapes = [tuple(t.shape) for t in tensors]
        self._views()
        self.n_layers = len(net.weights)

    @property
    def W(self) -> list[torch.Tensor]:
        return self.params[: self.n_layers]

    @property
    def b(self) -> list[torch.Tensor]:
        return self.params[self.n_layers :]

    def step(self) -> None:
        b1, b2 = BETAS
        self.t += 1
        self.m.mul_(b1).add_(self.grad, alpha=1 - b1)
        self.v.mul_(b2).addcmul_(self.grad, self.grad, value=1 - b2)
        step_size = self.lr / (1 - b1**self.t)
        denom = (self.v.sqrt() / math.sqrt(1 - b2**self.t)).add_(EPS)
        self.theta.addcdiv_(self.m, denom, value=-step_size)

    def keep(self, idx: torch.Tensor) -> None:
        """Drop every member not in ``idx`` (parameters and Adam's moments alike)."""

        def pick(flat: torch.Tensor) -> torch.Tensor:
            parts, start = [], 0
            for shape in self.shapes:
                size = math.prod(shape)
                parts.append(flat[start : start + size].view(shape)[idx].reshape(-1))
                start += size
            return torch.cat(parts)

        self.theta, self.grad = pick(self.theta), torch.zeros(0)
        self.m, self.v = pick(self.m), pick(self.v)
        self.shapes = [(len(idx), *s[1:]) for s in self.shapes]
        self._views()

    def _views(self) -> None:
        self.grad = torch.zeros_like(self.theta)
        offsets = np.cumsum([0] + [math.prod(s) for s in self.shapes])
        spans = list(zip(offsets[:-1], offsets[1:], self.shapes, strict=True))
        self.params = [self.theta[a:b].view(s) for a, b, s in spans]
        self.grads = [self.grad[a:b].view(s) for a, b, s in spans]

    def member_layers(self, i: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Member ``i``'s layers as float32 numpy ``(W, b)`` pairs."""
        return [
            (w[i].numpy().copy(), b[i, 0].numpy().copy())
            for w, b in zip(self.W, self.b, strict=True)
        ]


def _forward(opt: _FlatAdam, z: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits (K, B, m) and the hidden activations after ReLU (input first)."""
    W, b = opt.W, opt.b
    h = torch.matmul(z, W[0]) + b[0]
    hidden = [z]
    for i in range(1, len(W)):
        h = torch.relu(h)
        hidden.append(h)
        h = torch.baddbmm(b[i], h, W[i])
    return h, hidden


def _backward(opt: _FlatAdam, g: torch.Tensor, hidden: list[torch.Tensor]) -> None:
    """Fill ``opt.grad`` from ``g`` = d loss / d logits, layer by layer."""
    W, gW, gb = opt.W, opt.grads[: opt.n_layers], opt.grads[opt.n_layers :]
    for i in range(len(W) - 1, 0, -1):
        torch.bmm(hidden[i].transpose(1, 2), g, out=gW[i])
        torch.sum(g, dim=1, keepdim=True, out=gb[i])
        g = torch.bmm(g, W[i].transpose(1, 2)) * (hidden[i] > 0)
    torch.matmul(hidden[0].t(), g, out=gW[0])
    torch.sum(g, dim=1, keepdim=True, out=gb[0])


@dataclass
class _Objectives:
    """The per-member pieces of the objective, subset together when members are pruned."""

    lam: torch.Tensor  # (K, 1, 1)
    marginal: torch.Tensor  # (K, 1, 1) bool
    log_prior: torch.Tensor  # (n, K or 1, m)

    @classmethod
    def build(cls, members: Sequence[Member], log_priors: np.ndarray) -> _Objectives:
        used = sorted({mb.prior_index for mb in members})
        lp = (
            np.stack([log_priors[mb.prior_index] for mb in members], axis=1)
            if len(used) > 1
            else log_priors[used[0]][:, None, :]
        )
        return cls(
            lam=torch.tensor([mb.kl_weight for mb in members], dtype=torch.float32)[:, None, None],
            marginal=torch.tensor([mb.objective == "marginal" for mb in members])[:, None, None],
            log_prior=torch.from_numpy(np.ascontiguousarray(lp, dtype=np.float32)),
        )

    def __post_init__(self) -> None:
        self._flags()

    def _flags(self) -> None:
        # Read once here, not per step: each bool() of a tensor costs a few microseconds.
        self.all_marginal = bool(self.marginal.all())
        self.any_marginal = bool(self.marginal.any())
        self.any_kl = bool((self.lam > 0).any())

    def keep(self, idx: torch.Tensor) -> None:
        self.lam, self.marginal = self.lam[idx], self.marginal[idx]
        if self.log_prior.shape[1] > 1:
            self.log_prior = self.log_prior[:, idx].contiguous()
        self._flags()

    def gradient(self, lq: torch.Tensor, L: torch.Tensor, lp: torch.Tensor) -> torch.Tensor:
        """d(objective)/d(logits) per member and row, from the closed forms above."""
        q = lq.exp()
        if self.all_marginal:
            g = torch.softmax(lq + L, dim=-1) - q
        elif not self.any_marginal:
            g = q * (L - (q * L).sum(-1, keepdim=True))
        else:
            g = torch.where(
                self.marginal,
                torch.softmax(lq + L, dim=-1) - q,
                q * (L - (q * L).sum(-1, keepdim=True)),
            )
        if self.any_kl:
            diff = lq - lp.transpose(0, 1)
            g = g - self.lam * q * (diff - (q * diff).sum(-1, keepdim=True))
        return g


def train_members(
    Z: np.ndarray,
    log_lik: np.ndarray,
    log_priors: np.ndarray,
    members: Sequence[Member],
    *,
    hidden: Sequence[int] = HIDDEN,
    learning_rate: float = 1e-3,
    batch_size: int = 64,
    epochs: int = 10,
    random_state: int = 0,
    validation: tuple[np.ndarray, np.ndarray] | None = None,
    record_val_logits: bool = False,
    prune: tuple[int, int] | None = None,
    progress: bool = False,
) -> TrainResult:
    """Train ``len(members)`` networks in one pass over the data.

    Parameters
    ----------
    Z : (n, d) float32 encoded gate features.
    log_lik : (n, m) ``L[i, j]``.
    log_priors : (P, n, m) log prior per training row, for each prior a member may use.
    validation : (Z_val, L_val), optional
        Rows to score the mixture NLL on after every epoch.
    record_val_logits : bool
        Also keep every epoch's gate logits on the validation rows, so that a caller can
        choose a (member, epoch) pair and calibrate it without retraining.
    prune : (epoch, keep), optional
        After that many epochs keep only the ``keep`` members with the best validation
        NLL so far (successive halving): most of a grid is clearly worse early, and the
        rest of the pass then costs a fraction. Pruned members' later entries are NaN and
        their layers None.
    """
    if (record_val_logits or prune) and validation is None:
        raise ValueError("record_val_logits and prune need validation rows")
    n, m = log_lik.shape
    K = len(members)
    gen = torch.Generator().manual_seed(int(random_state))
    with _Threads(), torch.no_grad():
        net = PosteriorNet(Z.shape[1], m, hidden, K, generator=gen)
        opt = _FlatAdam(net, float(learning_rate))
        obj = _Objectives.build(members, log_priors)
        z_t = torch.from_numpy(np.ascontiguousarray(Z, dtype=np.float32))
        l_t = torch.from_numpy(np.ascontiguousarray(log_lik, dtype=np.float32))
        alive = np.arange(K)
        history = np.full((epochs, K), np.nan)
        seen: np.ndarray | None = None
        if validation is not None:
            zv = torch.from_numpy(np.ascontiguousarray(validation[0], dtype=np.float32))
            lv = torch.from_numpy(np.ascontiguousarray(validation[1], dtype=np.float32))
            if record_val_logits:
                seen = np.full((epochs, K, len(validation[0]), m), np.nan, dtype=np.float32)
        bar = _progress(epochs, progress)
        for epoch in range(epochs):
            # One gather per epoch; the minibatches below are then contiguous views.
            order = torch.randperm(n, generator=gen)
            z_e, l_e, lp_e = z_t[order], l_t[order], obj.log_prior[order]
            for start in range(0, n, batch_size):
                stop = min(start + batch_size, n)
                logits, hidden_acts = _forward(opt, z_e[start:stop])
                g = obj.gradient(
                    torch.log_softmax(logits, dim=-1), l_e[start:stop], lp_e[start:stop]
                )
                _backward(opt, g * (-1.0 / (stop - start)), hidden_acts)
                opt.step()
            if validation is not None:
                val_logits = _forward(opt, zv)[0]
                history[epoch, alive] = _mixture_nll(val_logits, lv).numpy()
                if seen is not None:
                    seen[epoch, alive] = val_logits.numpy()
                if prune and epoch + 1 == prune[0] and len(alive) > prune[1]:
                    best = np.nanmin(history[: epoch + 1, alive], axis=0)
                    keep = torch.from_numpy(np.sort(np.argsort(best)[: prune[1]]))
                    opt.keep(keep)
                    obj.keep(keep)
                    alive = alive[keep.numpy()]
            bar.update(1)
        bar.close()
        layers: list[list[tuple[np.ndarray, np.ndarray]] | None] = [None] * K
        for i, k in enumerate(alive):
            layers[k] = opt.member_layers(i)
    return TrainResult(
        layers=layers,
        val_nll=history if validation is not None else None,
        val_logits=seen,
    )


def _mixture_nll(logits: torch.Tensor, log_lik: torch.Tensor) -> torch.Tensor:
    """(K, n) logits + (n, m) L -> (K,) mean of ``-log sum_j q_j f_j(y|x)``."""
    lq = torch.log_softmax(logits, dim=-1)
    return -torch.logsumexp(lq + log_lik, dim=-1).mean(dim=-1)


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="gate epochs", disable=not enabled, leave=False)
