"""Regression experts that give their own per-row variance: trained here on california
housing, written as ONNX files with a ``variance`` output, combined, exported, served."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import BayesianRidge, Ridge

from app.bundle.loader import open_bundle, read_manifest
from app.bundle.normal import gaussian_logpdf
from app.bundle.predictor import BundlePredictor
from app.bundle.spread import SD_FLOOR
from bench.variance_experts import bayesian_ridge_onnx, fit_heteroscedastic_forest, forest_onnx
from training.errors import DataWarning, ParameterError
from training.estimator import IABMAClassifier, IABMARegressor
from training.experts.spec import Expert
from training.export.bundle import export_bundle
from training.export.ensemble import REGRESSION_OUTPUTS

F32 = 2e-4  # relative: the graphs compute in float32


@dataclass(frozen=True)
class Team:
    """Models trained outside the product on the first rows; the rest is theirs to combine."""

    X: pd.DataFrame
    y: np.ndarray
    test: pd.DataFrame
    y_test: np.ndarray
    ridge: BayesianRidge
    forest: tuple[RandomForestRegressor, RandomForestRegressor]
    files: dict[str, Path]


@pytest.fixture(scope="module")
def team(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Team:
    frame = pd.read_csv(data_dir / "california_housing.csv").sample(2400, random_state=0)
    y = frame.pop("MedHouseVal").to_numpy()
    X = frame.astype(np.float32)
    cols = list(X.columns)
    old, new, test = slice(0, 1000), slice(1000, 1900), slice(1900, None)
    ridge = BayesianRidge().fit(X.iloc[old].to_numpy(), y[old])
    forest = fit_heteroscedastic_forest(X.iloc[old].to_numpy(), y[old], seed=0, n_estimators=30)
    root = tmp_path_factory.mktemp("team")
    files = {"ridge": root / "ridge.onnx", "forest": root / "forest.onnx"}
    files["ridge"].write_bytes(bayesian_ridge_onnx(ridge, cols).SerializeToString())
    files["forest"].write_bytes(forest_onnx(*forest, cols).SerializeToString())
    bad = with_output(bayesian_ridge_onnx(ridge, cols), "bad", _bad_variance_nodes())
    files["bad"] = root / "bad.onnx"
    files["bad"].write_bytes(bad.SerializeToString())
    wide = with_output(
        bayesian_ridge_onnx(ridge, cols),
        "wide",
        [helper.make_node("Concat", ["MedInc", "HouseAge"], ["wide"], axis=1)],
    )
    files["wide"] = root / "wide.onnx"
    files["wide"].write_bytes(wide.SerializeToString())
    return Team(X.iloc[new], y[new], X.iloc[test], y[test], ridge, forest, files)


BAD_AT, BAD_WIDTH = 3.0, 0.8


def _bad_variance_nodes() -> list[onnx.NodeProto]:
    """``sqrt(MedInc - 3) - 0.8``: NaN below 3, negative up to 3.64, positive above."""
    return [
        helper.make_node("Sub", ["MedInc", "bad_at"], ["bad_x"]),
        helper.make_node("Sqrt", ["bad_x"], ["bad_root"]),
        helper.make_node("Sub", ["bad_root", "bad_width"], ["bad"]),
    ]


def bad_variance(medinc: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.sqrt(medinc - BAD_AT) - BAD_WIDTH


def with_output(model: onnx.ModelProto, name: str, nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    """``model`` with ``nodes`` appended and their result ``name`` as one more output."""
    graph = model.graph
    graph.node.extend(nodes)
    for const, value in (("bad_at", BAD_AT), ("bad_width", BAD_WIDTH)):
        graph.initializer.append(numpy_helper.from_array(np.array([[value]], np.float32), const))
    graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return model


def _expert(team: Team, name: str, variance: str | None = "variance") -> Expert:
    return Expert(name, str(team.files[name]), output="mean", variance_output=variance)


def _served(est: IABMARegressor, team: Team, root: Path) -> tuple[Path, BundlePredictor]:
    path = export_bundle(est, root, "m", team.test)
    return path, BundlePredictor(open_bundle(path))


def test_served_sds_are_the_experts_own_and_the_constant_elsewhere(team, tmp_path) -> None:
    est = IABMARegressor(
        [
            _expert(team, "ridge"),
            _expert(team, "forest"),
            Expert("plain", str(team.files["ridge"]), output="mean"),  # no variance: sigma_j
        ]
    ).fit(team.X, team.y)
    # The likelihood of a variance expert uses its own sd; the plain one its constant.
    ev = est.evidence_
    assert ev.sigmas is not None and ev.means is not None and ev.sigmas.shape == (ev.n, 3)
    _, own = team.ridge.predict(team.X.to_numpy(), return_std=True)
    np.testing.assert_allclose(ev.sigmas[:, 0] * est.y_scale_, own, rtol=F32)
    np.testing.assert_allclose(ev.sigmas[:, 2], est.sigmas_[2])
    np.testing.assert_allclose(
        ev.log_lik, gaussian_logpdf(ev.y[:, None], ev.means, ev.sigmas), rtol=1e-12
    )
    path, predictor = _served(est, team, tmp_path / "store")
    manifest = read_manifest(path)
    assert [e.variance_output for e in manifest.experts] == ["variance", "variance", None]
    assert manifest.ensemble.outputs == [*REGRESSION_OUTPUTS, "expert_sds"]
    pred = predictor.predict(est.columns(team.test))
    assert pred.expert_sds is not None and pred.finite
    X = team.test.to_numpy()
    np.testing.assert_allclose(
        pred.expert_sds[:, 0], team.ridge.predict(X, return_std=True)[1], rtol=F32
    )
    np.testing.assert_allclose(pred.expert_sds[:, 1], np.sqrt(team.forest[1].predict(X)), rtol=F32)
    np.testing.assert_allclose(pred.expert_sds[:, 2], est.sigmas_[2] * est.y_scale_, rtol=1e-12)
    # The mixture's spread and its split use them: aleatoric = sum_j w_j (T sigma_j(x))^2.
    t = est.mixture_temperature_
    np.testing.assert_allclose(
        pred.uncertainty[:, 1], (pred.weights * (t * pred.expert_sds) ** 2).sum(axis=1), rtol=1e-9
    )
    dist = est.distribution(team.test)
    assert pred.std is not None and pred.interval is not None
    np.testing.assert_allclose(pred.std, dist.std, rtol=F32)
    np.testing.assert_allclose(pred.interval, np.column_stack([dist.lower, dist.upper]), rtol=F32)
    assert np.ptp(pred.interval[:, 1] - pred.interval[:, 0]) > 0.5  # widths follow the rows


def test_bad_variances_are_floored_or_replaced_and_counted(team, tmp_path) -> None:
    est = IABMARegressor([_expert(team, "bad", "bad"), _expert(team, "forest")])
    with pytest.warns(DataWarning, match="expert 'bad'"):
        est.fit(team.X, team.y)
    v = bad_variance(team.X["MedInc"].to_numpy(np.float64))
    floored = int((np.isfinite(v) & (v < (SD_FLOOR * est.y_scale_) ** 2)).sum())
    assert est.variance_counts_["bad"] == {"floored": floored, "replaced": int(np.isnan(v).sum())}
    assert floored > 0 and np.isnan(v).sum() > 0
    assert est.variance_counts_["forest"] == {"floored": 0, "replaced": 0}
    path, predictor = _served(est, team, tmp_path / "store")
    assert read_manifest(path).training["variance_cleaned_rows"] == est.variance_counts_
    pred = predictor.predict(est.columns(team.test))
    assert pred.expert_sds is not None and pred.finite
    v = bad_variance(team.test["MedInc"].to_numpy(np.float64))
    b = est.y_scale_
    want = np.where(np.isnan(v), est.sigmas_[0] * b, np.sqrt(np.maximum(v, (SD_FLOOR * b) ** 2)))
    np.testing.assert_allclose(pred.expert_sds[:, 0], want, rtol=F32)


def test_a_variance_output_that_cannot_apply_is_refused(team) -> None:
    cases = [
        (_expert(team, "wide", "wide"), r"expert 'wide' gives shape \(\d+, 2\)"),
        (_expert(team, "ridge", "sd"), r"expert 'ridge' is not one of its graph's outputs"),
        (_expert(team, "ridge", "mean"), "expert 'ridge' is its mean output too"),
        (Expert("fit_here", Ridge(), variance_output="v"), "applies only to a pre-fitted expert"),
    ]
    for expert, message in cases:
        est = IABMARegressor([expert, _expert(team, "forest")])
        with pytest.raises(ParameterError, match=message) as info:
            est.fit(team.X, team.y)
        assert "variance_output" in str(info.value)
    y_cls = (team.y > np.median(team.y)).astype(int)
    est_cls = IABMAClassifier([_expert(team, "ridge"), _expert(team, "forest", None)])
    with pytest.raises(ParameterError, match="applies to regression only"):
        est_cls.fit(team.X, y_cls)


def test_without_variance_outputs_nothing_changes(team, tmp_path) -> None:
    est = IABMARegressor([_expert(team, "ridge", None), _expert(team, "forest", None)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        est.fit(team.X, team.y)
    assert est.evidence_.sigmas is not None and est.evidence_.sigmas.shape == (2,)
    path, predictor = _served(est, team, tmp_path / "store")
    manifest = read_manifest(path)
    assert manifest.ensemble.outputs == list(REGRESSION_OUTPUTS)
    assert "variance_cleaned_rows" not in manifest.training
    pred = predictor.predict(est.columns(team.test))
    assert pred.expert_sds is None
    s2 = (est.mixture_temperature_ * est.sigmas_ * est.y_scale_) ** 2
    np.testing.assert_allclose(pred.uncertainty[:, 1], pred.weights @ s2, rtol=1e-9)
