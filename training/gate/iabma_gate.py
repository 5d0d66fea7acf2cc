"""IA-BMA's gate: the amortised posterior ``q_theta(J | x)`` trained against the adaptive prior.

With ``"auto"`` settings the gate chooses its own variant on an inner validation split of
the *training* rows (never on test data): every candidate ``(objective, kl_weight,
prior_temperature)`` trains at once as one batched network, the lowest mixture NLL wins,
and the winner is refitted on all the training rows. See METHOD.md §2 and §2a.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from app.bundle.mixture import mix_classification, mix_regression
from training.combiners.base import Combiner, check_fit_inputs
from training.errors import ParameterError
from training.evidence import Evidence, prior_energy
from training.export.graph import GraphBuilder, dense_layers
from training.gate.net import HIDDEN, mlp_logits, softmax_f32
from training.gate.trainer import Member, train_members
from training.params import check_choice, check_int, check_positive, check_real, is_real
from training.prior import baseline_for_new_inputs, log_prior_at_training_points
from training.splits import folds as folds_for
from training.splits import inner_split

KL_GRID = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0)
PRIOR_TEMPERATURE_GRID = (1.0, 4.0)
# (rows up to, folds): small data is compared by cross-validation, where the cost is low
# and one split would be noise; above 3000 rows one validation split holds enough rows.
AUTO_FOLDS = ((999, 5), (3000, 3))
# (rows up to, repeats): on the smallest data even 5 folds leave the choice of epochs noisy,
# and repeating the cross-validation with other folds is cheap there.
AUTO_REPEATS = ((999, 2),)
# Candidates still trained after the first quarter of the epochs of the first fold.
SURVIVORS = 3
TEMPERATURE_GRID = np.exp(np.linspace(np.log(0.25), np.log(4.0), 57))


class IABMAGate(Combiner):
    """Input-adaptive BMA weights: ``alpha(x) = q_theta(x)``.

    Parameters
    ----------
    kl_weight : float or "auto", default="auto"
        ``lambda_KL``. ``"auto"`` picks from ``kl_grid`` by validation mixture NLL.
    objective : {"elbo", "marginal", "auto"}, default="auto"
        ``"elbo"`` is the paper's beta-ELBO ``E_q[log f] - lambda KL(q || prior)``;
        ``"marginal"`` is ``log E_q[f] - lambda KL(q || prior)``, the mixture likelihood
        regularised toward the prior. ``"auto"`` tries both.
    prior_temperature : float or "auto", default=1.0
        ``tau`` in ``prior = softmax(E / tau)``; larger flattens the prior.
        ``"auto"`` tries ``prior_temperature_grid``.
    energy_reduction : {"mean", "sum"}, default="mean"
        How the baseline ``B_j`` reduces the other training points' energies. ``"sum"`` is
        the paper taken literally: then the leave-one-out energy is the same at every
        training point, so the prior does not adapt, and it grows with n until it is
        one-hot. It is kept only to reproduce the paper.
    energy_scale : {"unit", "sigma"}, default="unit"
        Regression only: the std ``s`` of the Gaussian in the energy. ``"sigma"`` makes
        the prior favour the noisiest expert, so the paper's ``s = 1`` is the default.
    mc_samples : int or None
        Regression only: estimate the energy by Monte Carlo with this many samples
        instead of the closed form.
    temperature : float, "auto" or None, default="auto"
        Post-hoc temperature of the mixture (``p ** (1/T)``, renormalised; regression:
        every sigma times T), fitted by NLL on the held-out rows of the selection. The
        mixture of OOF-weighted experts tends to be under-confident, so T < 1 is common.
    early_stopping : bool, default=True
        Pick the training length (up to ``epochs``) by held-out mixture NLL as well; the
        refit on all rows then runs for the same number of optimiser steps.
    stopping_rule : {"one_se", "min"}, default="one_se"
        With early stopping, the winner's epoch: the lowest held-out NLL (``"min"``), or
        the earliest epoch whose NLL is within one paired standard error of that (per-row
        differences on the same held-out rows): the minimum of a noisy curve is
        optimistic, and fewer steps are the more regularised gate.
    selection_folds : int or "auto", default="auto"
        How candidates are compared: by k-fold cross-validation over the training rows, or
        on one validation split (1). ``"auto"``: 5 folds below 1000 rows, 3 up to 3000,
        else one split.
    selection_repeats : int or "auto", default="auto"
        Repeat that with other folds and average: ``"auto"`` repeats twice below 1000 rows.
    validation_fraction : float, default=0.2
        Share of the training rows held out when there is one validation split.
    search_max_rows : int or None, default=5000
        Cap on the inner training rows used while comparing candidates; the final refit
        uses every row. Keeps ``"auto"`` affordable on large data.
    hidden_layer_sizes, learning_rate, batch_size : network and Adam settings; the paper's
        (64, 32, 16), 1e-3 and 64.
    epochs : int, default=40
        Epochs over the selection's training rows (the most, with early stopping). The
        paper's 10 leave the gate under-trained on small data (the simulation: 130 steps).
    random_state : int
        Seeds the split, the initialisation and the minibatch order.
    """

    name = "iabma"

    def __init__(
        self,
        kl_weight: float | Literal["auto"] = "auto",
        objective: Literal["elbo", "marginal", "auto"] = "auto",
        prior_temperature: float | Literal["auto"] = 1.0,
        energy_reduction: Literal["mean", "sum"] = "mean",
        energy_scale: Literal["unit", "sigma"] = "unit",
        mc_samples: int | None = None,
        temperature: float | Literal["auto"] | None = "auto",
        early_stopping: bool = True,
        stopping_rule: Literal["one_se", "min"] = "one_se",
        selection_folds: int | Literal["auto"] = "auto",
        selection_repeats: int | Literal["auto"] = "auto",
        validation_fraction: float = 0.2,
        search_max_rows: int | None = 5000,
        kl_grid: Sequence[float] = KL_GRID,
        prior_temperature_grid: Sequence[float] = PRIOR_TEMPERATURE_GRID,
        hidden_layer_sizes: Sequence[int] = HIDDEN,
        learning_rate: float = 1e-3,
        batch_size: int = 64,
        epochs: int = 40,
        random_state: int = 0,
        verbose: bool = False,
    ) -> None:
        self.kl_weight = kl_weight
        self.objective = objective
        self.prior_temperature = prior_temperature
        self.energy_reduction = energy_reduction
        self.energy_scale = energy_scale
        self.mc_samples = mc_samples
        self.temperature = temperature
        self.early_stopping = early_stopping
        self.stopping_rule = stopping_rule
        self.selection_folds = selection_folds
        self.selection_repeats = selection_repeats
        self.validation_fraction = validation_fraction
        self.search_max_rows = search_max_rows
        self.kl_grid = kl_grid
        self.prior_temperature_grid = prior_temperature_grid
        self.hidden_layer_sizes = hidden_layer_sizes
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.epochs = epochs
        self.random_state = random_state
        self.verbose = verbose

    # -- parameter checks ---------------------------------------------------------------
    def _grid(self, value: Any, grid: Sequence[float], param: str) -> list[float]:
        if value == "auto":
            return [float(v) for v in grid]
        if not is_real(value) or value < 0:
            raise ParameterError(param, value, "must be a non-negative number or 'auto'")
        return [float(value)]

    def _validate(self) -> tuple[list[str], list[float], list[float]]:
        objective = check_choice("objective", self.objective, ("elbo", "marginal", "auto"))
        objectives = ["elbo", "marginal"] if objective == "auto" else [objective]
        lams = self._grid(self.kl_weight, self.kl_grid, "kl_weight")
        taus = self._grid(self.prior_temperature, self.prior_temperature_grid, "prior_temperature")
        if any(t <= 0 for t in taus):
            raise ParameterError("prior_temperature", self.prior_temperature, "must be positive")
        check_choice("energy_reduction", self.energy_reduction, ("mean", "sum"))
        check_choice("energy_scale", self.energy_scale, ("unit", "sigma"))
        check_choice("stopping_rule", self.stopping_rule, ("one_se", "min"))
        check_real("validation_fraction", self.validation_fraction, low=0.05, high=0.5)
        check_int("batch_size", self.batch_size)
        check_int("epochs", self.epochs)
        check_positive("learning_rate", self.learning_rate)
        if self.mc_samples is not None:
            check_int("mc_samples", self.mc_samples)
        if self.temperature not in (None, "auto"):
            check_positive("temperature", self.temperature)
        return objectives, lams, taus

    # -- fitting --------------------------------------------------------------------------
    def fit(self, Z: np.ndarray, evidence: Evidence) -> IABMAGate:
        Z = check_fit_inputs(Z, evidence)
        objectives, lams, taus = self._validate()
        energy = prior_energy(
            evidence,
            energy_scale=self.energy_scale,
            mc_samples=self.mc_samples,
            random_state=self.random_state,
        )
        log_priors = np.stack(
            [log_prior_at_training_points(energy, self.energy_reduction, t) for t in taus]
        )
        # At lambda = 0 the prior has no effect: one member per objective is enough.
        members = sorted(
            {
                Member(o, lam, 0 if lam == 0 else k)
                for o, lam, (k, _) in itertools.product(objectives, lams, enumerate(taus))
            },
            key=lambda mb: (mb.objective, mb.kl_weight, mb.prior_index),
        )
        searching = len(members) > 1 or self.early_stopping or self.temperature == "auto"
        chosen, epochs, self.temperature_ = members[0], self.epochs, 1.0
        self.search_results_: list[dict[str, Any]] = []
        if searching:
            chosen, steps = self._search(Z, evidence, log_priors, members, taus)
            # The refit sees more rows per epoch; it trains for as many steps as the
            # chosen candidate did, which is what its validation score measured.
            epochs = max(1, round(steps / -(-evidence.n // int(self.batch_size))))
        elif isinstance(self.temperature, (int, float)):
            self.temperature_ = float(self.temperature)
        result = train_members(
            Z, evidence.log_lik, log_priors, [chosen], epochs=epochs, **self._net_kwargs()
        )
        self.layers_ = result.layers[0]
        self.selected_ = {
            "objective": chosen.objective,
            "kl_weight": chosen.kl_weight,
            "prior_temperature": taus[chosen.prior_index],
            "epochs": int(epochs),
            "temperature": self.temperature_,
        }
        self.prior_baseline_ = baseline_for_new_inputs(energy, self.energy_reduction)
        self.prior_temperature_ = taus[chosen.prior_index]
        self.n_features_in_ = Z.shape[1]
        return self

    def _net_kwargs(self) -> dict[str, Any]:
        return {
            "hidden": tuple(self.hidden_layer_sizes),
            "learning_rate": float(self.learning_rate),
            "batch_size": int(self.batch_size),
            "random_state": int(self.random_state),
            "progress": bool(self.verbose),
        }

    def _selection_splits(self, ev: Evidence) -> list[tuple[np.ndarray, np.ndarray]]:
        folds = self.selection_folds
        if folds == "auto":
            folds = next((k for rows, k in AUTO_FOLDS if ev.n <= rows), 1)
        if isinstance(folds, bool) or not isinstance(folds, int) or folds < 1:
            raise ParameterError("selection_folds", self.selection_folds, "must be >= 1 or 'auto'")
        repeats = self.selection_repeats
        if repeats == "auto":
            repeats = next((r for rows, r in AUTO_REPEATS if ev.n <= rows), 1)
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
            raise ParameterError(
                "selection_repeats", self.selection_repeats, "must be >= 1 or 'auto'"
            )
        if folds == 1:
            return [
                inner_split(ev.y, ev.task, self.validation_fraction, self.random_state + r)
                for r in range(repeats)
            ]
        return [
            (np.sort(tr), np.sort(va))
            for r in range(repeats)
            for tr, va in folds_for(ev.y, ev.task, folds, self.random_state + r)
        ]

    def _search(
        self,
        Z: np.ndarray,
        ev: Evidence,
        log_priors: np.ndarray,
        members: list[Member],
        taus: list[float],
    ) -> tuple[Member, int]:
        """Score candidates on held-out rows; return the winner and its training steps.

        With several folds every training row is held out once, so the choice and the
        temperature rest on all n rows rather than on one small split. In the first fold
        (or the only split) every candidate trains for a quarter of the epochs, then only
        the ``SURVIVORS`` best go on (successive halving): the clearly worse candidates,
        large lambda mostly, never recover, and they would cost most of the time.
        """
        calibrate = self.temperature == "auto"
        one_se = self.early_stopping and self.stopping_rule == "one_se"
        record = calibrate or one_se
        splits = self._selection_splits(ev)
        rng = np.random.default_rng(self.random_state)
        alive = list(range(len(members)))
        total = np.zeros((self.epochs, len(members)))
        count = np.zeros(len(members))
        pruned: dict[int, float] = {}
        logits: dict[int, list[np.ndarray]] = {k: [] for k in alive}
        held_out: dict[int, list[np.ndarray]] = {k: [] for k in alive}
        steps_per_epoch = 1
        for fold, (tr, va) in enumerate(splits):
            if self.search_max_rows is not None and len(tr) > self.search_max_rows:
                tr = np.sort(rng.choice(tr, size=int(self.search_max_rows), replace=False))
            steps_per_epoch = -(-len(tr) // int(self.batch_size))
            halve = fold == 0 and len(alive) > SURVIVORS and self.epochs >= 4
            res = train_members(
                Z[tr],
                ev.log_lik[tr],
                log_priors[:, tr],
                [members[k] for k in alive],
                epochs=self.epochs,
                validation=(Z[va], ev.log_lik[va]),
                record_val_logits=record,
                prune=(self.epochs // 4, SURVIVORS) if halve else None,
                **self._net_kwargs(),
            )
            assert res.val_nll is not None
            survivors = []
            for i, k in enumerate(alive):
                history = res.val_nll[:, i]
                if np.isnan(history[-1]):
                    pruned[k] = float(np.nanmin(history))
                    continue
                survivors.append(k)
                total[:, k] += history * len(va)
                count[k] += len(va)
                held_out[k].append(va)
                if record:
                    assert res.val_logits is not None
                    logits[k].append(res.val_logits[:, i])
            alive = survivors
        nll = total[:, alive] / count[alive]
        epochs, scores = self._best_epochs(nll)
        best = int(np.argmin(scores))
        winner, epoch = alive[best], int(epochs[best])
        if one_se:
            epoch = self._one_se_epoch(epoch, logits[winner], held_out[winner], ev)
        for k, mb in enumerate(members):
            row: dict[str, Any] = {
                "objective": mb.objective,
                "kl_weight": mb.kl_weight,
                "prior_temperature": taus[mb.prior_index],
            }
            if k in alive:
                i = alive.index(k)
                row.update(epochs=int(epochs[i]) + 1, val_nll=float(scores[i]))
            else:
                row.update(pruned_after_epoch=self.epochs // 4, val_nll=pruned[k])
            self.search_results_.append(row)
        self.n_selection_folds_ = len(splits)
        if calibrate:
            w = np.concatenate([softmax_f32(lg[epoch]) for lg in logits[winner]])
            rows = np.concatenate(held_out[winner])
            self.temperature_ = fit_mixture_temperature(w, ev.rows(rows))
        elif self.temperature is not None:
            self.temperature_ = float(self.temperature)
        return members[winner], (epoch + 1) * steps_per_epoch

    @staticmethod
    def _one_se_epoch(
        epoch: int, logits: list[np.ndarray], held_out: list[np.ndarray], ev: Evidence
    ) -> int:
        """The earliest epoch no worse than ``epoch`` by one paired standard error.

        Each held-out row's NLL at an earlier epoch is compared with its own NLL at the
        best epoch, so the test sees the difference the extra training makes rather than
        how much rows differ from one another (which would stop far too early).
        """
        rows = ev.log_lik[np.concatenate(held_out)]
        lq = np.concatenate([lg[: epoch + 1] for lg in logits], axis=1).astype(np.float64)
        lq -= lq.max(axis=2, keepdims=True)
        lq -= np.log(np.exp(lq).sum(axis=2, keepdims=True))
        joint = lq + rows[None]
        top = joint.max(axis=2, keepdims=True)
        per_row = -(top[..., 0] + np.log(np.exp(joint - top).sum(axis=2)))  # (epochs, rows)
        diff = per_row - per_row[epoch]
        se = diff.std(axis=1, ddof=1) / np.sqrt(diff.shape[1])
        return int(np.flatnonzero(diff.mean(axis=1) <= se)[0])

    def _best_epochs(self, nll: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per member: the epoch index to keep (the last unless early stopping) and its NLL."""
        if self.early_stopping:
            epochs = np.argmin(np.where(np.isfinite(nll), nll, np.inf), axis=0)
        else:
            epochs = np.full(nll.shape[1], self.epochs - 1)
        return epochs, nll[epochs, np.arange(nll.shape[1])]

    # -- prediction and export ------------------------------------------------------------
    def weights(self, Z: np.ndarray) -> np.ndarray:
        self._check_fitted("layers_")
        return softmax_f32(mlp_logits(Z, self.layers_))

    def to_onnx(self, g: GraphBuilder, z: str) -> str:
        self._check_fitted("layers_")
        return g.softmax_rows(dense_layers(g, z, self.layers_))

    def manifest_params(self) -> dict[str, Any]:
        params = super().manifest_params()
        params["selected"] = dict(getattr(self, "selected_", {}))
        return params


def mixture_nll(weights: np.ndarray, ev: Evidence, temperature: float) -> float:
    """Mean NLL of the mixture on the rows of ``ev``, after the mixture temperature."""
    if ev.proba is not None:
        p = mix_classification(weights, ev.proba, temperature).proba
        return float(-np.mean(np.log(np.clip(p[np.arange(ev.n), ev.y], 1e-300, None))))
    assert ev.means is not None and ev.sigmas is not None
    return float(-np.mean(mix_regression(weights, ev.means, ev.sigmas, temperature).logpdf(ev.y)))


def fit_mixture_temperature(weights: np.ndarray, ev: Evidence) -> float:
    """The temperature on a log grid (0.25 to 4) with the lowest held-out NLL."""
    nlls = [mixture_nll(weights, ev, float(t)) for t in TEMPERATURE_GRID]
    return float(TEMPERATURE_GRID[int(np.argmin(nlls))])
