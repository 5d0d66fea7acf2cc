"""The IA-BMA estimators: experts, then the gate, following scikit-learn's conventions.

``IABMAClassifier(experts).fit(X, y)`` fits the experts (out-of-fold by default), builds
the evidence, encodes the gate features and fits the combiner (IA-BMA's posterior gate
unless another combiner is given). Fitted attributes end in ``_``.

``fit`` is four public stages, which the paper's experiments call one by one:
:meth:`~_IABMABase.prepare` (X read once, the target encoded),
:meth:`~_IABMABase.fit_experts` (and their out-of-fold evidence),
:meth:`~_IABMABase.fit_gate_encoder` and :meth:`~_IABMABase.fit_gate`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone

from app.bundle.columns import Columns
from app.bundle.manifest import MISSING_TOKEN
from app.bundle.normalise import Normaliser, rule_for
from app.bundle.prior import expert_energy, prior_from_energy
from app.bundle.reference import input_reference
from app.bundle.weight_bins import weight_counts
from training.combiners.base import Combiner
from training.combiners.iabma_gate import IABMAGate
from training.combiners.registry import make_combiner
from training.errors import NotFittedError, ParameterError
from training.evidence import Evidence
from training.experts.fitting import ExpertSet
from training.experts.spec import Expert
from training.experts.variance import check_variance_expert
from training.features import MAX_CATEGORIES, FeatureSchema, frame_of
from training.gate_encoder import GateEncoder
from training.params import check_int


def as_frame(X: Any) -> pd.DataFrame:
    if isinstance(X, pd.DataFrame):
        return X
    arr = np.asarray(X)
    if arr.ndim != 2:
        raise ParameterError("X", arr.shape, "must be 2-D (rows, features)")
    return pd.DataFrame(arr, columns=[f"x{i}" for i in range(arr.shape[1])])


def fingerprint(X: pd.DataFrame, y: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(",".join(map(str, X.columns)).encode())
    h.update(pd.util.hash_pandas_object(X, index=False).to_numpy().tobytes())
    h.update(pd.util.hash_pandas_object(pd.Series(y), index=False).to_numpy().tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class FeatureData:
    """Raw ``X`` read once by the schema: the graph-name columns the gate and the ONNX
    graphs take, and the same values as the frame the sklearn experts fit on."""

    columns: Columns
    frame: pd.DataFrame


class _IABMABase(BaseEstimator):
    _task: ClassVar[Literal["classification", "regression"]]

    def __init__(
        self,
        experts: Sequence[Expert],
        *,
        combiner: Combiner | str | None = None,
        gate_features: Sequence[str] | None = None,
        categorical: Sequence[str] = (),
        na_values: Sequence[str] | None = None,
        keep_default_na: bool = True,
        decimal: Literal[".", ","] = ".",
        max_categories: int = MAX_CATEGORIES,
        likelihood_source: Literal["oof", "holdout", "in_sample"] = "oof",
        cv: int = 5,
        holdout_fraction: float = 0.2,
        random_state: int = 0,
        verbose: bool = False,
        n_jobs: int = 1,
        scheduler: str | None = None,
    ) -> None:
        self.experts = experts
        self.combiner = combiner
        self.gate_features = gate_features
        self.categorical = categorical
        self.na_values = na_values
        self.keep_default_na = keep_default_na
        self.decimal = decimal
        self.max_categories = max_categories
        self.likelihood_source = likelihood_source
        self.cv = cv
        self.holdout_fraction = holdout_fraction
        self.random_state = random_state
        self.verbose = verbose
        self.n_jobs = n_jobs
        self.scheduler = scheduler

    # -- hooks for the two tasks ----------------------------------------------------------
    def _fit_target(self, y: pd.Series) -> np.ndarray:
        """Learn the target's encoding from the training ``y``; return it encoded."""
        raise TypeError  # pragma: no cover - both subclasses override

    def encode_target(self, y: Any) -> np.ndarray:
        """``y`` as the experts and the evidence see it: class codes, or standardised."""
        raise TypeError  # pragma: no cover

    def evidence_of(self, outputs: np.ndarray, y_fit: np.ndarray) -> Evidence:
        """The experts' ``outputs`` (standardised) on rows whose encoded target is ``y_fit``."""
        raise TypeError  # pragma: no cover

    def _standardise(self, outputs: np.ndarray) -> np.ndarray:
        return outputs

    def _sigmas(self, columns: Columns) -> np.ndarray | None:
        """Regression: the experts' standardised sds at these rows, (m,) or (n, m)."""
        return None

    # -- fitting ----------------------------------------------------------------------------
    def _check_experts(self) -> list[Expert]:
        experts = list(self.experts)
        if len(experts) < 2:
            raise ParameterError(
                "experts", [e.name for e in experts], "needs at least two experts to combine"
            )
        names = [e.name for e in experts]
        if len(set(names)) != len(names):
            raise ParameterError("experts", names, "must have unique names")
        for e in experts:
            e.check(self._task)
            check_variance_expert(e, self._task)
        return experts

    def _make_combiner(self) -> Combiner:
        if self.combiner is None:
            return IABMAGate(random_state=self.random_state, verbose=self.verbose)
        if isinstance(self.combiner, str):
            return make_combiner(self.combiner, random_state=self.random_state)
        if not isinstance(self.combiner, Combiner):
            raise ParameterError("combiner", self.combiner, "must be a Combiner, a name, or None")
        return clone(self.combiner)

    def prepare(self, X: Any, y: Any) -> tuple[FeatureData, np.ndarray]:
        """Stage 1: infer the schema, read ``X`` once and learn the target's encoding.

        Returns the features and the encoded target, which the later stages take.
        """
        X = as_frame(X)
        y = pd.Series(np.asarray(y).ravel() if not isinstance(y, pd.Series) else y.to_numpy())
        if len(y) != len(X):
            raise ParameterError("y", len(y), f"has a different length from X ({len(X)} rows)")
        missing = np.flatnonzero(y.isna().to_numpy())
        if missing.size:
            raise ParameterError(
                "y",
                f"{missing.size} missing values, first at row {missing[0]}",
                "must not contain NaN or None",
            )
        self.schema_ = FeatureSchema.infer(
            X, self.categorical, self._rule(), check_int("max_categories", self.max_categories)
        )
        y_fit = self._fit_target(y)
        self.data_fingerprint_ = fingerprint(X, y.to_numpy())
        self.n_features_in_ = X.shape[1]
        self.feature_names_in_ = np.asarray(X.columns, dtype=object)
        data = self._read(X)
        # The training inputs' bins: the bundle's reference for input drift.
        self.input_reference_ = input_reference(
            [(f.name, f.input, f.categories) for f in self.schema_.features],
            data.columns,
            MISSING_TOKEN,
        )
        return data, y_fit

    def features(self, X: Any) -> FeatureData:
        """``X`` read by the schema learnt in :meth:`prepare`."""
        if not hasattr(self, "schema_"):
            raise NotFittedError(f"{type(self).__name__} is not prepared; call fit first")
        return self._read(as_frame(X))

    def _read(self, X: pd.DataFrame) -> FeatureData:
        columns = self.schema_.columns(X)
        return FeatureData(columns, frame_of(columns, X.index))

    def fit_experts(
        self, data: FeatureData, y_fit: np.ndarray, *, to_onnx: bool = True
    ) -> _IABMABase:
        """Stage 2: fit the experts and keep their evidence on the training rows.

        ``to_onnx=False`` keeps the fitted estimators' own predictions and skips the ONNX
        conversion: enough to compare combiners, not to export a bundle.
        """
        experts = self._check_experts()
        t_experts = time.perf_counter()
        self.experts_ = ExpertSet(
            experts,
            self._task,
            n_classes=len(getattr(self, "classes_", [])),
            likelihood_source=self.likelihood_source,
            cv=self.cv,
            holdout_fraction=self.holdout_fraction,
            random_state=self.random_state,
            verbose=self.verbose,
            to_onnx=to_onnx,
            n_jobs=self.n_jobs,
            scheduler=self.scheduler,
            classes=getattr(self, "classes_", None),
        ).fit(data.frame, y_fit, self.schema_)
        self.expert_fit_seconds_ = time.perf_counter() - t_experts
        self.expert_names_ = [e.name for e in experts]
        rows = self.experts_.evidence_rows_
        outputs = self._standardise(self.experts_.predictions_)
        self.evidence_ = self.evidence_of(outputs, y_fit[rows])
        return self

    def fit_gate_encoder(self, data: FeatureData) -> _IABMABase:
        """Stage 3: the gate's view of the features (``gate_features``), fitted on ``data``."""
        gate_names = (
            list(self.gate_features) if self.gate_features is not None else self.schema_.names
        )
        unknown = [g for g in gate_names if g not in self.schema_.names]
        if unknown or not gate_names:
            raise ParameterError("gate_features", unknown or gate_names, "must name columns of X")
        self.encoder_ = GateEncoder(self.schema_.subset(gate_names)).fit(data.columns)
        return self

    def gate_inputs(self, data: FeatureData) -> np.ndarray:
        """``Z``: the encoded gate features of ``data``, float32."""
        return self.encoder_.transform(data.columns)

    def fit_gate(self, Z: np.ndarray, evidence: Evidence) -> _IABMABase:
        """Stage 4: fit the combiner on gate inputs ``Z`` and the evidence of the same rows."""
        t0 = time.perf_counter()
        self.combiner_ = self._make_combiner().fit(Z, evidence)
        self.gate_fit_seconds_ = time.perf_counter() - t0
        self.mixture_temperature_ = float(getattr(self.combiner_, "temperature_", 1.0))
        # How the weights fell on the training rows: the bundle's reference for drift.
        self.gate_weight_counts_ = weight_counts(self.combiner_.weights(Z))
        return self

    def fit(self, X: Any, y: Any) -> _IABMABase:
        data, y_fit = self.prepare(X, y)
        self.fit_experts(data, y_fit)
        self.fit_gate_encoder(data)
        Z = self.gate_inputs(data)[self.experts_.evidence_rows_]
        return self.fit_gate(Z, self.evidence_)

    # -- prediction ---------------------------------------------------------------------------
    def _check_is_fitted(self) -> None:
        if not hasattr(self, "combiner_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit first")

    def _rule(self) -> Normaliser:
        try:
            return rule_for(self.na_values, bool(self.keep_default_na), decimal=self.decimal)
        except ValueError:
            raise ParameterError("decimal", self.decimal, "must be '.' or ','") from None

    def columns(self, X: Any) -> Columns:
        """Raw ``X`` as the bundle's graphs take it: one array per feature, by graph name."""
        self._check_is_fitted()
        return self.schema_.columns(as_frame(X))

    def _weights(self, columns: Columns) -> np.ndarray:
        return self.combiner_.weights(self.encoder_.transform(columns))

    def _outputs(self, columns: Columns) -> np.ndarray:
        return self._standardise(self.experts_.predict_raw(frame_of(columns)))

    def outputs_of(self, data: FeatureData) -> np.ndarray:
        """The fitted experts' outputs on ``data``, as :meth:`expert_outputs` gives them."""
        return self._standardise(self.experts_.predict_raw(data.frame))

    def weights(self, X: Any) -> np.ndarray:
        """``alpha(x)``: (n, m) weights per expert, rows on the simplex."""
        return self._weights(self.columns(X))

    def expert_outputs(self, X: Any) -> np.ndarray:
        """(n, m, C) probabilities, or (n, m) means in standardised units."""
        return self._outputs(self.columns(X))

    def prior(self, X: Any) -> np.ndarray:
        """The adaptive prior ``p(J = j | x_{1:n}, x)`` at new inputs (IA-BMA gates only)."""
        self._check_is_fitted()
        gate = self.combiner_
        if not isinstance(gate, IABMAGate):
            raise ParameterError("combiner", gate.name, "has no adaptive prior; only 'iabma' does")
        ev = self.evidence_
        columns = self.columns(X)
        energy = expert_energy(
            self._outputs(columns), self._sigmas(columns), gate.energy_scale, ev.y_low, ev.y_high
        )
        return prior_from_energy(energy, gate.prior_baseline_, gate.prior_temperature_)
