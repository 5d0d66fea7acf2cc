"""Bounding what an expert fits on, so that its graph and its cost stop growing with the rows.

Two bounds, set per expert (:class:`~training.experts.spec.Expert`):

- ``max_rows``: the expert fits on a stratified sample of at most this many rows. A kNN
  expert's graph *is* its training rows, and every request is compared with all of them;
  capping them keeps the bundle and the latency flat (docs/design.md, "Bounded experts").
- ``max_draws``: a bagging ensemble (a random forest) draws at most this many rows for each
  member, from all the rows; its trees, and so its graph, stop growing with the data.

Both leave an expert fitted on fewer rows than its bound exactly as it was.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn.pipeline import Pipeline
from sklearn.utils import resample

from training.errors import ParameterError


def check_cap(name: str, value: Any, expert: str) -> int | None:
    """``value`` as a row bound: None, or an integer of at least 2."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 2:
        raise ParameterError(name, value, f"of expert {expert!r} must be None or an integer >= 2")
    return int(value)


def sample_rows(
    n_rows: int, max_rows: int | None, y: np.ndarray, task: str, random_state: int
) -> np.ndarray | None:
    """Sorted indices of at most ``max_rows`` of ``n_rows`` rows, None if all are kept.

    Classification keeps each class's share (at least one row of every class).
    """
    if max_rows is None or n_rows <= max_rows:
        return None
    strata = y if task == "classification" else None
    rows = resample(
        np.arange(n_rows),
        replace=False,
        n_samples=max_rows,
        stratify=strata,
        random_state=random_state,
    )
    return np.sort(np.asarray(rows))


def cap_draws(est: Any, max_draws: int | None, n_rows: int) -> Any:
    """``est`` with its bagging draws (``max_samples``) set to ``min(max_draws, n_rows)``."""
    if max_draws is None:
        return est
    model = est.steps[-1][1] if isinstance(est, Pipeline) else est
    if "max_samples" not in model.get_params(deep=False):
        raise ParameterError(
            "max_draws", max_draws, f"needs a bagging model; {type(model).__name__} has none"
        )
    if getattr(model, "bootstrap", True) is False:
        raise ParameterError("max_draws", max_draws, "needs bootstrap=True in the forest")
    model.set_params(max_samples=min(max_draws, n_rows))
    return est


def capped(
    est: Any,
    X: pd.DataFrame,
    y: np.ndarray,
    task: str,
    max_rows: int | None,
    max_draws: int | None,
    random_state: int,
) -> tuple[Any, pd.DataFrame, np.ndarray]:
    """The estimator and the rows one fit uses under the expert's bounds."""
    rows = sample_rows(len(X), max_rows, y, task, random_state)
    if rows is not None:
        X, y = X.iloc[rows], y[rows]
    return cap_draws(est, max_draws, len(X)), X, y
