"""Minibatch Adam training of :class:`~training.nn.net.PosteriorNet` members.

Each member maximises, per point, one of the objectives of docs/method.md ("The gate"),
``"elbo"`` or ``"marginal"``, against its own prior; members are independent. The step
writes the objective's gradient in closed form and runs in float32 numpy;
:func:`member_objective` is the autograd reference the tests compare it with
(docs/design.md, "The gate's trainer", says why).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from app.bundle.mixture import log_sum_exp
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
    epochs_run: int = 0  # fewer than asked when ``patience`` stopped the pass
    pruned_after: int | None = None  # the epoch after which ``prune`` dropped members
    # per member still alive at the end: its layers after every epoch, if recorded
    snapshots: dict[int, list[list[tuple[np.ndarray, np.ndarray]]]] | None = None


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


@functools.cache
def _ones(rows: int, cols: int, dtype: np.dtype) -> np.ndarray:
    return np.ones((rows, cols), dtype=dtype)


def _sum_last(a: np.ndarray) -> np.ndarray:
    """``a.sum(-1, keepdims=True)`` as a product with ones: numpy's reduction over a short
    last axis costs three times a BLAS call on arrays this small."""
    return np.matmul(a, _ones(a.shape[-1], 1, a.dtype))


def _sum_rows(g: np.ndarray, out: np.ndarray) -> None:
    """``g.sum(axis=1, keepdims=True)`` into ``out`` (the bias gradient), likewise."""
    np.matmul(_ones(1, g.shape[1], g.dtype), g, out=out)


def _max_last(a: np.ndarray) -> np.ndarray:
    """``a.max(-1, keepdims=True)`` as running maxima of the columns: with a handful of
    experts, numpy's reduction over the short last axis costs 2-5x these few calls."""
    top = a[..., :1].copy()
    for j in range(1, a.shape[-1]):
        np.maximum(top, a[..., j : j + 1], out=top)
    return top


def log_softmax(a: np.ndarray) -> np.ndarray:
    out = a - _max_last(a)
    out -= np.log(_sum_last(np.exp(out)))
    return out


def _softmax(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - _max_last(a))
    e /= _sum_last(e)
    return e


class _FlatAdam:
    """All parameters in one flat float32 array with per-layer views; Adam as in torch.optim."""

    def __init__(self, net: PosteriorNet, lr: float) -> None:
        tensors = [*net.weights, *net.biases]
        self.theta = np.concatenate([t.detach().numpy().reshape(-1) for t in tensors])
        self.m = np.zeros_like(self.theta)
        self.v = np.zeros_like(self.theta)
        self.lr, self.t = lr, 0
        self.shapes = [tuple(t.shape) for t in tensors]
        self._views()
        self.n_layers = len(net.weights)

    @property
    def W(self) -> list[np.ndarray]:
        return self.params[: self.n_layers]

    @property
    def b(self) -> list[np.ndarray]:
        return self.params[self.n_layers :]

    def step(self) -> None:
        b1, b2 = BETAS
        self.t += 1
        self.m *= b1
        self.m += (1 - b1) * self.grad
        self.v *= b2
        self.v += (1 - b2) * np.square(self.grad)
        step_size = self.lr / (1 - b1**self.t)
        denom = np.sqrt(self.v)
        denom *= 1 / math.sqrt(1 - b2**self.t)
        denom += EPS
        self.theta -= step_size * self.m / denom

    def keep(self, idx: np.ndarray) -> None:
        """Drop every member not in ``idx`` (parameters and Adam's moments alike)."""

        def pick(flat: np.ndarray) -> np.ndarray:
            parts, start = [], 0
            for shape in self.shapes:
                size = math.prod(shape)
                parts.append(flat[start : start + size].reshape(shape)[idx].reshape(-1))
                start += size
            return np.concatenate(parts)

        self.theta, self.m, self.v = pick(self.theta), pick(self.m), pick(self.v)
        self.shapes = [(len(idx), *s[1:]) for s in self.shapes]
        self._views()

    def _views(self) -> None:
        self.grad = np.zeros_like(self.theta)
        offsets = np.cumsum([0] + [math.prod(s) for s in self.shapes])
        spans = list(zip(offsets[:-1], offsets[1:], self.shapes, strict=True))
        self.params = [self.theta[a:b].reshape(s) for a, b, s in spans]
        self.grads = [self.grad[a:b].reshape(s) for a, b, s in spans]

    def member_layers(self, i: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Member ``i``'s layers as float32 numpy ``(W, b)`` pairs."""
        return [(w[i].copy(), b[i, 0].copy()) for w, b in zip(self.W, self.b, strict=True)]


def _forward(opt: _FlatAdam, z: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Logits (K, B, m) and the hidden activations after ReLU (input first)."""
    W, b = opt.W, opt.b
    h = np.matmul(z, W[0])
    h += b[0]
    hidden = [z]
    for i in range(1, len(W)):
        np.maximum(h, 0.0, out=h)
        hidden.append(h)
        h = np.matmul(h, W[i])
        h += b[i]
    return h, hidden


def _backward(opt: _FlatAdam, g: np.ndarray, hidden: list[np.ndarray]) -> None:
    """Fill ``opt.grad`` from ``g`` = d loss / d logits, layer by layer."""
    W, gW, gb = opt.W, opt.grads[: opt.n_layers], opt.grads[opt.n_layers :]
    for i in range(len(W) - 1, 0, -1):
        np.matmul(hidden[i].transpose(0, 2, 1), g, out=gW[i])
        _sum_rows(g, gb[i])
        g = np.matmul(g, W[i].transpose(0, 2, 1))
        g *= hidden[i] > 0
    np.matmul(hidden[0].T, g, out=gW[0])
    _sum_rows(g, gb[0])


@dataclass
class _Objectives:
    """The per-member pieces of the objective, subset together when members are pruned."""

    lam: np.ndarray  # (K, 1, 1)
    marginal: np.ndarray  # (K, 1, 1) bool
    log_prior: np.ndarray  # (n, K or 1, m)

    @classmethod
    def build(cls, members: Sequence[Member], log_priors: np.ndarray) -> _Objectives:
        used = sorted({mb.prior_index for mb in members})
        lp = (
            np.stack([log_priors[mb.prior_index] for mb in members], axis=1)
            if len(used) > 1
            else log_priors[used[0]][:, None, :]
        )
        return cls(
            lam=np.array([mb.kl_weight for mb in members], dtype=np.float32)[:, None, None],
            marginal=np.array([mb.objective == "marginal" for mb in members])[:, None, None],
            log_prior=np.ascontiguousarray(lp, dtype=np.float32),
        )

    def __post_init__(self) -> None:
        self._flags()

    def _flags(self) -> None:
        self.all_marginal = bool(self.marginal.all())
        self.any_marginal = bool(self.marginal.any())
        self.any_kl = bool((self.lam > 0).any())

    def keep(self, idx: np.ndarray) -> None:
        self.lam, self.marginal = self.lam[idx], self.marginal[idx]
        if self.log_prior.shape[1] > 1:
            self.log_prior = np.ascontiguousarray(self.log_prior[:, idx])
        self._flags()

    def gradient(self, lq: np.ndarray, L: np.ndarray, lp: np.ndarray) -> np.ndarray:
        """d(objective)/d(logits) per member and row, from the closed forms above.

        ``lq``: (K, B, m) log q; ``L``: (B, m); ``lp``: (B, K or 1, m) log priors.
        """
        q = np.exp(lq)
        if self.all_marginal:
            g = _softmax(lq + L) - q
        elif not self.any_marginal:
            g = q * (L - _sum_last(q * L))
        else:
            g = np.where(self.marginal, _softmax(lq + L) - q, q * (L - _sum_last(q * L)))
        if self.any_kl:
            diff = lq - lp.transpose(1, 0, 2)
            g -= self.lam * q * (diff - _sum_last(q * diff))
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
    patience: int | None = None,
    steer: np.ndarray | None = None,
    snapshots: bool = False,
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
        rest of the pass then costs a fraction; a pass that stops earlier (``patience``)
        halves when it stops. Pruned members' later entries are NaN and their layers None.
    patience : int, optional
        Stop the pass once ``patience`` epochs in a row brought no member a new lowest
        validation NLL: with early stopping the later epochs could not be chosen. Their
        entries are NaN.
    steer : int array, optional
        The validation rows (indices into them) whose NLL decides ``prune`` and
        ``patience``; by default all. The others are only scored, so that a later
        comparison on them is not biased by these decisions.
    snapshots : bool
        Keep every member's layers after every epoch (``TrainResult.snapshots``), so a
        caller can take a member at any epoch without retraining.
    """
    if (record_val_logits or prune or patience) and validation is None:
        raise ValueError("record_val_logits, prune and patience need validation rows")
    n, m = log_lik.shape
    K = len(members)
    gen = torch.Generator().manual_seed(int(random_state))
    with torch.no_grad():
        net = PosteriorNet(Z.shape[1], m, hidden, K, generator=gen)
    opt = _FlatAdam(net, float(learning_rate))
    obj = _Objectives.build(members, log_priors)
    z_t = np.ascontiguousarray(Z, dtype=np.float32)
    l_t = np.ascontiguousarray(log_lik, dtype=np.float32)
    alive = np.arange(K)
    history = np.full((epochs, K), np.nan)
    seen: np.ndarray | None = None
    if validation is not None:
        zv = np.ascontiguousarray(validation[0], dtype=np.float32)
        lv = np.ascontiguousarray(validation[1], dtype=np.float32)
        if steer is None:
            steer = np.arange(len(zv))
        if record_val_logits:
            seen = np.full((epochs, K, len(validation[0]), m), np.nan, dtype=np.float32)
    bar = _progress(epochs, progress)
    lowest, last_gain, epochs_run = np.full(K, np.inf), np.zeros(K, dtype=int), 0
    pruned_after: int | None = None
    kept: list[tuple[np.ndarray, list[list[tuple[np.ndarray, np.ndarray]]]]] = []
    for epoch in range(epochs):
        # One gather per epoch; the minibatches below are then contiguous views.
        order = torch.randperm(n, generator=gen).numpy()
        z_e, l_e, lp_e = z_t[order], l_t[order], obj.log_prior[order]
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            logits, hidden_acts = _forward(opt, z_e[start:stop])
            g = obj.gradient(log_softmax(logits), l_e[start:stop], lp_e[start:stop])
            g *= -1.0 / (stop - start)
            _backward(opt, g, hidden_acts)
            opt.step()
        epochs_run = epoch + 1
        bar.update(1)
        if snapshots:
            kept.append((alive.copy(), [opt.member_layers(i) for i in range(len(alive))]))
        if validation is None:
            continue
        val_logits = _forward(opt, zv)[0]
        history[epoch, alive] = _mixture_nll(val_logits, lv)
        if seen is not None:
            seen[epoch, alive] = val_logits
        decide = _mixture_nll(val_logits[:, steer], lv[steer])
        better = decide < lowest[alive]
        lowest[alive[better]], last_gain[alive[better]] = decide[better], epoch
        # Halve at the set epoch, or at the stop if that comes first.
        if (
            prune
            and len(alive) > prune[1]
            and (epochs_run == prune[0] or _stalled(last_gain[alive], epoch, patience))
        ):
            keep = np.sort(np.argsort(lowest[alive])[: prune[1]])
            opt.keep(keep)
            obj.keep(keep)
            alive, pruned_after = alive[keep], epochs_run
        if _stalled(last_gain[alive], epoch, patience):
            break
    bar.close()
    layers: list[list[tuple[np.ndarray, np.ndarray]] | None] = [None] * K
    for i, k in enumerate(alive):
        layers[k] = opt.member_layers(i)
    snaps = None
    if snapshots:
        snaps = {
            int(k): [members_then[list(was).index(k)] for was, members_then in kept] for k in alive
        }
    return TrainResult(
        layers=layers,
        val_nll=history if validation is not None else None,
        val_logits=seen,
        epochs_run=epochs_run,
        pruned_after=pruned_after,
        snapshots=snaps,
    )


def _stalled(last_gain: np.ndarray, epoch: int, patience: int | None) -> bool:
    """Whether ``patience`` epochs in a row brought none of these members a new lowest."""
    if not patience:
        return False
    return epoch - int(last_gain.max()) >= patience


def _mixture_nll(logits: np.ndarray, log_lik: np.ndarray) -> np.ndarray:
    """(K, n) logits + (n, m) L -> (K,) mean of ``-log sum_j q_j f_j(y|x)``."""
    return -log_sum_exp(log_softmax(logits) + log_lik).mean(axis=-1)


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="gate epochs", disable=not enabled, leave=False)
