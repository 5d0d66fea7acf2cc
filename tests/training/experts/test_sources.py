"""load_source: every file format a team brings, read as is, and every refusal."""

from __future__ import annotations

import hashlib
from pathlib import Path

import lightgbm as lgb
import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest
import skops.io as sio
import xgboost as xgb
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestRegressor

from tests.support.team_files import TARGET, TeamFiles
from training.errors import ParameterError
from training.experts.sources import load_source


def recent_X(team: TeamFiles) -> pd.DataFrame:
    return pd.read_csv(team.recent_csv).drop(columns=TARGET)


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("ridge.skops", "skops"), ("xgb_model.json", "xgboost-json"), ("lgb.txt", "lightgbm")],
)
def test_a_file_loads_into_the_model_the_team_saved(team: TeamFiles, name: str, fmt: str) -> None:
    model, source = load_source(name, base=team.folder, task="regression")
    assert source.uri == name and source.format == fmt
    assert source.sha256 == hashlib.sha256((team.folder / name).read_bytes()).hexdigest()
    X = recent_X(team)
    np.testing.assert_allclose(model.predict(X), team.models[name].predict(X), rtol=1e-6)


def test_a_lightgbm_file_is_its_booster_with_feature_names(team: TeamFiles) -> None:
    model, _ = load_source(team.folder / "lgb.txt", task="regression")
    assert isinstance(model, lgb.Booster) and model.num_trees() == 30
    assert model.feature_name() == list(recent_X(team).columns)


def test_an_onnx_file_is_used_as_is(team: TeamFiles) -> None:
    model, source = load_source(str(team.folder / "rf.onnx"))
    assert isinstance(model, Path) and model == (team.folder / "rf.onnx").resolve()
    assert source.format == "onnx" and len(source.sha256 or "") == 64
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    X = recent_X(team).to_numpy(np.float32)
    got = sess.run(None, {"input": X})[0].reshape(-1)
    np.testing.assert_allclose(got, team.models["rf.onnx"].predict(X), atol=1e-4)


def test_xgboost_reads_by_the_task_or_as_a_booster(team: TeamFiles) -> None:
    reg, _ = load_source(team.folder / "xgb_model.json", task="regression")
    booster, _ = load_source(team.folder / "xgb_model.json")
    assert isinstance(reg, xgb.XGBRegressor) and isinstance(booster, xgb.Booster)
    ubj = team.folder / "xgb_model.ubj"
    team.models["xgb_model.json"].save_model(ubj)
    again, source = load_source(ubj, task="regression")
    assert source.format == "xgboost-ubj"
    X = recent_X(team)
    np.testing.assert_allclose(again.predict(X), reg.predict(X), rtol=1e-6)


def test_a_pickle_needs_trust_pickle_and_says_why(team: TeamFiles) -> None:
    with pytest.raises(ParameterError, match=r"source='ridge.joblib' is a pickle.*--trust-pickle"):
        load_source("ridge.joblib", base=team.folder)
    model, source = load_source("ridge.joblib", base=team.folder, trust_pickle=True)
    assert source.format == "joblib"
    X = recent_X(team)
    np.testing.assert_allclose(model.predict(X), team.models["ridge.joblib"].predict(X))


def test_skops_refuses_the_types_it_does_not_trust_by_name(tmp_path: Path) -> None:
    X = np.random.default_rng(0).normal(size=(40, 3))
    sio.dump(
        RandomForestRegressor(n_estimators=3, random_state=0).fit(X, X[:, 0]), tmp_path / "f.skops"
    )
    with pytest.raises(ParameterError, match=r"sklearn\.tree\._tree\.Tree.*--trust-pickle"):
        load_source(tmp_path / "f.skops")
    model, _ = load_source(tmp_path / "f.skops", trust_pickle=True)
    assert model.predict(X).shape == (40,)


def test_a_lightgbm_classifier_gives_probabilities(tmp_path: Path) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    fitted = lgb.LGBMClassifier(n_estimators=20, verbose=-1).fit(X, y)
    fitted.booster_.save_model(str(tmp_path / "c.txt"))
    model, _ = load_source(tmp_path / "c.txt", task="classification")
    np.testing.assert_allclose(model.predict(X), fitted.predict_proba(X)[:, 1], rtol=1e-6)


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("model.h5", b"x", r"has an unknown suffix '\.h5'"),
        ("absent.onnx", None, r"is not an existing file"),
        ("broken.onnx", b"\x00not onnx", r"cannot be read as onnx"),
        ("broken.json", b'{"learner": 1}', r"cannot be read as xgboost-json"),
        ("broken.txt", b"hello", r"cannot be read as lightgbm"),
        ("broken.skops", b"PK", r"cannot be read as skops"),
    ],
)
def test_a_bad_source_is_a_clear_error(
    tmp_path: Path, name: str, content: bytes | None, problem: str
) -> None:
    if content is not None:
        (tmp_path / name).write_bytes(content)
    with pytest.raises(ParameterError, match=rf"^source='{name}' {problem}"):
        load_source(name, base=tmp_path, task="regression")
