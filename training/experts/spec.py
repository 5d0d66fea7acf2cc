"""Registering experts: a name, a model, and the features it may read.

An expert's model is one of: an unfitted scikit-learn estimator or Pipeline, an XGBoost
sklearn-API model, or the path of an existing ONNX file (already fitted elsewhere).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sklearn.base import is_classifier, is_regressor

from app.bundle.manifest import check_safe_name
from training.errors import ParameterError
from training.experts.caps import check_cap

Kind = Literal["sklearn", "xgboost", "onnx"]


@dataclass(frozen=True)
class Source:
    """Where a registered, already trained model came from; the manifest records it.

    Parameters
    ----------
    uri : str
        What the team named: a file path as given, or ``models:/name/version``.
    format : str
        How it was stored: ``"onnx"``, ``"skops"``, ``"joblib"``, ``"xgboost-json"``,
        ``"xgboost-ubj"``, ``"lightgbm"``, ``"object"`` (a Python object), or
        ``"mlflow:<flavor>"``.
    sha256 : str or None
        Of the file read (None for a Python object).
    """

    uri: str
    format: str
    sha256: str | None = None


@dataclass(frozen=True)
class Expert:
    """One registered expert.

    Parameters
    ----------
    name : str
        Unique; it names the expert in responses, metrics and the bundle.
    model : estimator or path
        An unfitted sklearn/XGBoost estimator, or a ``.onnx`` file.
    features : sequence of str, optional
        The subset of raw features this expert reads (a "feature bundle"); all if None.
        For an ONNX file, its graph inputs decide and this must be None or equal them.
    preprocess : {"auto", "none"}
        ``"auto"`` puts the standard encoder in front of an sklearn/XGBoost model:
        median imputation and scaling for numbers, one-hot for categories. ``"none"``
        hands the model the raw DataFrame of its features (a Pipeline that encodes).
    output : str, optional
        ONNX files only: the output holding probabilities or the mean.
    output_units : {"original", "standardised"}
        ONNX regressors only: the units of that output.
    max_rows : int, optional
        Fit on a stratified sample of at most this many rows (a kNN expert's reference
        set; see :mod:`training.experts.caps`). All rows if None.
    max_draws : int, optional
        Bagging models only: rows each member draws (``max_samples``), at most this many.
    prefit : bool
        The model is already trained: it is used as is, never refit.
    classes : sequence, optional
        Classification: the model's class order where its file does not carry the labels.
    variance_output : str, optional
        Regression: the output holding the model's per-row predictive variance.
    source : Source, optional
        Where a pre-fitted model came from.
    """

    name: str
    model: Any
    features: tuple[str, ...] | None = None
    preprocess: Literal["auto", "none"] = "auto"
    output: str | None = None
    output_units: Literal["original", "standardised"] = "original"
    max_rows: int | None = None
    max_draws: int | None = None
    prefit: bool = False
    classes: tuple[Any, ...] | None = None
    variance_output: str | None = None
    source: Source | None = None

    @property
    def kind(self) -> Kind:
        if isinstance(self.model, (str, Path)):
            return "onnx"
        return "xgboost" if type(self.model).__module__.startswith("xgboost") else "sklearn"

    def check(self, task: str) -> None:
        try:
            check_safe_name(self.name, "expert name")
        except ValueError as exc:
            raise ParameterError("name", self.name, str(exc)) from None
        if self.preprocess not in ("auto", "none"):
            raise ParameterError("preprocess", self.preprocess, "must be 'auto' or 'none'")
        check_cap("max_rows", self.max_rows, self.name)
        check_cap("max_draws", self.max_draws, self.name)
        if self.kind == "onnx":
            if self.max_rows is not None or self.max_draws is not None:
                raise ParameterError(
                    "max_rows", self.max_rows or self.max_draws, "does not apply to an ONNX file"
                )
            path = Path(self.model)
            if path.suffix != ".onnx" or not path.is_file():
                raise ParameterError("model", str(path), "is not an existing .onnx file")
            return
        if not hasattr(self.model, "fit"):
            raise ParameterError(
                "model", type(self.model).__name__, "is neither an estimator nor an ONNX path"
            )
        ok = is_classifier(self.model) if task == "classification" else is_regressor(self.model)
        if not ok:
            wanted = "classifier" if task == "classification" else "regressor"
            raise ParameterError(
                "model", type(self.model).__name__, f"of expert {self.name!r} is not a {wanted}"
            )


class ExpertRegistry:
    """An ordered set of experts, registered by name.

    >>> reg = ExpertRegistry()
    >>> reg.register("ridge", Ridge(), features=["age", "income"])  # doctest: +SKIP
    """

    def __init__(self, experts: Sequence[Expert] = ()) -> None:
        self._experts: dict[str, Expert] = {}
        for e in experts:
            self.add(e)

    def add(self, expert: Expert) -> Expert:
        if expert.name in self._experts:
            raise ParameterError("name", expert.name, "is already registered")
        self._experts[expert.name] = expert
        return expert

    def register(
        self,
        name: str,
        model: Any,
        *,
        features: Sequence[str] | None = None,
        preprocess: Literal["auto", "none"] = "auto",
        output: str | None = None,
        output_units: Literal["original", "standardised"] = "original",
        max_rows: int | None = None,
        max_draws: int | None = None,
    ) -> Expert:
        feats = None if features is None else tuple(features)
        return self.add(
            Expert(name, model, feats, preprocess, output, output_units, max_rows, max_draws)
        )

    def __iter__(self) -> Iterator[Expert]:
        return iter(self._experts.values())

    def __len__(self) -> int:
        return len(self._experts)

    @property
    def names(self) -> list[str]:
        return list(self._experts)
