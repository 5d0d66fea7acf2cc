"""IA-BMA's gate: the amortised posterior ``q_theta(J | x)`` trained against the adaptive prior.

With ``"auto"`` settings the gate chooses its own variant on held-out *training* rows
(never on test data; :mod:`training.combiners.selection`), ships the chosen networks or
stacking's pool (:mod:`training.combiners.guard`), and exports either as ONNX. See
docs/method.md, "The gate".
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal, cast

import numpy as np
from threadpoolctl import threadpool_limits

from app.bundle.prior import baseline_for_new_inputs, log_prior_at_training_points
from training.combiners.base import (
    Combiner,
    check_features,
    check_fit_inputs,
    constant_weights,
    constant_weights_onnx,
)
from training.combiners.choice import Layers
from training.combiners.fallback import POOL_PENALTY, calibrated_pool, tempered_log_lik
from training.combiners.guard import guard
from training.combiners.pool_path import POOL_KL_GRID, extend_path
from training.combiners.selection import (
    AUTO_FOLDS,
    SearchOutcome,
    SelectionConfig,
    report,
    search_candidates,
)
from training.combiners.stacking import cv_penalty
from training.errors import ParameterError
from training.evidence import Evidence, prior_energy
from training.nn.net import HIDDEN, mean_softmax
from training.nn.trainer import Member, Objective, train_members
from training.onnx_graph import GraphBuilder
from training.onnx_graph import mean_softmax as onnx_mean_softmax
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
    pool_kl_weight : float or "auto", default="auto"
        ``lambda_pool``, the weight of ``KL(q(. | x) || w_pool)`` toward stacking's pool,
        beside ``kl_weight``'s pull toward the adaptive prior. 0 is the free network; as
        it grows the gate approaches the pool, the path's end (which the guard ships
        exactly). ``"auto"``: after the search, the chosen candidate is trained at each
        point of ``pool_kl_grid`` and the cross-fitted choice picks among them
        (:mod:`training.combiners.pool_path`).
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
        Pick the training length (up to ``epochs``) by held-out mixture NLL as well.
    stopping_rule : {"one_se", "min"}, default="one_se"
        With early stopping, the winner's epoch: the lowest held-out NLL (``"min"``), or
        the earliest epoch whose NLL is within one paired standard error of that: the
        minimum of a noisy curve is optimistic, and fewer steps are the more regularised
        gate.
    n_iter_no_change : int or None, default=4
        With early stopping, end the search's first training pass once this many epochs
        in a row improved no candidate's NLL on its steering rows; the later passes train
        as long. None trains every pass for ``epochs``.
    selection_folds : int or "auto", default="auto"
        How candidates are compared: by k-fold cross-validation over the training rows, or
        on one validation split (1). ``"auto"``: 5 folds below 1000 rows, 3 up to 3000,
        else one split.
    selection_repeats : int or "auto", default="auto"
        Repeat the cross-validation with other folds and average (``"auto"``: once).
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
        Ship the network only if it beats stacking's pool on held-out rows that took no
        part in choosing it, by more than ``guard_se`` standard errors; else ship the
        pool. ``selected_["gate"]`` says which shipped and ``selected_["gate_reason"]``
        why.
    pool_penalty : float or "auto", default="auto"
        The L2 weight on the logits of stacking's pool, the gate the network must beat
        and the path's end. ``"auto"``: up to 999 rows, chosen from stacking's grid by
        5-fold cross-validated log score (at T = 1) on every training row (a lightly
        penalised pool over-fits small data); above, 1e-4.
    guard_se : float, default=1.0
        The network's paired advantage over the pool must exceed this many standard
        errors.
    bagging : bool, default=True
        With cross-validated selection, the gate averages the chosen candidate of every
        fold at the chosen epoch; otherwise (and with one validation split) one network
        is refitted on every row for as many steps.
    tempered : bool, default=True
        Train the networks on the experts tempered as they will be served: at the
        temperature fitted together with stacking's pool on the same rows.
    random_state : int
        Seeds the split, the initialisation and the minibatch order.
    """

    name = "iabma"

    def __init__(
        self,
        kl_weight: float | Literal["auto"] = "auto",
        objective: Literal["elbo", "marginal", "auto"] = "auto",
        pool_kl_weight: float | Literal["auto"] = "auto",
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
        pool_kl_grid: Sequence[float] = POOL_KL_GRID,
        prior_temperature_grid: Sequence[float] = PRIOR_TEMPERATURE_GRID,
        hidden_layer_sizes: Sequence[int] = HIDDEN,
        learning_rate: float = 1e-3,
        batch_size: int = 64,
        epochs: int = 40,
        fallback: bool = True,
        guard_se: float = 1.0,
        pool_penalty: float | Literal["auto"] = "auto",
        bagging: bool = True,
        tempered: bool = True,
        random_state: int = 0,
        verbose: bool = False,
    ) -> None:
        self.kl_weight = kl_weight
        self.objective = objective
        self.pool_kl_weight = pool_kl_weight
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
        self.pool_kl_grid = pool_kl_grid
        self.prior_temperature_grid = prior_temperature_grid
        self.hidden_layer_sizes = hidden_layer_sizes
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.epochs = epochs
        self.fallback = fallback
        self.guard_se = guard_se
        self.pool_penalty = pool_penalty
        self.bagging = bagging
        self.tempered = tempered
        self.random_state = random_state
        self.verbose = verbose

    # -- parameter checks ---------------------------------------------------------------
    def _grid(self, value: Any, grid: Sequence[float], param: str) -> list[float]:
        if value == "auto":
            return [float(v) for v in grid]
        if not is_real(value) or value < 0:
            raise ParameterError(param, value, "must be a non-negative number or 'auto'")
        return [float(value)]

    def _validate(self) -> tuple[list[Objective], list[float], list[float], list[float]]:
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
        check_real("guard_se", self.guard_se, low=0.0)
        if self.pool_penalty != "auto":
            check_positive("pool_penalty", self.pool_penalty)
        pool_lams = self._grid(self.pool_kl_weight, self.pool_kl_grid, "pool_kl_weight")
        return objectives, lams, taus, pool_lams

    def _searching(self, objectives: list[Objective], lams: list[float], taus: list[float]) -> bool:
        """Whether ``fit`` searches: more than one candidate, early stopping or a fitted
        temperature (with ``lambda = 0`` the prior temperatures are one candidate)."""
        several = len(objectives) > 1 or len(lams) > 1 or (len(taus) > 1 and any(lams))
        return several or self.early_stopping or self.temperature == "auto"

    # -- fitting --------------------------------------------------------------------------
    def fit(self, Z: np.ndarray, evidence: Evidence) -> IABMAGate:
        # The network is tiny: a threaded BLAS only adds hand-offs to each small product
        # (credit-g's gate took 0.32 s with OpenBLAS's threads, 0.14 s with one).
        with threadpool_limits(limits=1, user_api="blas"):
            return self._fit(Z, evidence)

    def _fit(self, Z: np.ndarray, evidence: Evidence) -> IABMAGate:
        Z = check_fit_inputs(Z, evidence)
        objectives, lams, taus, pool_lams = self._validate()
        penalty = self.pool_penalty
        needs_pool = self._searching(objectives, lams, taus) or self.pool_kl_weight != 0
        if penalty == "auto" and not needs_pool:
            penalty = POOL_PENALTY  # no pool is fitted: the paper's fixed setting
        elif penalty == "auto":
            # Cross-validating the penalty costs 40 pool fits: worth it on small data,
            # where a lightly penalised pool over-fits its m weights; above, negligible.
            # Scored at T = 1: fitting each fold's temperature too cost credit-g 10x as
            # much (1.2-1.5 s against 0.09-0.46 s, shared machine) for the same penalty.
            small = evidence.n <= AUTO_FOLDS[0][0]
            penalty = cv_penalty(evidence, joint=False) if small else POOL_PENALTY
        config = replace(self.selection_config(), pool_penalty=float(penalty))
        # A fixed lambda_pool applies to every candidate; "auto" walks the path after.
        fixed_pool = pool_lams[0] if self.pool_kl_weight != "auto" else 0.0
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
                Member(o, lam, 0 if lam == 0 else k, fixed_pool)
                for o, lam, (k, _) in itertools.product(objectives, lams, enumerate(taus))
            },
            key=lambda mb: (mb.objective, mb.kl_weight, mb.prior_index),
        )
        searching = self._searching(objectives, lams, taus)
        chosen, epochs, self.temperature_ = members[0], self.epochs, 1.0
        self.search_results_: list[dict[str, Any]] = []
        found, choice = None, None
        if searching:
            found = search_candidates(config, Z, evidence, log_priors, members)
            if self.pool_kl_weight == "auto":
                members, found = extend_path(
                    config, Z, evidence, log_priors, members, found, pool_lams
                )
            chosen = members[found.chosen.candidate]
            self.temperature_ = found.chosen.temperature
            self.search_results_ = [
                {
                    "objective": mb.objective,
                    "kl_weight": mb.kl_weight,
                    "pool_kl_weight": mb.pool_kl_weight,
                    "prior_temperature": taus[mb.prior_index],
                    **row,
                }
                for mb, row in zip(members, report(found, len(members)), strict=True)
            ]
            self.n_selection_folds_ = found.n_splits
            # The refit sees more rows per epoch; it trains for as many steps as the
            # chosen candidate did, which is what its validation score measured.
            steps = (found.chosen.epoch + 1) * found.steps_per_epoch
            epochs = max(1, round(steps / -(-evidence.n // int(self.batch_size))))
            if config.fallback:
                ratio = np.mean([len(s.held_out) for s in found.splits]) / np.mean(
                    [len(s.train) for s in found.splits]
                )
                choice = guard(found.held, config, evidence, float(ratio))
        elif isinstance(self.temperature, (int, float)):
            self.temperature_ = float(self.temperature)
        self.selected_: dict[str, Any] = {
            "objective": chosen.objective,
            "kl_weight": chosen.kl_weight,
            "pool_kl_weight": chosen.pool_kl_weight,
            "prior_temperature": taus[chosen.prior_index],
            "epochs": int(epochs),
            "temperature": self.temperature_,
        }
        self.constant_weights_: np.ndarray | None = None
        if choice is not None:
            self.temperature_ = choice.temperature
            self.selected_.update(
                gate=choice.kind,
                gate_reason=choice.reason,
                held_out_nll=choice.held_out_nll,
                gate_advantage=choice.advantage,
                gate_standard_error=choice.standard_error,
                temperature=choice.temperature,
            )
            self.constant_weights_ = choice.constant
        self.networks_: list[Layers] = []
        if self.constant_weights_ is None:
            self.networks_ = self._networks(config, Z, evidence, log_priors, chosen, epochs, found)
            self.selected_.update(networks=len(self.networks_))
        self.prior_baseline_ = baseline_for_new_inputs(energy, self.energy_reduction)
        self.prior_temperature_ = taus[chosen.prior_index]
        self.n_features_in_ = Z.shape[1]
        return self

    def _networks(
        self,
        config: SelectionConfig,
        Z: np.ndarray,
        ev: Evidence,
        log_priors: np.ndarray,
        chosen: Member,
        epochs: int,
        found: SearchOutcome | None,
    ) -> list[Layers]:
        """The networks the gate averages: with cross-validated selection and
        ``bagging``, the chosen candidate of every fold at the chosen epoch; else one
        network refitted on every row."""
        if found is not None and self.bagging and found.held.folds:
            return found.chosen.bag(found.held)
        lik, reference = ev.log_lik, None
        if (found is not None and config.tempered) or chosen.pool_kl_weight > 0:
            pool, t = calibrated_pool(ev, config.pool_penalty)
            reference = np.log(np.clip(pool, 1e-300, None))
            if found is not None and config.tempered:
                lik = tempered_log_lik(ev, t)
        result = train_members(
            Z,
            lik,
            log_priors,
            [chosen],
            epochs=epochs,
            log_reference=reference,
            **config.net_kwargs(),
        )
        assert result.layers[0] is not None
        return [result.layers[0]]

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
            guard_se=float(self.guard_se),
            tempered=bool(self.tempered),
            progress=bool(self.verbose),
        )

    # -- prediction and export ------------------------------------------------------------
    def weights(self, Z: np.ndarray) -> np.ndarray:
        self._check_fitted("networks_")
        Z = check_features(Z, self.n_features_in_)
        if self.constant_weights_ is not None:
            return constant_weights(len(Z), self.constant_weights_)
        w = mean_softmax(Z, self.networks_).astype(np.float32)
        # float32 rows sum to 1 only within ~1e-7; float64 renormalising makes the simplex
        # exact without moving a weight by more than that (the served graph does the same).
        return w / w.sum(axis=1, keepdims=True, dtype=np.float64)

    def to_onnx(self, g: GraphBuilder, z: str) -> str:
        self._check_fitted("networks_")
        if self.constant_weights_ is not None:
            return constant_weights_onnx(g, z, self.constant_weights_)
        return onnx_mean_softmax(g, z, self.networks_)

    def manifest_params(self) -> dict[str, Any]:
        params = super().manifest_params()
        params["selected"] = dict(getattr(self, "selected_", {}))
        return params
