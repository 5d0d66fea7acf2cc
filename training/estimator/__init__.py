"""The IA-BMA estimators, following scikit-learn's conventions.

:mod:`~training.estimator.base` holds what both tasks share, fitting as four public stages;
:class:`IABMAClassifier` and :class:`IABMARegressor` add their target and likelihoods.
"""

from training.estimator.base import FeatureData, as_frame, fingerprint
from training.estimator.classifier import IABMAClassifier
from training.estimator.regressor import IABMARegressor

__all__ = ["FeatureData", "IABMAClassifier", "IABMARegressor", "as_frame", "fingerprint"]
