"""Real evidence for the combiner tests: three diverse experts, out of fold, on shared data.

Each task uses 600 seeded rows of a benchmark CSV: 450 to fit the experts (5-fold
``cross_val_predict``) and the combiners, and 150 held out to evaluate weights and ONNX
graphs on rows no combiner has seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import KFold, StratifiedKFold, cross_val_predict
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsRegressor
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from training.datasets import default_data_dir
from training.evidence import Evidence, classification_evidence, regression_evidence

DATASETS = default_data_dir()
N_ROWS, N_FIT = 600, 450
SEED = 0


@dataclass(frozen=True)
class Case:
    """Gate features of the fit and held-out rows, and the evidence on the fit rows."""

    task: str
    Z: np.ndarray
    evidence: Evidence
    Z_test: np.ndarray


def _load(name: str, target: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    path = DATASETS / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; set IABMA_DATA_DIR to the shared datasets")
    frame = pd.read_csv(path)
    rows = np.random.default_rng(SEED).choice(len(frame), N_ROWS, replace=False)
    frame = frame.iloc[rows]
    X = frame.drop(columns=[target]).select_dtypes("number").to_numpy(dtype=np.float64)
    y = frame[target].to_numpy()
    scaler = StandardScaler().fit(X[:N_FIT])
    Z = scaler.transform(X).astype(np.float32)
    return Z[:N_FIT], Z[N_FIT:], y[:N_FIT], y[N_FIT:]


@pytest.fixture(scope="session")
def classification_case() -> Case:
    """Spambase: logistic regression, naive Bayes and a shallow tree disagree often."""
    Z, Z_test, y, _ = _load("spambase.csv", "class")
    codes = np.unique(y, return_inverse=True)[1]
    cv = StratifiedKFold(5, shuffle=True, random_state=SEED)
    experts = (
        LogisticRegression(max_iter=2000),
        GaussianNB(),
        DecisionTreeClassifier(max_depth=3, random_state=SEED),
    )
    proba = np.stack(
        [cross_val_predict(e, Z, codes, cv=cv, method="predict_proba") for e in experts], axis=1
    )
    return Case("classification", Z, classification_evidence(proba, codes), Z_test)


@pytest.fixture(scope="session")
def regression_case() -> Case:
    """California housing, standardised target: ridge, 10-NN and a shallow tree."""
    Z, Z_test, y, _ = _load("california_housing.csv", "MedHouseVal")
    y = y.astype(np.float64)
    y_std = (y - y.mean()) / y.std()
    cv = KFold(5, shuffle=True, random_state=SEED)
    experts = (Ridge(alpha=1.0), KNeighborsRegressor(10), DecisionTreeRegressor(max_depth=4))
    means = np.stack([cross_val_predict(e, Z, y_std, cv=cv) for e in experts], axis=1)
    sigmas = np.sqrt(np.mean((means - y_std[:, None]) ** 2, axis=0))
    evidence = regression_evidence(
        means, y_std, sigmas, y_low=float(y_std.min()), y_high=float(y_std.max())
    )
    return Case("regression", Z, evidence, Z_test)


@pytest.fixture(params=["classification", "regression"])
def case(request: pytest.FixtureRequest) -> Case:
    """Both tasks, one after the other."""
    return request.getfixturevalue(f"{request.param}_case")
