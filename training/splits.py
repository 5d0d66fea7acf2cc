"""Seeded, stratified row splits: for validation inside training and for benchmarks."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from sklearn.model_selection import KFold, StratifiedKFold, train_test_split

from training.errors import ParameterError

if TYPE_CHECKING:
    from training.datasets import Dataset


def quantile_bins(y: np.ndarray, n_bins: int = 12) -> np.ndarray:
    """Integer bin of each value among ``n_bins`` quantile bins (for stratifying a target)."""
    edges = np.unique(np.quantile(y, np.linspace(0, 1, n_bins + 1)[1:-1]))
    return np.searchsorted(edges, y, side="right")


def strata(y: np.ndarray, task: str, n_bins: int = 12) -> np.ndarray:
    return np.asarray(y) if task == "classification" else quantile_bins(np.asarray(y), n_bins)


def _safe_stratify(labels: np.ndarray, n_test: int) -> np.ndarray | None:
    """Stratify only where every stratum can appear on both sides."""
    _, counts = np.unique(labels, return_counts=True)
    return labels if counts.min() >= 2 and n_test >= len(counts) else None


def inner_split(
    y: np.ndarray,
    task: str,
    fraction: float,
    random_state: int,
    max_train_rows: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(train, validation)``; train is subsampled to ``max_train_rows`` if set."""
    n = len(y)
    idx = np.arange(n)
    n_val = max(round(fraction * n), 1)
    if n - n_val < 2:
        raise ParameterError("n_samples", n, "is too small to hold out a validation split")
    tr, va = train_test_split(
        idx,
        test_size=n_val,
        random_state=random_state,
        stratify=_safe_stratify(strata(y, task), n_val),
    )
    if max_train_rows is not None and len(tr) > max_train_rows:
        rng = np.random.default_rng(random_state)
        tr = np.sort(rng.choice(tr, size=int(max_train_rows), replace=False))
    return np.sort(tr), np.sort(va)


def folds(
    y: np.ndarray, task: str, n_splits: int, random_state: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """K-fold (stratified for classification) index pairs, shuffled with the seed."""
    if task == "classification":
        _, counts = np.unique(y, return_counts=True)
        if counts.min() < n_splits:
            raise ParameterError(
                "cv", n_splits, f"exceeds the smallest class's count ({counts.min()})"
            )
        splitter = StratifiedKFold(n_splits, shuffle=True, random_state=random_state)
        return list(splitter.split(np.zeros(len(y)), y))
    splitter = KFold(n_splits, shuffle=True, random_state=random_state)
    return list(splitter.split(np.zeros(len(y))))


def holdout_split(data: Dataset, test_size: float, random_state: int) -> tuple[Dataset, Dataset]:
    """Stratified train/test split of a :class:`~training.datasets.Dataset`.

    Classification stratifies on the label; regression on 12 quantile bins of the target.
    """
    y = data.y.to_numpy()
    idx = np.arange(len(y))
    n_test = max(round(test_size * len(y)), 1)
    labels = strata(y, data.task)
    tr, te = train_test_split(
        idx, test_size=n_test, random_state=random_state, stratify=_safe_stratify(labels, n_test)
    )

    return data.take(np.sort(tr)), data.take(np.sort(te))
