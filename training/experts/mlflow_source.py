"""Models kept in MLflow's model registry: ``models:/name/version`` or ``models:/name@alias``.

MLflow resolves the uri (at ``MLFLOW_TRACKING_URI``) and downloads the model's folder; its
``MLmodel`` file lists the flavors it was logged with, and the first of :data:`FLAVORS`
there decides how its file is read, by the same readers as a plain file. MLflow itself is
the optional ``registry`` extra.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from training.errors import ParameterError
from training.experts.sources import load_file, sha256_of
from training.experts.spec import Source

# The flavors read, best first: ONNX as is; then the native formats; a pickle last.
FLAVORS = ("onnx", "xgboost", "lightgbm", "sklearn")
MODEL_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:/(?P<version>\d+)|@(?P<alias>[\w-]+))$")


def load_registered(uri: str, *, trust_pickle: bool, task: str | None) -> tuple[Any, Source]:
    """Resolve ``uri`` through MLflow and read the model it names (see module docstring)."""
    if not MODEL_URI.match(uri):
        raise ParameterError("source", uri, "must be models:/name/version or models:/name@alias")
    try:
        import yaml
        from mlflow.artifacts import download_artifacts
    except ImportError:
        raise ParameterError("source", uri, "needs MLflow: pip install 'iabma[registry]'") from None
    try:
        folder = Path(download_artifacts(artifact_uri=uri))
    except Exception as exc:  # MlflowException, or the store's own errors
        raise ParameterError(
            "source", uri, f"cannot be resolved by MLflow ({tracking_uri()}): {_first_line(exc)}"
        ) from None
    mlmodel = folder / "MLmodel"
    if not mlmodel.is_file():
        raise ParameterError("source", uri, "has no MLmodel file: not an MLflow model")
    flavors = (yaml.safe_load(mlmodel.read_text()) or {}).get("flavors") or {}
    flavor = next((f for f in FLAVORS if f in flavors), None)
    if flavor is None:
        raise ParameterError(
            "source",
            uri,
            f"was logged with flavors {sorted(flavors)}; readable ones are {list(FLAVORS)}",
        )
    path, fmt = _model_file(uri, folder, flavor, flavors[flavor])
    if not path.is_file():
        raise ParameterError("source", uri, f"lacks its model file {path.name}")
    model = load_file(path, fmt, uri, trust_pickle=trust_pickle, task=task)
    return model, Source(uri, f"mlflow:{flavor}", sha256_of(path))


def _model_file(uri: str, folder: Path, flavor: str, conf: dict[str, Any]) -> tuple[Path, str]:
    """The file a flavor's MLmodel entry names, and the reader's format for it."""
    if flavor == "onnx":
        return folder / conf.get("data", "model.onnx"), "onnx"
    if flavor == "xgboost":
        return folder / conf["data"], "xgboost-json" if conf.get("model_format") == "json" else (
            "xgboost-ubj"
        )
    if flavor == "lightgbm":
        if str(conf.get("model_class", "")).endswith("Booster"):
            return folder / conf["data"], "lightgbm"
        return folder / conf["data"], "joblib"  # a pickled LGBMModel
    fmt = "skops" if conf.get("serialization_format") == "skops" else "joblib"
    return folder / conf["pickled_model"], fmt


def tracking_uri() -> str:
    """Where MLflow looks (MLFLOW_TRACKING_URI, or its default)."""
    try:
        import mlflow

        return str(mlflow.get_tracking_uri())
    except ImportError:
        return "unknown"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
