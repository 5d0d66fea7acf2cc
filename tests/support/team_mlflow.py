"""The team's models registered in a local MLflow model registry (a file store).

Like tests/support/team_files.py, this imports neither ``app`` nor ``training``. Each model
is logged with its own flavor and registered as version 1 with the alias ``champion``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.team_files import TeamFiles

# The file store is MLflow's default no longer; mlflow-skinny has no other local one.
STORE_ENV = {"MLFLOW_ALLOW_FILE_STORE": "true"}


@contextmanager
def tracking_env(uri: str) -> Iterator[None]:
    """MLFLOW_TRACKING_URI (and the file store's switch) set for the block."""
    wanted = {**STORE_ENV, "MLFLOW_TRACKING_URI": uri}
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def register_team_models(team: TeamFiles) -> None:
    """Register ridge (sklearn, skops), ridge_pickle (sklearn, cloudpickle), xgb (xgboost)
    and forest (onnx) at the current MLFLOW_TRACKING_URI."""
    import mlflow
    import onnx
    from mlflow import MlflowClient

    client = MlflowClient()
    # pip_requirements=[]: otherwise MLflow infers them by importing, 50 s a model here.
    with mlflow.start_run():
        mlflow.sklearn.log_model(
            team.models["ridge.skops"],
            name="ridge",
            registered_model_name="ridge",
            serialization_format="skops",
            pip_requirements=[],
        )
        mlflow.sklearn.log_model(
            team.models["ridge.skops"],
            name="ridge_pickle",
            registered_model_name="ridge_pickle",
            serialization_format="cloudpickle",
            pip_requirements=[],
        )
        mlflow.xgboost.log_model(
            team.models["xgb_model.json"],
            name="xgb",
            registered_model_name="xgb",
            model_format="json",
            pip_requirements=[],
        )
        mlflow.onnx.log_model(
            onnx.load(str(Path(team.folder) / "rf.onnx")),
            name="forest",
            registered_model_name="forest",
            pip_requirements=[],
        )
    for name in ("ridge", "ridge_pickle", "xgb", "forest"):
        client.set_registered_model_alias(name, "champion", "1")
