"""Every kind of expert: sklearn pipelines, XGBoost, ONNX files, feature bundles, mixed data."""

from __future__ import annotations

import numpy as np
import onnx
import pandas as pd
import pytest
from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType, StringTensorType
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from xgboost import XGBClassifier, XGBRegressor

from app.bundle.loader import open_bundle, read_manifest
from app.bundle.predictor import BundlePredictor
from training.errors import ExportError, ParameterError
from training.estimator import IABMAClassifier, IABMARegressor
from training.experts.knn_ties import tie_ambiguous_rows
from training.experts.onnx import rename_inputs
from training.experts.spec import Expert
from training.export.bundle import export_bundle


def mixed_frame(n: int = 500, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Numbers with gaps, a string category with gaps; a binary and a numeric target."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "age": rng.integers(18, 80, n).astype(float),
            "income": rng.lognormal(10, 0.5, n),
            "city": rng.choice(["lyon", "oslo", "lima", "kyiv"], n).astype(object),
        }
    )
    logit = 0.05 * (X["age"] - 50) + (X["city"] == "oslo") * 1.5 - 0.5
    y_cls = (rng.uniform(size=n) < 1 / (1 + np.exp(-logit))).astype(int)
    y_reg = 0.02 * X["age"] + np.log(X["income"]) + (X["city"] == "lima") * 0.8
    X.loc[::11, "income"] = np.nan
    X.loc[::13, "city"] = None
    return X, y_cls, y_reg.to_numpy() + rng.normal(0, 0.2, n)


def assert_parity(est, store, X) -> None:
    path = export_bundle(est, store, "m", X)
    predictor = BundlePredictor(open_bundle(path))
    pred = predictor.predict(est.columns(X))
    assert np.abs(pred.weights - est.weights(X)).max() <= 1e-5
    if pred.proba is not None:
        assert np.abs(pred.proba - est.predict_proba(X)).max() <= 1e-5
    else:
        assert np.abs(pred.mean - est.distribution(X).mean).max() <= 1e-5 * max(1, est.y_scale_)


@pytest.mark.slow
def test_xgboost_experts_export_with_parity(tmp_path) -> None:
    X, y_cls, y_reg = mixed_frame()
    cls = IABMAClassifier(
        [
            Expert("lr", LogisticRegression(max_iter=1000)),
            Expert("xgb", XGBClassifier(n_estimators=30, max_depth=3, random_state=0)),
        ]
    ).fit(X, y_cls)
    assert_parity(cls, tmp_path / "c", X)
    reg = IABMARegressor(
        [
            Expert("ridge", Ridge()),
            Expert("xgb", XGBRegressor(n_estimators=30, max_depth=3, random_state=0)),
        ]
    ).fit(X, y_reg)
    assert_parity(reg, tmp_path / "r", X)
    assert read_manifest(next((tmp_path / "r" / "m").glob("2*"))).experts[1].kind == "xgboost"


def test_feature_bundles_limit_what_an_expert_reads(tmp_path) -> None:
    X, y_cls, _ = mixed_frame()
    est = IABMAClassifier(
        [
            Expert("age_only", LogisticRegression(), features=("age",)),
            Expert("city_income", LogisticRegression(), features=("city", "income")),
        ]
    ).fit(X, y_cls)
    path = export_bundle(est, tmp_path, "m", X)
    m = read_manifest(path)
    assert m.experts[0].inputs == ["f_age"] and m.experts[1].inputs == ["f_city", "f_income"]
    assert m.gate.inputs == ["f_age", "f_income", "f_city"]
    assert_parity(est, tmp_path / "again", X)


def test_an_onnx_file_expert_is_used_as_is(tmp_path) -> None:
    """A model trained elsewhere: read from its ONNX file, never refitted, copied verbatim."""
    X, _, y_reg = mixed_frame(seed=1)
    X = X.fillna({"income": 30000.0, "city": "lima"})
    pre = ColumnTransformer(
        [
            ("n", StandardScaler(), ["age", "income"]),
            ("c", OneHotEncoder(handle_unknown="ignore"), ["city"]),
        ]
    )
    outside = Pipeline([("pre", pre), ("ridge", Ridge())]).fit(X, y_reg)
    onx = to_onnx(
        outside,
        initial_types=[
            ("age", FloatTensorType([None, 1])),
            ("income", FloatTensorType([None, 1])),
            ("city", StringTensorType([None, 1])),
        ],
    )
    file = tmp_path / "outside.onnx"
    file.write_bytes(onx.SerializeToString())
    est = IABMARegressor(
        [
            Expert("outside", str(file)),
            Expert("ridge_age", Ridge(), features=("age",)),
        ]
    ).fit(X, y_reg)
    # Original-unit predictions are standardised on the way in: same as the outside model.
    mean_std = est.expert_outputs(X.head(5))[:, 0]
    want = (outside.predict(X.head(5)) - est.y_mean_) / est.y_scale_
    assert np.abs(mean_std - want).max() < 1e-4
    path = export_bundle(est, tmp_path / "s", "m", X)
    # Used as is: the stored graph is the file's, with its inputs named as in the bundle.
    stored = onnx.load(str(path / "experts" / "outside.onnx"))
    back = rename_inputs(stored, {"f_age": "age", "f_income": "income", "f_city": "city"})
    assert back.SerializeToString() == file.read_bytes()
    assert read_manifest(path).experts[0].output_units == "original"
    assert_parity(est, tmp_path / "s2", X)


def test_a_silently_wrong_converter_is_refused(tmp_path) -> None:
    """skl2onnx turns kNN weights='distance' into 'uniform': refused as soon as it is fitted,
    before the gate trains, and nothing is written."""
    X, _, y_reg = mixed_frame()
    est = IABMARegressor(
        [
            Expert("ridge", Ridge()),
            Expert("knn_dist", KNeighborsRegressor(n_neighbors=5, weights="distance")),
        ]
    )
    with pytest.raises(ExportError, match="expert 'knn_dist': its ONNX graph disagrees"):
        est.fit(X, y_reg)
    assert not hasattr(est, "combiner_")


def test_knn_ties_are_tolerated_only_where_the_neighbours_tie(tmp_path) -> None:
    """Equal distances resolve differently in float32 and float64; the estimator then
    predicts through the graph, so it and the bundle still agree on every row."""
    rng = np.random.default_rng(0)
    n = 300
    X = pd.DataFrame({"a": rng.integers(0, 3, n).astype(float), "b": rng.choice(["x", "y"], n)})
    y = X["a"] * 2 + (X["b"] == "x") + rng.normal(0, 1, n)
    est = IABMARegressor(
        [Expert("ridge", Ridge()), Expert("knn", KNeighborsRegressor(n_neighbors=15))], cv=3
    ).fit(X, y)
    knn = est.experts_.models_[1]
    assert knn.tied_rows_ > 0, "integer and one-hot features must produce ties"
    frame = est.schema_.frame(X)
    tied = tie_ambiguous_rows(knn.estimator, knn.inputs_of(frame))
    differs = np.abs(knn.predict_raw(frame) - knn.predict_fitted(frame)) > 1e-4
    assert differs.any() and tied[differs].all()
    assert_parity(est, tmp_path / "s", X)


def test_bad_expert_registrations(tmp_path) -> None:
    X, y_cls, _ = mixed_frame()
    with pytest.raises(ParameterError, match="model='missing.onnx' is not an existing"):
        IABMAClassifier([Expert("a", "missing.onnx"), Expert("b", LogisticRegression())]).fit(
            X, y_cls
        )
    with pytest.raises(ParameterError, match="name='bad name'"):
        IABMAClassifier(
            [Expert("bad name", LogisticRegression()), Expert("b", LogisticRegression())]
        ).fit(X, y_cls)
    with pytest.raises(ParameterError, match="model='dict' is neither an estimator"):
        IABMAClassifier([Expert("a", {}), Expert("b", LogisticRegression())]).fit(X, y_cls)
