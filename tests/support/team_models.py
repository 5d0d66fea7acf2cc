"""A team's own models, trained the way a team would, without the product.

This module imports neither ``app`` nor ``training``: it stands for the script of a team
that trained three models on OLDER rows of a public dataset, each in its own way, and now
wants them combined on RECENT rows. Regression on California housing, classification on
credit-g (categories); the columns carry human names with spaces, as a team's frames do,
which converters rewrite (``median income`` becomes ``median_income``).

The three models: a scikit-learn Pipeline (a Ridge, or a logistic regression with its own
OneHotEncoder), an XGBoost model, and a 300-tree random forest exported by skl2onnx with one
float32 tensor input (its columns in :attr:`Team.forest_features` order). Kept small so a
whole trial fits in well under a minute on one core.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from xgboost import XGBClassifier, XGBRegressor

FOREST_TREES = 300
# The columns the teams renamed for readability (spaces, as in many CSV headers).
CALIFORNIA_NAMES = {
    "MedInc": "median income",
    "HouseAge": "house age",
    "AveRooms": "avg rooms",
    "AveBedrms": "avg bedrooms",
    "AveOccup": "avg occupancy",
}
CREDIT_NAMES = {"credit_amount": "credit amount", "checking_status": "checking status"}


def data_dir() -> Path:
    """Where the shared CSVs live: ``$IABMA_DATA_DIR``, else ``shared/datasets`` beside
    the repository (as training/datasets.py finds them). Nothing is downloaded."""
    env = os.environ.get("IABMA_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "datasets"


@dataclass(frozen=True)
class Split:
    """Older rows the team trained on; recent labelled rows; later rows to test on."""

    X_old: pd.DataFrame
    y_old: pd.Series
    X_recent: pd.DataFrame
    y_recent: pd.Series
    X_test: pd.DataFrame
    y_test: pd.Series


@dataclass(frozen=True)
class Team:
    """The three models; ``forest`` is the object behind ``forest_file``."""

    task: str
    split: Split
    pipeline: Pipeline
    xgb: Any
    forest: Any
    forest_file: Path
    forest_features: list[str]

    def own_predictions(self, X: pd.DataFrame) -> dict[str, np.ndarray]:
        """Each model's own predictions: means, or P(classes_ in sorted order)."""
        if self.task == "regression":
            return {
                "pipeline": self.pipeline.predict(X),
                "xgb": self.xgb.predict(X[list(self.xgb.feature_names_in_)]),
                "forest": self.forest.predict(X[self.forest_features].to_numpy(np.float32)),
            }
        return {
            "pipeline": self.pipeline.predict_proba(X),
            "xgb": self.xgb.predict_proba(X[list(self.xgb.feature_names_in_)]),
            "forest": self.forest.predict_proba(X[self.forest_features].to_numpy(np.float32)),
        }


def split_rows(X: pd.DataFrame, y: pd.Series, sizes: tuple[int, int, int], seed: int) -> Split:
    """The file's rows in a seeded order: the first ``sizes[0]`` are "older", and so on."""
    order = np.random.default_rng(seed).permutation(len(X))
    a, b, c = sizes
    parts = [order[:a], order[a : a + b], order[a + b : a + b + c]]
    take = [(X.iloc[p].reset_index(drop=True), y.iloc[p].reset_index(drop=True)) for p in parts]
    return Split(*take[0], *take[1], *take[2])


def _forest_onnx(forest: Any, width: int, path: Path, zipmap: bool | None) -> Path:
    """skl2onnx's export with one float32 tensor input; ``zipmap`` for a classifier."""
    options = {id(forest): {"zipmap": False}} if zipmap is False else None
    onx = to_onnx(
        forest,
        initial_types=[("input", FloatTensorType([None, width]))],
        options=options,
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    path.write_bytes(onx.SerializeToString())
    return path


def regression_team(
    folder: Path, seed: int = 0, sizes: tuple[int, int, int] = (1500, 1200, 1500)
) -> Team:
    """California housing: a Ridge pipeline, XGBoost on a few columns, a float32 forest."""
    frame = pd.read_csv(data_dir() / "california_housing.csv").rename(columns=CALIFORNIA_NAMES)
    y = frame.pop("MedHouseVal")
    split = split_rows(frame, y, sizes, seed)
    X, y_old = split.X_old, split.y_old
    ridge = Pipeline([("scale", StandardScaler()), ("ridge", Ridge(alpha=1.0))]).fit(X, y_old)
    xgb_cols = ["median income", "house age", "Latitude", "Longitude"]
    xgb = XGBRegressor(n_estimators=60, max_depth=4, learning_rate=0.2, random_state=seed)
    xgb.fit(X[xgb_cols], y_old)
    cols = list(X.columns)
    forest = RandomForestRegressor(
        n_estimators=FOREST_TREES, max_depth=6, random_state=seed, n_jobs=1
    ).fit(X[cols].to_numpy(np.float32), y_old)
    file = _forest_onnx(forest, len(cols), folder / "forest.onnx", zipmap=None)
    return Team("regression", split, ridge, xgb, forest, file, cols)


def classification_team(
    folder: Path, seed: int = 0, sizes: tuple[int, int, int] = (400, 300, 300)
) -> Team:
    """credit-g: a logistic pipeline with its own one-hot encoding, XGBoost on the numbers
    (labels as codes, the class order declared), a forest whose ONNX keeps its ZipMap."""
    frame = pd.read_csv(data_dir() / "credit-g.csv").rename(columns=CREDIT_NAMES)
    y = frame.pop("class")
    split = split_rows(frame, y, sizes, seed)
    X, y_old = split.X_old, split.y_old
    numeric = [c for c in X.columns if pd.api.types.is_numeric_dtype(X[c])]
    text = [c for c in X.columns if c not in numeric]
    encode = ColumnTransformer(
        [
            ("num", StandardScaler(), numeric),
            ("cat", OneHotEncoder(handle_unknown="ignore"), text),
        ]
    )
    logistic = Pipeline([("encode", encode), ("model", LogisticRegression(max_iter=500))])
    logistic.fit(X, y_old)
    codes = (y_old == "good").astype(int)  # XGBoost wants 0..k-1: bad=0, good=1
    xgb = XGBClassifier(n_estimators=40, max_depth=3, learning_rate=0.2, random_state=seed)
    xgb.fit(X[numeric], codes)
    forest = RandomForestClassifier(
        n_estimators=FOREST_TREES, max_depth=6, random_state=seed, n_jobs=1
    ).fit(X[numeric].to_numpy(np.float32), y_old)
    file = _forest_onnx(forest, len(numeric), folder / "forest.onnx", zipmap=True)
    return Team("classification", split, logistic, xgb, forest, file, numeric)
