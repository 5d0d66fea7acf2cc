"""Which rows a nearest-neighbour expert answers ambiguously: a tie at the k-th neighbour.

With several training points at (nearly) the k-th smallest distance, any k of them are a
valid neighbourhood. scikit-learn picks in float64 and the ONNX graph in float32, so they
can pick differently; such a row is not a conversion error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

# float32 features carry ~6e-8 relative error; distances built from them agree to ~1e-6.
RELATIVE_BAND = 1e-5
ABSOLUTE_BAND = 1e-7


def tie_ambiguous_rows(estimator: Any, X: pd.DataFrame) -> np.ndarray | None:
    """Per row of ``X``: is its k-th neighbour tied? None if ``estimator`` is not a kNN."""
    from sklearn.metrics import pairwise_distances
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
    from sklearn.pipeline import Pipeline

    knn = estimator.steps[-1][1] if isinstance(estimator, Pipeline) else estimator
    if not isinstance(knn, (KNeighborsClassifier, KNeighborsRegressor)):
        return None
    if getattr(knn, "weights", "uniform") != "uniform":
        return None  # distance weights make every neighbour matter, ties or not
    Z = estimator[:-1].transform(X) if isinstance(estimator, Pipeline) else X
    fitted = np.asarray(knn._fit_X, dtype=np.float64)
    d = pairwise_distances(
        np.asarray(Z, dtype=np.float64),
        fitted,
        metric=knn.effective_metric_,
        **(knn.effective_metric_params_ or {}),
    )
    k = int(knn.n_neighbors)
    kth = np.partition(d, k - 1, axis=1)[:, k - 1]
    band = (RELATIVE_BAND * kth + ABSOLUTE_BAND)[:, None]
    surely_in = (d < kth[:, None] - band).sum(axis=1)
    maybe_in = (d <= kth[:, None] + band).sum(axis=1)
    return (surely_in < k) & (maybe_in > k)
