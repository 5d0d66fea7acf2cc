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
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone

from app.bundle.columns import Columns
from app.bundle.mixture import (
    ClassMixture,
    RegressionSummary,
    mix_classification,
    mix_regression,
    summarise_regression,
)
from app.bundle.normalise import Normaliser, rule_for
from app.bundle.prior import expert_energy, prior_from_energy
from training.combiners.base import Combiner
from training.combiners.iabma_gate import IABMAGate
from training.combiners.registry import make_combiner
from training.errors import NotFittedError, ParameterError
from training.evidence import Evidence, classification_evidence, regression_evidence
from training.experts.fitting import ExpertSet
from training.experts.spec import Expert
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
        return self._read(X), y_fit

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
        energy = expert_energy(
            self.expert_outputs(X), ev.sigmas, gate.energy_scale, ev.y_low, ev.y_high
        )
        return prior_from_energy(energy, gate.prior_baseline_, gate.prior_temperature_)


class IABMAClassifier(ClassifierMixin, _IABMABase):
    """Input-adaptive Bayesian model averaging of classifiers.

    Parameters
    ----------
    experts : sequence of Expert
        At least two; an :class:`~training.experts.spec.ExpertRegistry` works too.
    combiner : Combiner, str or None
        The gate; IA-BMA's :class:`~training.combiners.iabma_gate.IABMAGate` when None.
    gate_features : sequence of str, optional
        Raw features the gate reads (all by default).
    categorical : sequence of str
        Columns to treat as categorical even if numeric (pandas ``category`` columns are).
    na_values : sequence of str, optional
        Text that means a missing value, added to pandas' ``read_csv`` defaults
        (``""``, ``"NA"``, ``"NaN"``, ``"null"``, ...); ``"unknown"`` or ``"?"`` are
        categories unless listed here. Recorded in the bundle and applied by the server.
    keep_default_na : bool
        False drops pandas' defaults, leaving only ``na_values``.
    decimal : {".", ","}
        The decimal mark of numbers written as text.
    max_categories : int
        Keep at most this many levels of a categorical column; the rest share one bucket.
    likelihood_source : {"oof", "holdout", "in_sample"}
        Where L comes from (docs/method.md, "Where the likelihoods come from").
    cv : int
        Folds for ``"oof"``.
    holdout_fraction : float
        Calibration share for ``"holdout"``.
    random_state : int
    verbose : bool
        Progress bars.
    n_jobs : int
        Processes for the experts' cross-fitting (joblib; -1 = every core). The fitted
        result does not depend on it.
    scheduler : str, optional
        A Dask scheduler address: the cross-fitting runs on that cluster through joblib's
        Dask backend (the ``dask`` extra). Defaults to ``$IABMA_DASK_SCHEDULER``.
    """

    _task = "classification"

    @staticmethod
    def _labels(y: pd.Series) -> np.ndarray:
        """Integral floats as integers, anything else non-numeric as text."""
        values = y.to_numpy()
        if values.dtype.kind == "f":
            if not np.all(np.isfinite(values)) or not np.all(values == np.round(values)):
                raise ParameterError(
                    "y",
                    "non-integer float values",
                    "look like a regression target; use IABMARegressor",
                )
            values = values.astype(np.int64)
        if values.dtype.kind not in "iub":
            values = values.astype(str)
        return values

    def _fit_target(self, y: pd.Series) -> np.ndarray:
        self.classes_, codes = np.unique(self._labels(y), return_inverse=True)
        if len(self.classes_) < 2:
            raise ParameterError(
                "y", self.classes_.tolist(), "has a single class; need at least two"
            )
        return codes.astype(np.int64)

    def encode_target(self, y: Any) -> np.ndarray:
        labels = self._labels(pd.Series(np.asarray(y).ravel()))
        codes = np.minimum(np.searchsorted(self.classes_, labels), len(self.classes_) - 1)
        unseen = self.classes_[codes] != labels
        if unseen.any():
            raise ParameterError("y", labels[unseen][0], "is a class training never saw")
        return codes.astype(np.int64)

    def evidence_of(self, outputs: np.ndarray, y_fit: np.ndarray) -> Evidence:
        return classification_evidence(outputs, y_fit)

    def mixture(self, X: Any) -> ClassMixture:
        columns = self.columns(X)
        return mix_classification(
            self._weights(columns), self._outputs(columns), self.mixture_temperature_
        )

    def predict_proba(self, X: Any) -> np.ndarray:
        return self.mixture(X).proba

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[self.predict_proba(X).argmax(axis=1)]


class IABMARegressor(RegressorMixin, _IABMABase):
    """Input-adaptive Bayesian model averaging of regressors.

    Experts fit a standardised target and have Gaussian likelihoods whose std
    ``sigmas_[j]`` is the RMSE of their out-of-fold residuals. Parameters as for
    :class:`IABMAClassifier`.
    """

    _task = "regression"

    def _fit_target(self, y: pd.Series) -> np.ndarray:
        try:
            values = pd.to_numeric(y).to_numpy(dtype=np.float64)
        except (TypeError, ValueError):
            raise ParameterError(
                "y", str(y.dtype), "is not numeric; a regression target must be"
            ) from None
        if not np.all(np.isfinite(values)):
            raise ParameterError("y", "infinite values", "must be finite")
        std = float(values.std())
        if std <= 1e-12 * max(1.0, abs(float(values.mean()))):
            raise ParameterError("y", float(values[0]), "is constant; there is nothing to predict")
        self.y_mean_, self.y_scale_ = float(values.mean()), std
        y_std = (values - self.y_mean_) / self.y_scale_
        self.y_low_, self.y_high_ = float(y_std.min()), float(y_std.max())
        return y_std

    def encode_target(self, y: Any) -> np.ndarray:
        values = pd.to_numeric(pd.Series(np.asarray(y).ravel())).to_numpy(dtype=np.float64)
        return (values - self.y_mean_) / self.y_scale_

    def _standardise(self, outputs: np.ndarray) -> np.ndarray:
        out = np.array(outputs, dtype=np.float64)
        for j, e in enumerate(self.experts):
            if e.kind == "onnx" and e.output_units == "original":
                out[:, j] = (out[:, j] - self.y_mean_) / self.y_scale_
        return out

    def evidence_of(self, outputs: np.ndarray, y_fit: np.ndarray) -> Evidence:
        """Gaussian likelihoods whose std per expert is the RMSE of its residuals here."""
        sigmas = np.maximum(np.sqrt(np.mean((outputs - y_fit[:, None]) ** 2, axis=0)), 1e-6)
        return regression_evidence(outputs, y_fit, sigmas, y_low=self.y_low_, y_high=self.y_high_)

    def fit_experts(
        self, data: FeatureData, y_fit: np.ndarray, *, to_onnx: bool = True
    ) -> IABMARegressor:
        super().fit_experts(data, y_fit, to_onnx=to_onnx)
        sigmas = self.evidence_.sigmas
        assert sigmas is not None  # regression evidence always has them
        self.sigmas_: np.ndarray = sigmas
        return self

    def distribution(self, X: Any) -> RegressionSummary:
        """Mean, std, 90% interval and the variance split, in the target's units."""
        columns = self.columns(X)
        reg = mix_regression(
            self._weights(columns), self._outputs(columns), self.sigmas_, self.mixture_temperature_
        )
        return summarise_regression(reg, self.y_mean_, self.y_scale_)

    def predict(self, X: Any) -> np.ndarray:
        columns = self.columns(X)
        reg = mix_regression(self._weights(columns), self._outputs(columns), self.sigmas_, 1.0)
        return reg.mean * self.y_scale_ + self.y_mean_
