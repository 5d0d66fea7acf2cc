"""Ready-made expert sets: the default set for any CSV, and the paper's simulation set."""

from __future__ import annotations

from sklearn.compose import ColumnTransformer
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.ensemble import (
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import PolynomialFeatures, StandardScaler

from training.experts.soft_circle import SoftCircleClassifier
from training.experts.spec import Expert

# Forests are capped: fully grown ones export to 6-38 MB of ONNX each.
FOREST = {"n_estimators": 100, "max_depth": 12, "min_samples_leaf": 3, "n_jobs": 2}
# kNN keeps uniform weights: skl2onnx converts weights="distance" wrongly.
KNN_NEIGHBOURS = 15
# A regression forest weighs every feature at each split (classification draws sqrt(p)),
# so its trees cost more: 50 of them fit in half the time of 100 with the same held-out
# RMSE on california (0.508).
FOREST_REGRESSION = {**FOREST, "n_estimators": 50}
# Bounds that keep the bundle and its latency flat as the training rows grow
# (docs/design.md, "Bounded experts"): kNN's reference set is a stratified sample of
# 20,000 rows (a 1000-row request compares with 20,000 rows, not with every training row);
# each tree draws 20,000 rows, so the forest's size stops growing; boosting fits on
# 250,000 rows, where its held-out loss has levelled off and its fit time has not; the
# MLP, whose epochs grow with the rows, fits on 200,000 (1M rows train within 15 minutes).
KNN_MAX_ROWS = 20_000
FOREST_MAX_DRAWS = 20_000
HGB_MAX_ROWS = 250_000
MLP_MAX_ROWS = 200_000


def default_experts(task: str, random_state: int = 0, bounded: bool = True) -> list[Expert]:
    """Linear model, random forest, kNN, histogram gradient boosting and an MLP.

    ``bounded=False`` drops the row bounds above (to measure what they cost).
    """
    rs = random_state
    if task == "classification":
        models = {
            "linear": LogisticRegression(max_iter=2000),
            "forest": RandomForestClassifier(random_state=rs, **FOREST),
            "knn": KNeighborsClassifier(n_neighbors=KNN_NEIGHBOURS),
            "hgb": HistGradientBoostingClassifier(max_iter=200, random_state=rs),
            "mlp": MLPClassifier(
                hidden_layer_sizes=(64, 32), early_stopping=True, max_iter=300, random_state=rs
            ),
        }
    else:
        models = {
            "linear": Ridge(alpha=1.0),
            "forest": RandomForestRegressor(random_state=rs, **FOREST_REGRESSION),
            "knn": KNeighborsRegressor(n_neighbors=KNN_NEIGHBOURS),
            "hgb": HistGradientBoostingRegressor(max_iter=200, random_state=rs),
            "mlp": MLPRegressor(
                hidden_layer_sizes=(64, 32), early_stopping=True, max_iter=300, random_state=rs
            ),
        }
    caps: dict[str, dict[str, int]] = {
        "knn": {"max_rows": KNN_MAX_ROWS},
        "forest": {"max_draws": FOREST_MAX_DRAWS},
        "hgb": {"max_rows": HGB_MAX_ROWS},
        "mlp": {"max_rows": MLP_MAX_ROWS},
    }
    bounds = {name: caps.get(name, {}) if bounded else {} for name in models}
    return [
        Expert(
            name,
            model,
            max_rows=bounds[name].get("max_rows"),
            max_draws=bounds[name].get("max_draws"),
        )
        for name, model in models.items()
    ]


def _raw_xy(model: object) -> Pipeline:
    """Hand the two raw coordinates to ``model`` unscaled: the circles live in raw units."""
    select = ColumnTransformer([("xy", "passthrough", ["x1", "x2"])])
    return Pipeline([("select", select), ("model", model)])


def _poly(degree: int) -> Pipeline:
    return Pipeline(
        [
            ("poly", PolynomialFeatures(degree, include_bias=False)),
            ("scale", StandardScaler()),
            ("lr", LogisticRegression(max_iter=5000)),
        ]
    )


def simulation_experts(paper_literal: bool = False) -> list[Expert]:
    """Polynomial LR (degrees 2, 3), LDA, and two soft-circle experts (paper appendix).

    The appendix's two circles are the same fixed model (centre (0.8 t, 0), R = 1,
    gamma = 5), twice; ``paper_literal=True`` gives exactly that. By default the second
    circle learns its centre, radius and slope instead: two identical experts carry no
    information the gate can use to tell them apart, while a fitted circle gives it a
    genuinely different expert to weigh against the fixed one.
    """
    second = SoftCircleClassifier() if paper_literal else SoftCircleClassifier(fit_center=True)
    return [
        Expert("poly2", _poly(2)),
        Expert("poly3", _poly(3)),
        Expert("lda", LinearDiscriminantAnalysis()),
        Expert("circle", _raw_xy(SoftCircleClassifier()), preprocess="none"),
        Expert("circle_b" if paper_literal else "circle_fit", _raw_xy(second), preprocess="none"),
    ]
