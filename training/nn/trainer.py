"""Minibatch Adam training of :class:`~training.nn.net.PosteriorNet` members.

Each member maximises, per point, one of the objectives of docs/method.md ("The gate"),
``"elbo"`` or ``"marginal"``, against its own prior; members are independent. The step
writes the objective's gradient in closed form and runs in float32 numpy;
:func:`member_objective` is the autograd reference the tests compare it with
(docs/design.md, "The gate's trainer", says why).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from app.bundle.mixture import log_sum_exp
from training.nn.adam import FlatAdam, backward, forward, log_softmax, softmax, sum_last
from training.nn.net import HIDDEN, PosteriorNet

Objective = Literal["elbo", "marginal"]


@dataclass(frozen=True)
class Member:
    objective: Objective
    kl_weight: float
    prior_index: int = 0  # which of the supplied log priors this member regularises toward
    # lambda_pool: the weight of KL(q || w_pool), the pull toward a reference weight
    # vector (stacking's pool), beside kl_weight's pull toward the adaptive prior.
    pool_kl_weight: float = 0.0


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


@dataclass
class _Objectives:
    """The per-member pieces of the objective, subset together when members are pruned."""

    lam: np.ndarray  # (K, 1, 1)
    marginal: np.ndarray  # (K, 1, 1) bool
    log_prior: np.ndarray  # (n, K or 1, m)

    @classmethod
    def build(
        cls,
        members: Sequence[Member],
        log_priors: np.ndarray,
        log_reference: np.ndarray | None = None,
    ) -> _Objectives:
        """``log_reference``: (m,) log weights that ``pool_kl_weight`` pulls toward.

        ``lam KL(q || p) + lam_pool KL(q || w)`` is ``(lam + lam_pool) KL(q || r)`` up to a
        constant in ``q``, where ``log r`` is the weighted mean of ``log p`` and ``log w``
        (the geometric mixture), so both pulls are one KL term with the same gradient.
        """
        used = sorted({mb.prior_index for mb in members})
        pulled = any(mb.pool_kl_weight > 0 for mb in members)
        if pulled and log_reference is None:
            raise ValueError("members with pool_kl_weight > 0 need log_reference")
        if pulled:
            assert log_reference is not None
            lp = np.stack([_mixed_prior(mb, log_priors, log_reference) for mb in members], axis=1)
        elif len(used) > 1:
            lp = np.stack([log_priors[mb.prior_index] for mb in members], axis=1)
        else:
            lp = log_priors[used[0]][:, None, :]
        lam = [mb.kl_weight + mb.pool_kl_weight for mb in members]
        return cls(
            lam=np.array(lam, dtype=np.float32)[:, None, None],
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
            g = softmax(lq + L) - q
        elif not self.any_marginal:
            g = q * (L - sum_last(q * L))
        else:
            g = np.where(self.marginal, softmax(lq + L) - q, q * (L - sum_last(q * L)))
        if self.any_kl:
            diff = lq - lp.transpose(1, 0, 2)
            g -= self.lam * q * (diff - sum_last(q * diff))
        return g


def _mixed_prior(mb: Member, log_priors: np.ndarray, log_reference: np.ndarray) -> np.ndarray:
    """(n, m) ``log r`` of :meth:`_Objectives.build` for one member."""
    lp = log_priors[mb.prior_index]
    total = mb.kl_weight + mb.pool_kl_weight
    if total == 0:
        return lp
    ref = np.broadcast_to(np.asarray(log_reference, dtype=np.float64), lp.shape)
    return (mb.kl_weight * lp + mb.pool_kl_weight * ref) / total


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
    log_reference: np.ndarray | None = None,
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
    log_reference : (m,) array, optional
        The log weights of the reference (stacking's pool) that members with
        ``pool_kl_weight > 0`` are pulled toward; those members also start there (their
        output bias is ``log_reference``), so that every point of the path starts at its
        end and moves away only as far as the likelihood pays for.
    """
    if (record_val_logits or prune or patience) and validation is None:
        raise ValueError("record_val_logits, prune and patience need validation rows")
    m = log_lik.shape[1]
    K = len(members)
    gen = torch.Generator().manual_seed(int(random_state))
    with torch.no_grad():
        net = PosteriorNet(Z.shape[1], m, hidden, K, generator=gen)
        if log_reference is not None:
            start = np.asarray(log_reference, dtype=np.float64)
            for j, mb in enumerate(members):
                if mb.pool_kl_weight > 0:
                    net.biases[-1][j, 0] = torch.from_numpy(start - start.mean())
    opt = FlatAdam(net, float(learning_rate))
    obj = _Objectives.build(members, log_priors, log_reference)
    z_t = np.ascontiguousarray(Z, dtype=np.float32)
    l_t = np.ascontiguousarray(log_lik, dtype=np.float32)
    track = None
    if validation is not None:
        track = _Tracker(validation, (epochs, K, m), steer, record_val_logits, prune, patience)
    bar = _progress(epochs, progress)
    alive, epochs_run = np.arange(K), 0
    kept: list[tuple[np.ndarray, list[list[tuple[np.ndarray, np.ndarray]]]]] = []
    for epoch in range(epochs):
        _one_epoch(opt, obj, z_t, l_t, gen, batch_size)
        epochs_run = epoch + 1
        bar.update(1)
        if snapshots:
            kept.append((alive.copy(), [opt.member_layers(i) for i in range(len(alive))]))
        if track is None:
            continue
        keep = track.after_epoch(epoch, alive, forward(opt, track.zv)[0])
        if keep is not None:
            opt.keep(keep)
            obj.keep(keep)
            alive = alive[keep]
        if track.stalled(alive, epoch):
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
        val_nll=None if track is None else track.history,
        val_logits=None if track is None else track.seen,
        epochs_run=epochs_run,
        pruned_after=None if track is None else track.pruned_after,
        snapshots=snaps,
    )


def _one_epoch(
    opt: FlatAdam,
    obj: _Objectives,
    z_t: np.ndarray,
    l_t: np.ndarray,
    gen: torch.Generator,
    batch_size: int,
) -> None:
    """One pass over the rows in a fresh order, a step per minibatch."""
    n = len(z_t)
    # One gather per epoch; the minibatches below are then contiguous views.
    order = torch.randperm(n, generator=gen).numpy()
    z_e, l_e, lp_e = z_t[order], l_t[order], obj.log_prior[order]
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        logits, hidden_acts = forward(opt, z_e[start:stop])
        g = obj.gradient(log_softmax(logits), l_e[start:stop], lp_e[start:stop])
        g *= -1.0 / (stop - start)
        backward(opt, g, hidden_acts)
        opt.step()


class _Tracker:
    """The validation rows' NLL per epoch and member, and the pruning and stopping it
    decides (see ``train_members``)."""

    def __init__(
        self,
        validation: tuple[np.ndarray, np.ndarray],
        shape: tuple[int, int, int],
        steer: np.ndarray | None,
        record_val_logits: bool,
        prune: tuple[int, int] | None,
        patience: int | None,
    ) -> None:
        epochs, K, m = shape
        self.zv = np.ascontiguousarray(validation[0], dtype=np.float32)
        self.lv = np.ascontiguousarray(validation[1], dtype=np.float32)
        self.steer = np.arange(len(self.zv)) if steer is None else steer
        self.history = np.full((epochs, K), np.nan)
        self.seen = (
            np.full((epochs, K, len(self.zv), m), np.nan, dtype=np.float32)
            if record_val_logits
            else None
        )
        self.lowest, self.last_gain = np.full(K, np.inf), np.zeros(K, dtype=int)
        self.prune, self.patience = prune, patience
        self.pruned_after: int | None = None

    def after_epoch(
        self, epoch: int, alive: np.ndarray, val_logits: np.ndarray
    ) -> np.ndarray | None:
        """Score the epoch; the positions among ``alive`` to keep when it prunes."""
        self.history[epoch, alive] = _mixture_nll(val_logits, self.lv)
        if self.seen is not None:
            self.seen[epoch, alive] = val_logits
        decide = _mixture_nll(val_logits[:, self.steer], self.lv[self.steer])
        better = decide < self.lowest[alive]
        self.lowest[alive[better]], self.last_gain[alive[better]] = decide[better], epoch
        # Halve at the set epoch, or at the stop if that comes first.
        p = self.prune
        if p and len(alive) > p[1] and (epoch + 1 == p[0] or self.stalled(alive, epoch)):
            self.pruned_after = epoch + 1
            return np.sort(np.argsort(self.lowest[alive])[: p[1]])
        return None

    def stalled(self, alive: np.ndarray, epoch: int) -> bool:
        return _stalled(self.last_gain[alive], epoch, self.patience)


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
