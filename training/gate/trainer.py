"""Minibatch Adam training of :class:`~training.gate.net.PosteriorNet` members.

Each member ``k`` maximises, per point, one of the objectives of METHOD.md §2:

- ``"elbo"`` (the paper's beta-ELBO): ``sum_j q_j L_ij - lambda_k KL(q || p_i)``;
- ``"marginal"``: ``log sum_j q_j f_j(y_i|x_i) - lambda_k KL(q || p_i)``; at
  ``lambda = 0`` this is the mixture-of-experts likelihood.

``p_i`` is member ``k``'s log prior at training point ``i``. Members are independent: the
summed loss gives each its own gradient, and Adam's update is elementwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from training.gate.net import HIDDEN, PosteriorNet

Objective = Literal["elbo", "marginal"]


@dataclass(frozen=True)
class Member:
    objective: Objective
    kl_weight: float
    prior_index: int = 0  # which of the supplied log priors this member regularises toward


@dataclass
class TrainResult:
    layers: list[list[tuple[np.ndarray, np.ndarray]]]  # per member, at its kept epoch
    val_nll: np.ndarray | None  # (epochs, K) mixture NLL on the validation rows
    kept_epoch: np.ndarray  # (K,) 1-based epoch whose parameters were kept


class _Threads:
    """Pin torch to one thread while training: the gate is too small to gain from two."""

    def __enter__(self) -> None:
        self.saved = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads(self.saved)


def _mixture_nll(logits: torch.Tensor, log_lik: torch.Tensor) -> torch.Tensor:
    """(K, n) logits + (n, m) L -> (K,) mean of ``-log sum_j q_j f_j(y|x)``."""
    lq = torch.log_softmax(logits, dim=-1)
    return -torch.logsumexp(lq + log_lik, dim=-1).mean(dim=-1)


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
    keep_best: bool = False,
    progress: bool = False,
) -> TrainResult:
    """Train ``len(members)`` networks in one pass.

    Parameters
    ----------
    Z : (n, d) float32 encoded gate features.
    log_lik : (n, m) ``L[i, j]``.
    log_priors : (P, n, m) log prior per training row, for each prior a member may use.
    validation : (Z_val, L_val), optional
        Rows to score the mixture NLL on after every epoch.
    keep_best : bool
        Keep each member's parameters from its best validation epoch (early stopping)
        rather than from the last epoch.
    """
    if keep_best and validation is None:
        raise ValueError("keep_best needs validation rows")
    n, m = log_lik.shape
    gen = torch.Generator().manual_seed(int(random_state))
    with _Threads():
        net = PosteriorNet(Z.shape[1], m, hidden, len(members), generator=gen)
        opt = torch.optim.Adam(net.parameters(), lr=learning_rate)
        z_t = torch.from_numpy(np.ascontiguousarray(Z, dtype=np.float32))
        l_t = torch.from_numpy(np.ascontiguousarray(log_lik, dtype=np.float32))
        lp_t = torch.from_numpy(np.ascontiguousarray(log_priors, dtype=np.float32))
        prior_idx = torch.tensor([mb.prior_index for mb in members])
        lam = torch.tensor([mb.kl_weight for mb in members], dtype=torch.float32)[:, None]
        marginal = torch.tensor([mb.objective == "marginal" for mb in members])[:, None]
        use_elbo = bool((~marginal).any())
        use_marginal = bool(marginal.any())
        if validation is not None:
            zv = torch.from_numpy(np.ascontiguousarray(validation[0], dtype=np.float32))
            lv = torch.from_numpy(np.ascontiguousarray(validation[1], dtype=np.float32))
        history, best_nll = [], torch.full((len(members),), float("inf"))
        kept = np.full(len(members), epochs)
        snapshot = [p.detach().clone() for p in net.parameters()]
        bar = _progress(epochs, progress)
        for epoch in range(epochs):
            order = torch.randperm(n, generator=gen)
            for start in range(0, n, batch_size):
                idx = order[start : start + batch_size]
                lq = torch.log_softmax(net(z_t[idx]), dim=-1)  # (K, B, m)
                L = l_t[idx]
                q = lq.exp()
                fit = torch.zeros(lq.shape[:2])
                if use_elbo:
                    fit = (q * L).sum(-1)
                if use_marginal:
                    fit = torch.where(marginal, torch.logsumexp(lq + L, dim=-1), fit)
                lp = lp_t[:, idx][prior_idx]  # (K, B, m)
                kl = (q * (lq - lp)).sum(-1)
                loss = -(fit - lam * kl).mean(dim=1).sum()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            if validation is not None:
                with torch.no_grad():
                    nll = _mixture_nll(net(zv), lv)
                history.append(nll.numpy().copy())
                if keep_best:
                    better = nll < best_nll
                    best_nll = torch.where(better, nll, best_nll)
                    kept[better.numpy()] = epoch + 1
                    for saved, p in zip(snapshot, net.parameters(), strict=True):
                        saved[better] = p.detach()[better]
            bar.update(1)
        bar.close()
        if keep_best:
            with torch.no_grad():
                for saved, p in zip(snapshot, net.parameters(), strict=True):
                    p.copy_(saved)
        layers = [net.member_layers(k) for k in range(len(members))]
    return TrainResult(
        layers=layers,
        val_nll=np.stack(history) if history else None,
        kept_epoch=kept,
    )


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="gate epochs", disable=not enabled, leave=False)
