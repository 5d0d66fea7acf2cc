"""MLServer peer: the same kind of scikit-learn estimator, served by ``mlserver_sklearn``.

MLServer lives in its own venv (``.venv-mlserver`` at the repo root): its pins clash with
ours. The estimator is fitted here, in the dev venv, and handed over as a joblib file, so
the MLServer venv gets the dev venv's exact scikit-learn version (a pickle is only safe to
load under the version that wrote it).

Which estimator: the bundle's own expert definition from ``training.experts.defaults``
(``hgb`` = ``HistGradientBoostingRegressor(max_iter=200)`` for california, ``poly3`` =
PolynomialFeatures(3) + StandardScaler + LogisticRegression for demo), refitted on the raw
numeric features as one float32 matrix, which is the input MLServer's runtime decodes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv-mlserver"
# uvloop > 0.21 breaks MLServer's parallel workers ("There is no current event loop").
UVLOOP_PIN = "uvloop==0.21.0"
MODEL_NAME = "peer"
READY_PATH = f"/v2/models/{MODEL_NAME}/ready"
INFER_PATH = f"/v2/models/{MODEL_NAME}/infer"


class MlserverUnavailable(RuntimeError):
    """MLServer could not be installed, prepared or started; the reason is the message."""


def mlserver_bin() -> Path:
    return VENV / "bin" / "mlserver"


def ensure_venv(create: bool) -> Path:
    if mlserver_bin().exists():
        return mlserver_bin()
    if not create:
        raise MlserverUnavailable(f"{VENV} does not exist (a --quick run does not create it)")
    import sklearn

    steps = [
        ["python3", "-m", "venv", str(VENV)],
        [str(VENV / "bin" / "pip"), "install", "-q", "mlserver", "mlserver-sklearn",
         f"scikit-learn=={sklearn.__version__}"],
        [str(VENV / "bin" / "pip"), "install", "-q", UVLOOP_PIN],
    ]  # fmt: skip
    for step in steps:
        print(f"  installing MLServer: {' '.join(step)}", flush=True)
        try:
            proc = subprocess.run(step, capture_output=True, text=True, timeout=1200)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MlserverUnavailable(f"{' '.join(step)}: {exc}") from None
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-2000:]
            raise MlserverUnavailable(f"{' '.join(step)} exited {proc.returncode}:\n{tail}")
    return mlserver_bin()


def estimator_for(bundle: str, expert: str) -> Any:
    """A fresh, unfitted copy of the estimator the bundle's training used for ``expert``."""
    from training.experts.defaults import default_experts, simulation_experts

    task = "classification" if bundle == "demo" else "regression"
    pool = simulation_experts() if bundle == "demo" else default_experts(task)
    for e in pool:
        if e.name == expert:
            return e.model
    raise MlserverUnavailable(f"no scikit-learn definition of expert {expert!r} for {bundle}")


def prepare_model(workdir: Path, bundle: str, expert: str, X: np.ndarray, y: np.ndarray) -> Path:
    """Fit, dump and describe the model; return the directory to ``mlserver start``."""
    import joblib

    model = estimator_for(bundle, expert).fit(X, y)
    model_dir = workdir / "mlserver-model"
    model_dir.mkdir(parents=True, exist_ok=True)
    joblib.dump(model, model_dir / "model.joblib")
    settings = {
        "name": MODEL_NAME,
        "implementation": "mlserver_sklearn.SKLearnModel",
        "parameters": {"uri": "./model.joblib", "version": "v1"},
    }
    (model_dir / "model-settings.json").write_text(json.dumps(settings, indent=2))
    return model_dir


def mlserver_command(
    model_dir: Path, http_port: int, grpc_port: int, metrics_port: int
) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLSERVER_")}
    env.update(
        MLSERVER_HOST="127.0.0.1",
        MLSERVER_HTTP_PORT=str(http_port),
        MLSERVER_GRPC_PORT=str(grpc_port),
        MLSERVER_METRICS_PORT=str(metrics_port),
        # One compute thread, as ours and the bare peer give onnxruntime. With OpenMP's
        # default (a thread per core) HistGradientBoosting's predict spins against wrk and
        # any other load: 20-60 req/s instead of ~190 on california, p90 over 1.5 s.
        OMP_NUM_THREADS="1",
    )
    # Everything else stays at MLServer's defaults (1 parallel inference worker).
    return [str(mlserver_bin()), "start", str(model_dir)], env
