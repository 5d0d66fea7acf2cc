"""IA-BMA's gate: the amortised posterior ``q_theta(J | x)`` trained against the adaptive prior.

With ``"auto"`` settings the gate chooses its own variant on an inner validation split of
the *training* rows (never on test data): every candidate ``(objective, kl_weight,
prior_temperature)`` trains at once as one batched network, the lowest mixture NLL wins,
and the winner is refitted on all the training rows. See docs/method.md, "The gate".
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np

from app.bundle.prior import baseline_for_new_inputs, log_prior_at_training_points
from training.combiners.base import (
    Combiner,
    check_features,
    check_fit_inputs,
    constant_weights,
    constant_weights_onnx,
)
from training.combiners.selection import SelectionConfig, search_candidates
from training.errors import ParameterError
from training.evidence import Evidence, prior_energy
from training.nn.net import HIDDEN, mlp_logits, softmax_f32
from training.nn.trainer import Member, Objective, train_members
from training.onnx_graph import GraphBuilder, dense_layers
from training.params import check_choice, check_int, check_positive, check_real, is_real

KL_GRID = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0)
PRIOR_TEMPERATURE_GRID = (1.0, 4.0)


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
    n_iter_no_change : int or None, default=4
        With early stopping, end a training pass of the search once this many epochs in
        a row improved no candidate's held-out NLL, as scikit-learn's MLP does: those
        epochs could not be chosen. None trains every pass for ``epochs``.
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
    fallback : bool, default=True
        After the search, compare the chosen network on the same held-out rows with three
        constant gates: the uniform average, the best single expert and stacking's linear
        pool (weights fitted on the other folds), each with its own temperature; unless the
        network beats all three, the best of them ships.
        ``selected_["gate"]`` says which shipped and ``selected_["gate_reason"]`` why.
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
        n_iter_no_change: int | None = 4,
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
        fallback: bool = True,
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
        self.n_iter_no_change = n_iter_no_change
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
        self.fallback = fallback
        self.random_state = random_state
        self.verbose = verbose

    # -- parameter checks ---------------------------------------------------------------
    def _grid(self, value: Any, grid: Sequence[float], param: str) -> list[float]:
        if value == "auto":
            return [float(v) for v in grid]
        if not is_real(value) or value < 0:
            raise ParameterError(param, value, "must be a non-negative number or 'auto'")
        return [float(value)]

    def _validate(self) -> tuple[list[Objective], list[float], list[float]]:
        objective = check_choice("objective", self.objective, ("elbo", "marginal", "auto"))
        objectives: list[Objective] = ["elbo", "marginal"]
        if objective != "auto":
            objectives = [cast(Objective, objective)]
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
        if self.n_iter_no_change is not None:
            check_int("n_iter_no_change", self.n_iter_no_change)
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
        config = self.selection_config()
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
        choice = None
        if searching:
            found = search_candidates(config, Z, evidence, log_priors, members)
            chosen, steps, choice = members[found.winner], found.steps, found.choice
            self.temperature_ = found.temperature
            self.search_results_ = [
                {
                    "objective": mb.objective,
                    "kl_weight": mb.kl_weight,
                    "prior_temperature": taus[mb.prior_index],
                    **found.scores[k],
                }
                for k, mb in enumerate(members)
            ]
            self.n_selection_folds_ = found.n_splits
            # The refit sees more rows per epoch; it trains for as many steps as the
            # chosen candidate did, which is what its validation score measured.
            epochs = max(1, round(steps / -(-evidence.n // int(self.batch_size))))
        elif isinstance(self.temperature, (int, float)):
            self.temperature_ = float(self.temperature)
        self.selected_: dict[str, Any] = {
            "objective": chosen.objective,
            "kl_weight": chosen.kl_weight,
            "prior_temperature": taus[chosen.prior_index],
            "epochs": int(epochs),
            "temperature": self.temperature_,
        }
        self.constant_weights_: np.ndarray | None = None
        self.layers_: list[tuple[np.ndarray, np.ndarray]] | None = None
        if choice is not None:
            self.temperature_ = choice.temperature
            self.selected_.update(
                gate=choice.kind,
                gate_reason=choice.reason,
                held_out_nll=choice.held_out_nll,
                temperature=choice.temperature,
            )
            self.constant_weights_ = choice.constant
        if self.constant_weights_ is None:
            result = train_members(
                Z,
                evidence.log_lik,
                log_priors,
                [chosen],
                epochs=epochs,
                **config.net_kwargs(),
            )
            self.layers_ = result.layers[0]
        self.prior_baseline_ = baseline_for_new_inputs(energy, self.energy_reduction)
        self.prior_temperature_ = taus[chosen.prior_index]
        self.n_features_in_ = Z.shape[1]
        return self

    def selection_config(self) -> SelectionConfig:
        """The settings the candidate search and the refit read, as one frozen value."""
        return SelectionConfig(
            epochs=int(self.epochs),
            batch_size=int(self.batch_size),
            hidden=tuple(self.hidden_layer_sizes),
            learning_rate=float(self.learning_rate),
            temperature=self.temperature,
            early_stopping=bool(self.early_stopping),
            stopping_rule=self.stopping_rule,
            fallback=bool(self.fallback),
            folds=self.selection_folds,
            repeats=self.selection_repeats,
            validation_fraction=float(self.validation_fraction),
            search_max_rows=None if self.search_max_rows is None else int(self.search_max_rows),
            random_state=int(self.random_state),
            patience=None if self.n_iter_no_change is None else int(self.n_iter_no_change),
            progress=bool(self.verbose),
        )

    # -- prediction and export ------------------------------------------------------------
    def weights(self, Z: np.ndarray) -> np.ndarray:
        self._check_fitted("layers_")
        Z = check_features(Z, self.n_features_in_)
        if self.constant_weights_ is not None:
            return constant_weights(len(Z), self.constant_weights_)
        assert self.layers_ is not None
        w = softmax_f32(mlp_logits(Z, self.layers_))
        # float32 rows sum to 1 only within ~1e-7; float64 renormalising makes the simplex
        # exact without moving a weight by more than that (the served graph does the same).
        return w / w.sum(axis=1, keepdims=True, dtype=np.float64)

    def to_onnx(self, g: GraphBuilder, z: str) -> str:
        self._check_fitted("layers_")
        if self.constant_weights_ is not None:
            return constant_weights_onnx(g, z, self.constant_weights_)
        assert self.layers_ is not None
        return g.softmax_rows(dense_layers(g, z, self.layers_))

    def manifest_params(self) -> dict[str, Any]:
        params = super().manifest_params()
        params["selected"] = dict(getattr(self, "selected_", {}))
        return params
