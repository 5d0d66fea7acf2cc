"""A LightGBM Booster read from its native text file, given scikit-learn's predict methods.

The text file holds the trees and the objective, not the scikit-learn wrapper, so
:func:`wrap_booster` puts one back. Like ``LGBMRegressor``, the wrapper exposes the Booster
as ``booster_`` (what onnxmltools' ``convert_lightgbm`` converts).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin


class _BoosterModel(BaseEstimator):
    """A fitted LightGBM Booster; its fitted attributes are set by :func:`wrap_booster`.

    Parameters
    ----------
    booster : lightgbm.Booster
        The trained booster, used as is (there is no ``fit``: it is already trained).
    """

    booster_: Any
    n_features_in_: int

    def __init__(self, booster: Any = None) -> None:
        self.booster = booster

    def _raw(self, X: Any) -> np.ndarray:
        return np.asarray(self.booster_.predict(np.asarray(X, dtype=np.float64)))


class LightGBMBoosterRegressor(RegressorMixin, _BoosterModel):
    """A LightGBM regression Booster with ``predict``."""

    def predict(self, X: Any) -> np.ndarray:
        """The Booster's predictions, shape (n,)."""
        return self._raw(X).reshape(-1)


class LightGBMBoosterClassifier(ClassifierMixin, _BoosterModel):
    """A LightGBM classification Booster with ``predict_proba`` and ``predict``.

    ``classes_`` is ``0 .. k-1``: the text file carries no labels (an experts.toml file
    names them with ``classes``).
    """

    classes_: np.ndarray

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, shape (n, k)."""
        p = self._raw(X)
        if p.ndim == 1:  # binary objective: the positive class's probability
            return np.column_stack([1.0 - p, p])
        return p

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class."""
        return np.asarray(self.classes_[np.argmax(self.predict_proba(X), axis=1)])


def wrap_booster(booster: Any, task: str) -> _BoosterModel:
    """The Booster as a fitted regressor or classifier for ``task``."""
    model: _BoosterModel
    if task == "classification":
        clf = LightGBMBoosterClassifier(booster)
        clf.classes_ = np.arange(max(2, int(booster.num_model_per_iteration())))
        model = clf
    else:
        model = LightGBMBoosterRegressor(booster)
    model.booster_ = booster
    model.n_features_in_ = int(booster.num_feature())
    names = [str(n) for n in booster.feature_name()]
    # LightGBM names unnamed columns Column_0, Column_1, ...: those are not feature names.
    if names and not all(n == f"Column_{i}" for i, n in enumerate(names)):
        model.feature_names_in_ = np.asarray(names, dtype=object)
    return model
