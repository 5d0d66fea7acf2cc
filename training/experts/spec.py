"""Registering experts: a name, a model, and the features it may read.

An expert's model is one of: an unfitted scikit-learn estimator or Pipeline, an XGBoost
sklearn-API model, the path of an existing ONNX file (already fitted elsewhere), or, with
``prefit=True``, a fitted scikit-learn, XGBoost or LightGBM model used as is.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sklearn.base import is_classifier, is_regressor

from app.bundle.manifest import check_safe_name
from training.errors import ParameterError
from training.experts.caps import check_cap

Kind = Literal["sklearn", "xgboost", "lightgbm", "onnx"]


def is_fitted(model: Any) -> bool:
    """Whether ``model`` is a fitted estimator, as scikit-learn's ``check_is_fitted`` sees it
    (a Booster, XGBoost's or LightGBM's, is always trained)."""
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    if type(model).__name__ == "Booster":
        return True
    if not hasattr(model, "fit"):
        return False
    try:
        check_is_fitted(model)
    except (NotFittedError, TypeError):
        return False
    return True


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
        module = type(self.model).__module__
        if module.startswith("xgboost"):
            return "xgboost"
        return "lightgbm" if module.startswith("lightgbm") else "sklearn"

    @property
    def is_prefit(self) -> bool:
        """Trained elsewhere and used as is: an ONNX file, or a model passed with prefit."""
        return self.prefit or self.kind == "onnx"

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
        if self.prefit:
            self._check_prefit(task)
            return
        if self.classes is not None or self.variance_output is not None:
            what = "classes" if self.classes is not None else "variance_output"
            raise ParameterError(what, getattr(self, what), "applies only to a pre-fitted expert")
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
        if is_fitted(self.model):
            # Refitting silently would serve another model than the team's (issue: up to
            # 1.43 target units apart); say so, and how to keep it.
            warnings.warn(
                f"expert {self.name!r}: {type(self.model).__name__} is already fitted; it will "
                "be refit (cloned and fitted on these rows, its fitted state ignored); pass "
                "prefit=True to use it as is",
                UserWarning,
                stacklevel=3,
            )

    def _check_prefit(self, task: str) -> None:
        """A pre-fitted model: trained, of the task's kind, and nothing to cap."""
        name = type(self.model).__name__
        if self.max_rows is not None or self.max_draws is not None:
            raise ParameterError(
                "max_rows", self.max_rows or self.max_draws, "does not apply to a prefit expert"
            )
        if not is_fitted(self.model):
            raise ParameterError(
                "model", name, f"of expert {self.name!r} is not fitted, yet prefit=True"
            )
        if name == "Booster":
            return  # its objective decides; checked when it is converted
        ok = is_classifier(self.model) if task == "classification" else is_regressor(self.model)
        if not ok:
            wanted = "classifier" if task == "classification" else "regressor"
            raise ParameterError("model", name, f"of expert {self.name!r} is not a {wanted}")


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
        prefit: bool = False,
        classes: Sequence[Any] | None = None,
        variance_output: str | None = None,
        source: Source | None = None,
    ) -> Expert:
        """Add an expert; ``prefit=True`` uses a fitted model as is (never refit).

        A pre-fitted model (a fitted scikit-learn estimator or Pipeline, an XGBoost or
        LightGBM model or Booster) is converted to ONNX once, checked against its own
        predictions and predicts in the target's original units. See :class:`Expert`.
        """
        feats = None if features is None else tuple(features)
        return self.add(
            Expert(
                name,
                model,
                feats,
                preprocess,
                output,
                output_units,
                max_rows,
                max_draws,
                prefit=bool(prefit),
                classes=None if classes is None else tuple(classes),
                variance_output=variance_output,
                source=source,
            )
        )

    def __iter__(self) -> Iterator[Expert]:
        return iter(self._experts.values())

    def __len__(self) -> int:
        return len(self._experts)

    @property
    def names(self) -> list[str]:
        return list(self._experts)
