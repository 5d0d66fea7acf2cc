"""A served bundle whose experts give their own per-row variance (california housing).

A Bayesian ridge and a forest with a variance forest, trained on older rows without the
product (bench/variance_experts.py), and a third expert with only its constant spread.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.variance_experts import bayesian_ridge_onnx, fit_heteroscedastic_forest, forest_onnx
from tests.support.bundles import Trained
from training.estimator import IABMARegressor
from training.experts.spec import Expert
from training.export.bundle import export_bundle


def per_row_bundle(data_dir: Path, root: Path, name: str = "spread") -> Trained:
    """Fit and export the bundle under ``root / "store"``; held-out rows in ``X``."""
    frame = pd.read_csv(data_dir / "california_housing.csv").sample(1600, random_state=1)
    y = frame.pop("MedHouseVal").to_numpy()
    X = frame.astype(np.float32)
    cols = list(X.columns)
    old, new, test = slice(0, 700), slice(700, 1300), slice(1300, None)
    from sklearn.linear_model import BayesianRidge

    ridge = BayesianRidge().fit(X.iloc[old].to_numpy(), y[old])
    forest = fit_heteroscedastic_forest(X.iloc[old].to_numpy(), y[old], seed=1, n_estimators=20)
    files = {"ridge": root / "ridge.onnx", "forest": root / "forest.onnx"}
    files["ridge"].write_bytes(bayesian_ridge_onnx(ridge, cols).SerializeToString())
    files["forest"].write_bytes(forest_onnx(*forest, cols).SerializeToString())
    est = IABMARegressor(
        [
            Expert("ridge", str(files["ridge"]), output="mean", variance_output="variance"),
            Expert("forest", str(files["forest"]), output="mean", variance_output="variance"),
            Expert("plain", str(files["forest"]), output="mean"),
        ]
    ).fit(X.iloc[new], y[new])
    path = export_bundle(est, root / "store", name, X.iloc[test])
    return Trained(name, est, X.iloc[test], path.name)
