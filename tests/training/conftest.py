"""Fitted estimators shared by the training tests (each is fitted once per session)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from sklearn.ensemble import (
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

from tests.support.team_files import TeamFiles, write_team_files
from training.datasets import Dataset, load_shared, simulate
from training.estimator import IABMAClassifier, IABMARegressor
from training.experts.defaults import simulation_experts
from training.experts.spec import Expert
from training.splits import holdout_split


@dataclass(frozen=True)
class Fitted:
    est: Any
    train: Dataset
    test: Dataset


def light_classifiers() -> list[Expert]:
    return [
        Expert("linear", LogisticRegression(max_iter=2000)),
        Expert("forest", RandomForestClassifier(n_estimators=30, max_depth=8, random_state=0)),
        Expert("knn", KNeighborsClassifier(n_neighbors=15)),
        Expert("hgb", HistGradientBoostingClassifier(max_iter=50, random_state=0)),
    ]


def light_regressors() -> list[Expert]:
    return [
        Expert("ridge", Ridge(alpha=1.0)),
        Expert("forest", RandomForestRegressor(n_estimators=30, max_depth=8, random_state=0)),
        Expert("knn", KNeighborsRegressor(n_neighbors=15)),
        Expert("hgb", HistGradientBoostingRegressor(max_iter=50, random_state=0)),
    ]


@pytest.fixture(scope="session")
def simulation_fit() -> Fitted:
    train, test = simulate(1000, 0), simulate(500, 10_000)
    est = IABMAClassifier(simulation_experts(), random_state=0).fit(train.X, train.y)
    return Fitted(est, train, test)


@pytest.fixture(scope="session")
def credit_fit(data_dir) -> Fitted:
    """credit-g: 13 categorical string columns, string labels good/bad."""
    train, test = holdout_split(load_shared("credit-g", data_dir), 0.2, 0)
    est = IABMAClassifier(light_classifiers(), random_state=0).fit(train.X, train.y)
    return Fitted(est, train, test)


@pytest.fixture(scope="session")
def california_fit(data_dir) -> Fitted:
    """california housing, 3000 rows: regression on 8 numeric features."""
    data = load_shared("california", data_dir)
    small = Dataset(data.name, data.task, data.X.iloc[:3000], data.y.iloc[:3000])
    train, test = holdout_split(small, 0.2, 0)
    est = IABMARegressor(light_regressors(), random_state=0).fit(train.X, train.y)
    return Fitted(est, train, test)


@pytest.fixture(scope="session")
def team(tmp_path_factory: pytest.TempPathFactory) -> TeamFiles:
    """A team's already trained models, in their files (tests/support/team_files.py)."""
    return write_team_files(tmp_path_factory.mktemp("team"))
