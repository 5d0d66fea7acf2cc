"""IA-BMA over classifiers: class labels as codes, categorical likelihoods."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import ClassifierMixin

from app.bundle.mixture import (
    ClassMixture,
    mix_classification,
)
from training.errors import ParameterError
from training.estimator.base import _IABMABase
from training.evidence import Evidence, classification_evidence
from training.hints import warn_lookalikes


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
        if self.classes_.dtype.kind not in "iub":
            warn_lookalikes(f"target {y.name!r}", [str(c) for c in self.classes_])
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
            raise ParameterError("y", labels[unseen].tolist()[0], "is a class training never saw")
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
