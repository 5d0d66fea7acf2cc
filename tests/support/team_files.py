"""A team's already trained models, saved as a team would save them.

This module imports neither ``app`` nor ``training``: it stands for the team's own script.
Three regressors are trained on the older half of scikit-learn's diabetes set and saved in
three formats (a skops Ridge pipeline, an XGBoost JSON file, a skl2onnx forest with one
tensor input), plus the same Ridge as joblib and a LightGBM text file; the recent half is
written as the CSV the gate learns from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pandas as pd
from sklearn.datasets import load_diabetes
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

TARGET = "y"


@dataclass(frozen=True)
class TeamFiles:
    folder: Path
    older: pd.DataFrame  # the rows the team trained on
    recent_csv: Path  # the labelled recent rows
    models: dict[str, Any]  # file name -> the fitted object it was saved from


def diabetes_halves() -> tuple[pd.DataFrame, pd.DataFrame]:
    frame = load_diabetes(as_frame=True).frame.rename(columns={"target": TARGET})
    return frame.iloc[:220].reset_index(drop=True), frame.iloc[220:].reset_index(drop=True)


def write_team_files(folder: Path) -> TeamFiles:
    """Train and save the team's models into ``folder`` (see module docstring)."""
    import lightgbm as lgb
    import skops.io as sio
    import xgboost as xgb
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    folder.mkdir(parents=True, exist_ok=True)
    older, recent = diabetes_halves()
    X, y = older.drop(columns=TARGET), older[TARGET]
    ridge = make_pipeline(StandardScaler(), Ridge(alpha=1.0)).fit(X, y)
    sio.dump(ridge, folder / "ridge.skops")
    joblib.dump(ridge, folder / "ridge.joblib")
    booster = xgb.XGBRegressor(n_estimators=40, max_depth=3, random_state=0).fit(X, y)
    booster.save_model(folder / "xgb_model.json")
    forest = RandomForestRegressor(n_estimators=30, max_depth=6, random_state=0).fit(
        X.to_numpy(np.float32), y
    )
    onx = convert_sklearn(
        forest, initial_types=[("input", FloatTensorType([None, X.shape[1]]))], target_opset=17
    )
    (folder / "rf.onnx").write_bytes(onx.SerializeToString())
    light = lgb.LGBMRegressor(n_estimators=30, num_leaves=8, verbose=-1).fit(X, y)
    light.booster_.save_model(str(folder / "lgb.txt"))
    recent_csv = folder / "recent.csv"
    recent.to_csv(recent_csv, index=False)
    models = {
        "ridge.skops": ridge,
        "ridge.joblib": ridge,
        "xgb_model.json": booster,
        "rf.onnx": forest,
        "lgb.txt": light,
    }
    return TeamFiles(folder, older, recent_csv, models)
