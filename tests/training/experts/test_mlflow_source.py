"""models:/ sources: three flavors registered in a local MLflow registry, read back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.team_files import TARGET, TeamFiles
from tests.support.team_mlflow import register_team_models, tracking_env
from training.errors import ParameterError
from training.experts.sources import load_source, sha256_of


@pytest.fixture(scope="module")
def registry(team: TeamFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    uri = (tmp_path_factory.mktemp("mlflow") / "store").as_uri()
    with tracking_env(uri):
        register_team_models(team)
        yield uri


@pytest.mark.parametrize("ref", ["1", "@champion"])
@pytest.mark.parametrize(
    ("name", "flavor", "file"),
    [("ridge", "sklearn", "ridge.skops"), ("xgb", "xgboost", "xgb_model.json")],
)
def test_a_registered_model_reads_by_version_and_alias(
    registry: str, team: TeamFiles, ref: str, name: str, flavor: str, file: str
) -> None:
    uri = f"models:/{name}{'/' if ref[0] != '@' else ''}{ref}"
    model, source = load_source(uri, task="regression")
    assert source.uri == uri and source.format == f"mlflow:{flavor}"
    assert source.sha256 is not None and len(source.sha256) == 64
    X = pd.read_csv(team.recent_csv).drop(columns=TARGET)
    np.testing.assert_allclose(model.predict(X), team.models[file].predict(X), rtol=1e-6)


def test_a_registered_onnx_model_is_its_file(registry: str, team: TeamFiles) -> None:
    model, source = load_source("models:/forest@champion")
    assert isinstance(model, Path) and model.suffix == ".onnx"
    assert source.format == "mlflow:onnx"
    assert source.sha256 == sha256_of(model)


def test_a_registered_lightgbm_booster_reads_as_its_booster(registry: str, team: TeamFiles) -> None:
    import lightgbm as lgb
    import mlflow

    booster = lgb.Booster(model_file=str(team.folder / "lgb.txt"))
    with mlflow.start_run():
        mlflow.lightgbm.log_model(
            booster, name="lgb", registered_model_name="lgb", pip_requirements=[]
        )
    model, source = load_source("models:/lgb/1", task="regression")
    assert isinstance(model, lgb.Booster) and source.format == "mlflow:lightgbm"
    X = pd.read_csv(team.recent_csv).drop(columns=TARGET)
    np.testing.assert_allclose(model.predict(X), team.models["lgb.txt"].predict(X), rtol=1e-6)


def test_a_pickled_registered_model_needs_trust_pickle(registry: str, team: TeamFiles) -> None:
    with pytest.raises(ParameterError, match=r"models:/ridge_pickle/1' is a pickle.*--trust"):
        load_source("models:/ridge_pickle/1")
    model, source = load_source("models:/ridge_pickle/1", trust_pickle=True)
    assert source.format == "mlflow:sklearn"
    X = pd.read_csv(team.recent_csv).drop(columns=TARGET)
    np.testing.assert_allclose(model.predict(X), team.models["ridge.skops"].predict(X))


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("models:/absent/1", r"cannot be resolved by MLflow \(file:"),
        ("models:/ridge/9", r"cannot be resolved by MLflow"),
        ("models:/ridge@nobody", r"cannot be resolved by MLflow"),
        ("models:/ridge", r"must be models:/name/version or models:/name@alias"),
    ],
)
def test_a_bad_registry_uri_is_a_clear_error(registry: str, uri: str, problem: str) -> None:
    with pytest.raises(ParameterError, match=rf"^source='{uri}' {problem}"):
        load_source(uri)
