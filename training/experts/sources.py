"""Reading a team's already trained model from where it is kept: a file (ONNX, skops,
joblib, XGBoost, LightGBM) or MLflow's model registry (``models:/...``).

:func:`load_source` returns the model, ready to register with ``prefit=True``, and the
:class:`~training.experts.spec.Source` the manifest records. Every failure is a
:class:`~training.errors.ParameterError` naming the source and why.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.errors import ParameterError
from training.experts.spec import Source

# A file's suffix decides how it is read; ``format`` is what the manifest records.
SUFFIX_FORMATS = {
    ".onnx": "onnx",
    ".skops": "skops",
    ".joblib": "joblib",
    ".pkl": "joblib",
    ".pickle": "joblib",
    ".json": "xgboost-json",
    ".ubj": "xgboost-ubj",
    ".txt": "lightgbm",
}
PICKLE_WHY = (
    "is a pickle, and loading a pickle runs whatever code it holds: pass --trust-pickle "
    "(trust_pickle=True) only for a file you trust, or save the model with skops instead"
)


def load_source(
    uri: str | Path,
    *,
    base: str | Path | None = None,
    trust_pickle: bool = False,
    task: str | None = None,
) -> tuple[Any, Source]:
    """Read the model that ``uri`` names.

    Parameters
    ----------
    uri : str or Path
        A file path (relative ones resolve against ``base``), or ``models:/name/version``
        or ``models:/name@alias`` in MLflow's model registry (the ``registry`` extra).
    base : str or Path, optional
        The folder relative paths start from (an experts.toml file's own folder); the
        current directory if None.
    trust_pickle : bool
        Allow pickles (joblib files, MLflow's pickled scikit-learn models) and skops files
        holding types skops does not trust by default. A pickle runs code when it loads.
    task : {"regression", "classification"}, optional
        XGBoost files: load an XGBRegressor or XGBClassifier (a bare Booster if None).
        LightGBM text files always give a ``lightgbm.Booster``.

    Returns
    -------
    model : object
        A Path for an ONNX file; otherwise the fitted model object (an estimator, or a
        LightGBM Booster).
    source : Source
        The uri as given, the format, and the sha256 of the file read.
    """
    text = str(uri)
    if text.startswith("models:"):
        from training.experts.mlflow_source import load_registered

        return load_registered(text, trust_pickle=trust_pickle, task=task)
    path = Path(text).expanduser()
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    fmt = SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ParameterError(
            "source",
            text,
            f"has an unknown suffix {path.suffix!r}: expected one of "
            f"{', '.join(SUFFIX_FORMATS)}, or models:/name/version",
        )
    if not path.is_file():
        raise ParameterError("source", text, f"is not an existing file (looked at {path})")
    model = load_file(path, fmt, text, trust_pickle=trust_pickle, task=task)
    return model, Source(text, fmt, sha256_of(path))


def sha256_of(path: Path) -> str:
    """The file's sha256, in hex."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_file(
    path: Path, fmt: str, uri: str, *, trust_pickle: bool = False, task: str | None = None
) -> Any:
    """Read ``path`` as ``fmt`` (a value of :data:`SUFFIX_FORMATS`); errors name ``uri``."""
    readers: dict[str, Callable[[], Any]] = {
        "onnx": lambda: _read_onnx(path),
        "skops": lambda: _read_skops(path, uri, trust_pickle),
        "joblib": lambda: _read_pickle(path, uri, trust_pickle),
        "xgboost-json": lambda: _read_xgboost(path, task),
        "xgboost-ubj": lambda: _read_xgboost(path, task),
        "lightgbm": lambda: _read_lightgbm(path),
    }
    try:
        return readers[fmt]()
    except ParameterError:
        raise
    except ImportError as exc:
        raise ParameterError(
            "source", uri, f"needs the {exc.name or 'missing'} package to be read ({fmt})"
        ) from None
    except Exception as exc:  # each library raises its own types for a file it cannot read
        detail = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        raise ParameterError(
            "source", uri, f"cannot be read as {fmt}: {type(exc).__name__}: {detail}"
        ) from None


def _read_onnx(path: Path) -> Path:
    import onnx

    onnx.load(str(path), load_external_data=False)  # parses, or raises DecodeError
    return path.resolve()


def _read_skops(path: Path, uri: str, trust_pickle: bool) -> Any:
    import skops.io as sio

    untrusted = sio.get_untrusted_types(file=path)
    if untrusted and not trust_pickle:
        raise ParameterError(
            "source",
            uri,
            f"holds types skops does not trust by default: {', '.join(untrusted)}. Check "
            "them, then pass --trust-pickle (trust_pickle=True) to load them",
        )
    return sio.load(path, trusted=untrusted)


def _read_pickle(path: Path, uri: str, trust_pickle: bool) -> Any:
    if not trust_pickle:
        raise ParameterError("source", uri, PICKLE_WHY)
    import joblib

    return joblib.load(path)


def _read_xgboost(path: Path, task: str | None) -> Any:
    import xgboost as xgb

    if task is None:
        return xgb.Booster(model_file=str(path))
    model = xgb.XGBClassifier() if task == "classification" else xgb.XGBRegressor()
    model.load_model(str(path))
    return model


def _read_lightgbm(path: Path) -> Any:
    import lightgbm as lgb

    # The Booster as is: the registry converts it (onnxmltools reads Boosters), and its
    # predict gives the mean, or the probabilities (the positive class's, if binary).
    return lgb.Booster(model_file=str(path))
