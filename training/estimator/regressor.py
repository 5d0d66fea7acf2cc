"""IA-BMA over regressors: a standardised target, Gaussian likelihoods, the mixture's
distribution in the target's units."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import RegressorMixin

from app.bundle.columns import Columns
from app.bundle.mixture import (
    RegressionSummary,
    mix_regression,
    summarise_regression,
)
from training.errors import ParameterError
from training.estimator.base import FeatureData, _IABMABase
from training.evidence import Evidence, regression_evidence
from training.experts.variance import ExpertVariance, warn_cleaned
from training.features import frame_of


class IABMARegressor(RegressorMixin, _IABMABase):
    """Input-adaptive Bayesian model averaging of regressors.

    Experts fit a standardised target and have Gaussian likelihoods whose std
    ``sigmas_[j]`` is the RMSE of their out-of-fold residuals, or, for an expert that
    declares a ``variance_output``, its own per-row sd (:mod:`training.experts.variance`;
    ``sigmas_[j]`` is then its fallback). Parameters as for
    :class:`~training.estimator.classifier.IABMAClassifier`.
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
            # A model trained elsewhere predicts the target's units (prefit objects always).
            if e.is_prefit and e.output_units == "original":
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
        ev = self.evidence_
        assert ev.sigmas is not None and ev.means is not None  # regression evidence
        self.sigmas_: np.ndarray = ev.sigmas
        graphs = [getattr(m, "graph", None) for m in self.experts_.models_]
        self.variance_ = ExpertVariance(list(self.experts), graphs, self.y_scale_).fit()
        self.variance_counts_: dict[str, dict[str, int]] = {}
        if self.variance_.graphs_:
            frame = data.frame.iloc[self.experts_.evidence_rows_]
            sds, self.variance_counts_ = self.variance_.sigmas(frame, self.sigmas_)
            warn_cleaned(self.variance_counts_, len(frame))
            self.evidence_ = regression_evidence(
                ev.means, ev.y, sds, y_low=ev.y_low, y_high=ev.y_high
            )
        return self

    def _sigmas(self, columns: Columns) -> np.ndarray:
        """The experts' standardised sds at these rows: (n, m) where some experts give
        their own variance, else the constant (m,)."""
        if not getattr(self, "variance_", None) or not self.variance_.graphs_:
            return self.sigmas_
        return self.variance_.sigmas(frame_of(columns), self.sigmas_)[0]

    def expert_sigmas(self, X: Any) -> np.ndarray:
        """(n, m) or (m,) predictive sds of the experts at ``X``, in standardised units."""
        return self._sigmas(self.columns(X))

    def distribution(self, X: Any) -> RegressionSummary:
        """Mean, std, 90% interval and the variance split, in the target's units."""
        columns = self.columns(X)
        reg = mix_regression(
            self._weights(columns),
            self._outputs(columns),
            self._sigmas(columns),
            self.mixture_temperature_,
        )
        return summarise_regression(reg, self.y_mean_, self.y_scale_)

    def predict(self, X: Any) -> np.ndarray:
        columns = self.columns(X)
        reg = mix_regression(self._weights(columns), self._outputs(columns), self.sigmas_, 1.0)
        return reg.mean * self.y_scale_ + self.y_mean_
