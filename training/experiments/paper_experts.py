"""The paper's UCI experts and the feature bundles B1-B7 they are trained on.

Appendix "UCI experiments": bundles are built from the training split only. The paper does
not say which expert gets which bundle; our assignment (below, and in the README) gives
each learner the features it handles best, so the experts differ where the gate can see.
Empty bundles (no categorical columns, say) fall back to the next choice in the list.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from sklearn.calibration import CalibratedClassifierCV
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.impute import SimpleImputer
from sklearn.linear_model import Lasso, Ridge
from sklearn.naive_bayes import MultinomialNB
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler, OneHotEncoder, StandardScaler
from sklearn.svm import LinearSVC

from training.experts.spec import Expert
from training.features import FeatureSchema

Bundles = dict[str, list[str]]


def feature_bundles(frame: pd.DataFrame, y: np.ndarray, schema: FeatureSchema) -> Bundles:
    """B1-B7 from the training rows (``y``: class codes or the numeric target)."""
    num, cat = schema.numeric, schema.categorical
    filled = frame[num].apply(lambda c: c.fillna(c.median())) if num else frame[num]
    yv = pd.Series(np.asarray(y, dtype=np.float64), index=frame.index)
    corr = filled.apply(lambda c: abs(c.corr(yv)) if c.std() > 0 else 0.0).fillna(0.0)
    b1 = corr.sort_values(ascending=False, kind="stable").index[:3].tolist() if num else []
    b2 = filled.var().sort_values(ascending=False, kind="stable").index[:3].tolist() if num else []
    card = frame[cat].nunique().sort_values(ascending=False, kind="stable") if cat else pd.Series()
    b3 = card.index[:3].tolist()
    b4 = [c for c in card.sort_values(kind="stable").index if c not in b3][:5]
    return {
        "B1": b1,
        "B2": b2,
        "B3": b3,
        "B4": b4,
        "B5": list(cat),
        "B6": list(num),
        "B7": list(dict.fromkeys(b1 + b3)),
    }


def _union(bundles: Bundles, *names: str) -> list[str]:
    return list(dict.fromkeys(c for n in names for c in bundles[n]))


def _first(bundles: Bundles, *choices: Sequence[str]) -> list[str]:
    for names in choices:
        cols = _union(bundles, *names)
        if cols:
            return cols
    raise ValueError("every bundle choice is empty")


def _encoder(
    cols: list[str], schema: FeatureSchema, *, scale: str | None, min_frequency: int
) -> ColumnTransformer:
    """Numbers: median-impute (+ scale); categories: one-hot with rare levels pooled."""
    # ``cols`` are graph names; a preprocess="none" pipeline selects the user's names.
    num = [schema.name_of(c) for c in cols if c in schema.numeric]
    cat = [schema.name_of(c) for c in cols if c in schema.categorical]
    parts = []
    if num:
        steps: list = [("impute", SimpleImputer(strategy="median"))]
        if scale == "standard":
            steps.append(("scale", StandardScaler()))
        elif scale == "minmax":
            steps.append(("scale", MinMaxScaler()))
        parts.append(("num", Pipeline(steps), num))
    if cat:
        onehot = OneHotEncoder(
            handle_unknown="infrequent_if_exist", min_frequency=min_frequency, sparse_output=False
        )
        parts.append(("cat", onehot, cat))
    return ColumnTransformer(parts, sparse_threshold=0.0)


def _expert(
    name: str,
    cols: list[str],
    schema: FeatureSchema,
    model: object,
    scale: str | None,
    min_frequency: int,
) -> Expert:
    pipe = Pipeline(
        [
            ("encode", _encoder(cols, schema, scale=scale, min_frequency=min_frequency)),
            ("model", model),
        ]
    )
    # ``cols`` are graph names (the frame's columns); an Expert names the user's columns.
    return Expert(name, pipe, features=tuple(schema.name_of(c) for c in cols), preprocess="none")


def paper_experts(
    task: str, bundles: Bundles, schema: FeatureSchema, random_state: int, min_frequency: int = 10
) -> list[Expert]:
    """Classification: NB, 3-NN, RF, Extra-Trees, linear SVM. Regression: Ridge(0.05),
    Lasso(0.05), distance-weighted 3-NN, RF, Extra-Trees (paper §4.3)."""
    rs, mf = random_state, min_frequency
    trees = {"n_estimators": 100, "n_jobs": 2, "random_state": rs}
    if task == "classification":
        return [
            # Multinomial NB needs non-negative inputs: counts, one-hots or min-max numbers.
            _expert(
                "naive_bayes",
                _first(bundles, ("B5",), ("B2", "B1")),
                schema,
                MultinomialNB(),
                "minmax",
                mf,
            ),
            _expert(
                "knn",
                _first(bundles, ("B6",), ("B5",)),
                schema,
                KNeighborsClassifier(n_neighbors=3),
                "standard",
                mf,
            ),
            _expert(
                "random_forest",
                _first(bundles, ("B7",), ("B6",)),
                schema,
                RandomForestClassifier(**trees),
                None,
                mf,
            ),
            _expert(
                "extra_trees",
                _first(bundles, ("B6", "B5")),
                schema,
                ExtraTreesClassifier(**trees),
                None,
                mf,
            ),
            _expert(
                "linear_svm",
                _first(bundles, ("B6", "B4"), ("B5",)),
                schema,
                CalibratedClassifierCV(LinearSVC(dual="auto", random_state=rs), cv=3),
                "standard",
                mf,
            ),
        ]
    return [
        _expert("ridge", _first(bundles, ("B6", "B5")), schema, Ridge(alpha=0.05), "standard", mf),
        _expert(
            "lasso",
            _first(bundles, ("B1", "B4"), ("B6",)),
            schema,
            Lasso(alpha=0.05),
            "standard",
            mf,
        ),
        _expert(
            "knn",
            _first(bundles, ("B2", "B1")),
            schema,
            KNeighborsRegressor(n_neighbors=3, weights="distance"),
            "standard",
            mf,
        ),
        _expert(
            "random_forest",
            _first(bundles, ("B7",), ("B6",)),
            schema,
            RandomForestRegressor(**trees),
            None,
            mf,
        ),
        _expert(
            "extra_trees",
            _first(bundles, ("B6",), ("B5",)),
            schema,
            ExtraTreesRegressor(**trees),
            None,
            mf,
        ),
    ]
