"""Pre-fitted experts: used as is, never silently refit; the ONNX adapter; the float32
parity tolerance; a bundle checked as served before LATEST moves."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import lightgbm as lgb
import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest
import xgboost as xgb
from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType
from sklearn.compose import ColumnTransformer
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from sklearn.tree import DecisionTreeRegressor

from app.bundle.pointer import current
from training.errors import ParameterError
from training.estimator import IABMAClassifier, IABMARegressor
from training.experts.spec import Expert, ExpertRegistry, Source
from training.experts.tolerance import n_terms, parity_tolerance
from training.export.bundle import export_bundle

OLD = 220  # rows the "team" trained on; the rest are the recent rows IA-BMA sees


@pytest.fixture(scope="module")
def diabetes() -> tuple[pd.DataFrame, pd.Series]:
    X, y = load_diabetes(return_X_y=True, as_frame=True)
    return X.rename(columns={"bmi": "body mass", "bp": "blood pressure"}), y


def test_a_fitted_estimator_without_prefit_warns(diabetes) -> None:
    X, y = diabetes
    fitted = Ridge().fit(X.iloc[:OLD], y.iloc[:OLD])
    experts = [Expert("ridge", fitted), Expert("tree", DecisionTreeRegressor(max_depth=3))]
    with pytest.warns(
        UserWarning,
        match=r"expert 'ridge': Ridge is already fitted; it will be refit.*pass prefit=True",
    ):
        IABMARegressor(experts, cv=2).fit(X.iloc[OLD:], y.iloc[OLD:])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        IABMARegressor([Expert("ridge", Ridge()), experts[1]], cv=2).fit(X, y)
    assert not [w for w in seen if "already fitted" in str(w.message)]


def test_prefit_models_are_used_as_is(diabetes) -> None:
    """sklearn Pipeline, XGBoost and LightGBM objects and Boosters: converted, checked and
    never refit, even under likelihood_source='holdout'; predictions in original units."""
    X, y = diabetes
    Xo, yo, Xr, yr = X.iloc[:OLD], y.iloc[:OLD], X.iloc[OLD:], y.iloc[OLD:]
    pipe = Pipeline([("scale", StandardScaler()), ("ridge", Ridge())]).fit(Xo, yo)
    coef = pipe[-1].coef_.copy()
    xgbr = xgb.XGBRegressor(n_estimators=20, max_depth=3).fit(Xo[["age", "body mass"]], yo)
    booster = xgb.train({"max_depth": 2}, xgb.DMatrix(Xo, yo), num_boost_round=10)
    lgbm = lgb.LGBMRegressor(n_estimators=20, num_leaves=7, verbose=-1).fit(Xo, yo)
    lgb_booster = lgb.train({"num_leaves": 5, "verbose": -1}, lgb.Dataset(Xo, yo), 10)
    models = {"pipe": pipe, "xgb": xgbr, "booster": booster, "lgbm": lgbm, "lgbb": lgb_booster}
    reg = ExpertRegistry()
    for name, model in models.items():
        reg.register(name, model, prefit=True)
    est = IABMARegressor(reg, likelihood_source="holdout").fit(Xr, yr)
    assert est.experts_.likelihood_source_ == "prefit"
    assert est.evidence_.n == len(Xr)  # no rows held back: nothing was fitted on them
    np.testing.assert_array_equal(pipe[-1].coef_, coef)
    got = est.expert_outputs(Xr) * est.y_scale_ + est.y_mean_
    own = {
        "pipe": pipe.predict(Xr),
        "xgb": xgbr.predict(Xr[["age", "body mass"]]),
        "booster": booster.predict(xgb.DMatrix(Xr)),
        "lgbm": lgbm.predict(Xr),
        "lgbb": lgb_booster.predict(Xr),
    }
    for j, name in enumerate(models):
        np.testing.assert_allclose(got[:, j], own[name], atol=1e-3, rtol=0, err_msg=name)


def test_prefit_boosters_classify_in_the_task_class_order() -> None:
    """Boosters know no labels: the declared classes name their outputs' columns."""
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    X, labels = X.iloc[:, :8], np.where(y == 1, "benign", "malignant")
    Xo, Xr, codes = X.iloc[:250], X.iloc[250:], (labels[:250] == "malignant").astype(int)
    xb = xgb.train({"objective": "binary:logistic", "max_depth": 2}, xgb.DMatrix(Xo, codes), 10)
    lc = lgb.LGBMClassifier(n_estimators=10, num_leaves=5, verbose=-1).fit(Xo, labels[:250])
    lb = lgb.train(
        {"objective": "binary", "num_leaves": 5, "verbose": -1}, lgb.Dataset(Xo, codes), 10
    )
    reg = ExpertRegistry()
    reg.register("xb", xb, prefit=True, classes=["benign", "malignant"])
    reg.register("lc", lc, prefit=True)  # its classes_ carry the labels
    reg.register("lb", lb, prefit=True, classes=["benign", "malignant"])
    out = IABMAClassifier(reg).fit(Xr, labels[250:]).expert_outputs(Xr)
    np.testing.assert_allclose(out[:, 0, 1], xb.predict(xgb.DMatrix(Xr)), atol=1e-5)
    np.testing.assert_allclose(out[:, 1], lc.predict_proba(Xr), atol=1e-5)
    np.testing.assert_allclose(out[:, 2, 1], lb.predict(Xr), atol=1e-5)


def test_mixed_experts_record_how_each_was_fitted(diabetes, tmp_path: Path) -> None:
    X, y = diabetes
    team = Ridge().fit(X.iloc[:OLD], y.iloc[:OLD])
    reg = ExpertRegistry()
    reg.register("team", team, prefit=True, source=Source("models/ridge.skops", "skops", "a" * 64))
    reg.register("tree", DecisionTreeRegressor(max_depth=3))
    est = IABMARegressor(reg, cv=3).fit(X.iloc[OLD:], y.iloc[OLD:])
    path = export_bundle(est, tmp_path, "mixed", X.iloc[:50])
    raw = json.loads((path / "manifest.json").read_text())
    assert raw["training"]["likelihood_source"] == "oof"
    assert raw["training"]["expert_fitting"] == {"team": "prefit", "tree": "oof"}
    team_entry, tree_entry = raw["experts"]
    assert team_entry["prefit"] is True and team_entry["output_units"] == "original"
    assert team_entry["source"] == {
        "uri": "models/ridge.skops",
        "format": "skops",
        "sha256": "a" * 64,
    }
    # An expert fitted here writes the manifest it always did: no new keys.
    assert "prefit" not in tree_entry and "source" not in tree_entry


def wine_like(n: int = 300, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "fixed acidity": rng.normal(7, 1, n),
            "residual sugar": rng.gamma(2, 2, n),
            "pH": rng.normal(3.3, 0.2, n),
        }
    )
    score = X["fixed acidity"] - 2 * X["pH"] + 0.1 * X["residual sugar"] + rng.normal(0, 0.5, n)
    return X, np.where(score > np.median(score), "high", "low")


def forest_file(tmp: Path, X: pd.DataFrame, y: np.ndarray, zipmap: bool, name: str) -> Path:
    model = RandomForestClassifier(n_estimators=20, max_depth=4, random_state=0)
    model.fit(X.to_numpy(np.float32), y)
    options = None if zipmap else {id(model): {"zipmap": False}}
    onx = to_onnx(
        model, initial_types=[("X", FloatTensorType([None, X.shape[1]]))], options=options
    )
    path = tmp / name
    path.write_bytes(onx.SerializeToString())
    return path


def test_onnx_files_with_a_tensor_input_zipmap_and_renamed_inputs(tmp_path: Path) -> None:
    """A single tensor input takes the declared order; ZipMap or not gives the same
    probabilities, in the task's class order; per-column inputs renamed by skl2onnx
    (``fixed acidity`` -> ``fixed_acidity``) are matched back."""
    X, y = wine_like()
    order = ["fixed acidity", "residual sugar", "pH"]
    zipped = forest_file(tmp_path, X[order], y, True, "zip.onnx")
    plain = forest_file(tmp_path, X[order], y, False, "plain.onnx")
    pipe = Pipeline(
        [
            ("cols", ColumnTransformer([("n", StandardScaler(), order)])),
            ("lr", LogisticRegression()),
        ]
    ).fit(X, y)
    reg = ExpertRegistry()
    reg.register("zip", str(zipped), features=order)
    reg.register("plain", str(plain), features=order)
    reg.register("pipe", pipe, prefit=True)  # converted with one input per column, renamed
    est = IABMAClassifier(reg).fit(X, y)
    out = est.expert_outputs(X)
    np.testing.assert_allclose(out[:, 0], out[:, 1], atol=1e-6)
    forest = RandomForestClassifier(n_estimators=20, max_depth=4, random_state=0)
    want = forest.fit(X[order].to_numpy(np.float32), y).predict_proba(X[order].to_numpy(np.float32))
    np.testing.assert_allclose(out[:, 0], want, atol=1e-5)  # forest classes_ = task classes
    np.testing.assert_allclose(out[:, 2], pipe.predict_proba(X), atol=1e-5)


def test_adapter_refusals_name_what_is_wrong(tmp_path: Path) -> None:
    X, y = wine_like()
    file = forest_file(tmp_path, X, y, False, "f.onnx")
    two = ["fixed acidity", "pH"]
    with pytest.raises(ParameterError, match="are 2 columns; expert 'f' takes 3"):
        IABMAClassifier(
            [Expert("f", str(file), features=tuple(two)), Expert("lr", LogisticRegression())]
        ).fit(X, y)
    with pytest.raises(
        ParameterError, match=r"features=\['acidity'\] of expert 'f' match no column"
    ):
        IABMAClassifier(
            [
                Expert("f", str(file), features=("acidity", "pH", "residual sugar")),
                Expert("lr", LogisticRegression()),
            ]
        ).fit(X, y)
    other = np.where(y == "high", "up", "down")
    alien = forest_file(tmp_path, X, other, False, "alien.onnx")
    with pytest.raises(
        ParameterError, match=r"classes=\['down', 'up'\] of expert 'a' are not classes"
    ):
        IABMAClassifier([Expert("a", str(alien)), Expert("lr", LogisticRegression())]).fit(X, y)
    unfitted = Expert("r", LogisticRegression(), prefit=True)
    with pytest.raises(ParameterError, match="of expert 'r' is not fitted, yet prefit=True"):
        IABMAClassifier([unfitted, Expert("lr", LogisticRegression())]).fit(X, y)


def test_the_parity_tolerance_follows_float32_and_refuses_a_wrong_graph(diabetes) -> None:
    """A 300-tree float32 forest: its own onnxruntime outputs move with the batch size,
    within the rule; the rule still refuses another forest's graph."""
    X, y = diabetes
    Xf = X.to_numpy(np.float32)
    forest = RandomForestRegressor(n_estimators=300, max_depth=6, random_state=0).fit(Xf, y)
    onx = to_onnx(forest, initial_types=[("X", FloatTensorType([None, X.shape[1]]))])
    sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    whole = sess.run(None, {"X": Xf})[0].ravel()
    one_by_one = np.concatenate(
        [sess.run(None, {"X": Xf[i : i + 1]})[0].ravel() for i in range(len(Xf))]
    )
    own = forest.predict(Xf)
    assert n_terms(onx) == 300
    tol = parity_tolerance(own, n_terms(onx))
    assert np.abs(whole - one_by_one).max() <= tol
    assert np.abs(whole - own).max() <= tol
    wrong = RandomForestRegressor(n_estimators=300, max_depth=6, random_state=1).fit(Xf, y)
    assert np.abs(wrong.predict(Xf) - own).max() > 100 * tol
    # The same rule refuses, at registration, a conversion that is silently wrong.
    from sklearn.neighbors import KNeighborsRegressor

    knn = KNeighborsRegressor(n_neighbors=5, weights="distance").fit(X.iloc[:OLD], y.iloc[:OLD])
    experts = [Expert("knn", knn, prefit=True), Expert("ridge", Ridge())]
    with pytest.raises(ParameterError, match="expert 'knn'|model='knn'.*disagrees"):
        IABMARegressor(experts, cv=2).fit(X.iloc[OLD:], y.iloc[OLD:])


def test_an_export_that_would_not_serve_publishes_nothing(data_dir: Path, tmp_path: Path) -> None:
    """A team Pipeline whose OneHotEncoder refuses unknown values fails on the server's
    row of missing values: the version is removed and LATEST keeps the last good one."""
    frame = pd.read_csv(data_dir / "credit-g.csv")
    y = frame.pop("class")
    numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])]
    text = [c for c in frame.columns if c not in numeric]

    def team(unknown: str) -> Pipeline:
        cols = ColumnTransformer(
            [("n", StandardScaler(), numeric), ("c", OneHotEncoder(handle_unknown=unknown), text)]
        )
        return Pipeline([("cols", cols), ("lr", LogisticRegression(max_iter=300))]).fit(frame, y)

    recent, ycheck = frame.iloc[600:], y.iloc[600:]
    good = [
        Expert("lenient", team("ignore"), prefit=True),
        Expert("lr", LogisticRegression(max_iter=300), features=tuple(numeric)),
    ]
    first = export_bundle(
        IABMAClassifier(good, cv=2).fit(recent, ycheck), tmp_path, "credit", recent.head(50)
    )
    strict = [Expert("strict", team("error"), prefit=True), good[1]]
    est = IABMAClassifier(strict, cv=2).fit(recent, ycheck)
    with pytest.raises(
        ParameterError,
        match=r"experts='strict' fails as served on a row of missing values "
        r"\(feature 'checking_status'\)",
    ):
        export_bundle(est, tmp_path, "credit", recent.head(50))
    assert current(tmp_path / "credit") == first.name
    assert [p.name for p in (tmp_path / "credit").iterdir() if p.is_dir()] == [first.name]
