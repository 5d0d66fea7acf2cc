"""Turning a registered :class:`Expert` into something that predicts on normalised frames.

``predict_raw`` returns ``(n, C)`` probabilities for every class of the task (classes an
estimator never saw get probability 0 before clipping) or ``(n,)`` means, in the units
the expert was fitted in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from training.errors import ParameterError
from training.experts.onnx import OnnxGraph, check_parity, convert_sklearn_model, rename_inputs
from training.experts.spec import Expert
from training.features import FeatureSchema

# Levels of a categorical column an expert one-hot encodes (the gate keeps as many).
MAX_ONEHOT = 50


def is_tree_model(model: Any) -> bool:
    """Trees are scale-invariant, and scaling in front of them costs ONNX parity: float32
    scaling in the graph can move a value across a split threshold."""
    module = type(model).__module__
    return module.startswith(("sklearn.ensemble", "sklearn.tree", "xgboost", "lightgbm"))


def frequent_levels(frame: pd.DataFrame, columns: list[str], k: int) -> list[list[str]]:
    """Each column's ``k`` most frequent values (ties by value), sorted."""
    out = []
    for name in columns:
        counts = frame[name].value_counts()
        ranked = sorted(counts.index, key=lambda v: (-counts[v], v))[:k]
        out.append(sorted(ranked))
    return out


def encoder_for(
    schema: FeatureSchema, scale: bool = True, levels: list[list[str]] | None = None
) -> ColumnTransformer:
    """Median-impute (and scale) numbers; one-hot categories, ignoring unseen levels.

    ``levels`` limits each categorical column to those values (the rest encode as all
    zeros, like an unseen one): a 400-level column would otherwise widen every expert by
    400 columns and make the boosted trees and the MLP several times slower.
    """
    parts: list[tuple[str, Any, list[str]]] = []
    if schema.numeric:
        steps: list[tuple[str, Any]] = [("impute", SimpleImputer(strategy="median"))]
        if scale:
            steps.append(("scale", StandardScaler()))
        parts.append(("num", Pipeline(steps), schema.numeric))
    if schema.categorical:
        onehot = OneHotEncoder(
            categories=levels if levels is not None else "auto",
            handle_unknown="ignore",
            sparse_output=False,
            dtype=np.float32,
        )
        parts.append(("cat", onehot, schema.categorical))
    return ColumnTransformer(parts, remainder="drop", sparse_threshold=0.0)


def build_estimator(
    expert: Expert, schema: FeatureSchema, frame: pd.DataFrame | None = None
) -> Any:
    """A fresh, unfitted estimator for ``expert`` reading ``schema``'s columns.

    With the training ``frame``, categorical columns keep their ``MAX_ONEHOT`` most
    frequent levels.
    """
    model = clone(expert.model)
    if expert.preprocess == "none":
        return model
    levels = None
    if frame is not None and schema.categorical:
        levels = frequent_levels(frame, schema.categorical, MAX_ONEHOT)
    encoder = encoder_for(schema, scale=not is_tree_model(model), levels=levels)
    return Pipeline([("encode", encoder), ("model", model)])


class SklearnExpertModel:
    """A fitted sklearn/XGBoost estimator behind the common ``predict_raw``.

    Frames arrive keyed by graph name. An estimator we wrapped in our own encoder sees
    those names; one the user built to encode for itself (``preprocess="none"``) selects
    columns by the user's names, so it gets the user's names. Once :meth:`freeze` has
    converted it, predictions come from its ONNX graph, as they will when served.
    """

    def __init__(
        self,
        estimator: Any,
        schema: FeatureSchema,
        task: str,
        n_classes: int,
        user_columns: bool = False,
    ) -> None:
        self.estimator = estimator
        self.schema = schema
        self.task = task
        self.n_classes = n_classes
        self.user_columns = user_columns
        self.graph: OnnxGraph | None = None
        self.tied_rows_ = 0

    def inputs_of(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The columns this estimator reads, under the names it was fitted with."""
        X = frame[self.schema.inputs]
        if self.user_columns:
            X = X.set_axis(self.schema.names, axis=1)
        return X

    def predict_raw(self, frame: pd.DataFrame) -> np.ndarray:
        if self.graph is not None:
            return self._shape(self.graph.run(frame))
        return self.predict_fitted(frame)

    def predict_fitted(self, frame: pd.DataFrame) -> np.ndarray:
        """The fitted estimator's own predictions (not its graph's)."""
        X = self.inputs_of(frame)
        if self.task == "regression":
            return np.asarray(self.estimator.predict(X), dtype=np.float64).reshape(-1)
        return self._shape(np.asarray(self.estimator.predict_proba(X), dtype=np.float64))

    def _shape(self, out: np.ndarray) -> np.ndarray:
        """Means as (n,); probabilities widened to every class of the task."""
        if self.task == "regression":
            return out.reshape(-1)
        seen = np.asarray(self.estimator.classes_, dtype=np.int64)
        wide = np.zeros((out.shape[0], self.n_classes))
        wide[:, seen] = out
        return wide

    def freeze(self, name: str, sample: pd.DataFrame) -> None:
        """Convert to ONNX, check the graph against the estimator, predict through it."""
        names = self.schema.names if self.user_columns else self.schema.inputs
        graph = convert_sklearn_model(
            self.estimator,
            names,
            self.schema.inputs,
            [f.dtype for f in self.schema.features],
            self.task,
            name,
        )
        self.tied_rows_ = check_parity(
            graph,
            lambda f: self.predict_fitted(f),
            sample,
            name,
            self.estimator,
            self.inputs_of,
        )
        self.graph = graph


class OnnxExpertModel:
    """An existing ONNX file, run with onnxruntime; it is never refitted.

    Its inputs are matched to the features by the user's column name (or by graph name),
    one input per column; it runs, and is stored, with its inputs renamed to graph names.
    """

    def __init__(self, expert: Expert, task: str, n_classes: int, schema: FeatureSchema) -> None:
        self.path = Path(expert.model)
        self.task = task
        self.n_classes = n_classes
        try:
            model = onnx.load(str(self.path))
            session = ort.InferenceSession(str(self.path), providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnx and onnxruntime raise their own untyped errors
            raise ParameterError("model", str(self.path), f"cannot be loaded: {exc}") from None
        by_name = dict(zip(schema.names, schema.inputs, strict=True))
        graph_names = set(schema.inputs)
        renames: dict[str, str] = {}
        unknown = []
        for inp in session.get_inputs():
            graph = by_name.get(inp.name) or (inp.name if inp.name in graph_names else None)
            if graph is None:
                unknown.append(inp.name)
            else:
                renames[inp.name] = graph
        if unknown:
            raise ParameterError("model", str(self.path), f"reads columns {unknown} not in X")
        self.schema = schema.subset([schema.name_of(g) for g in renames.values()])
        outputs = [o.name for o in session.get_outputs()]
        if expert.output is not None:
            if expert.output not in outputs:
                raise ParameterError("output", expert.output, f"is not one of {outputs}")
            output = expert.output
        else:
            # skl2onnx classifiers put (label, probabilities); regressors a single output.
            output = outputs[-1] if task == "classification" else outputs[0]
        self.graph = OnnxGraph(rename_inputs(model, renames).SerializeToString(), output)
        self.tied_rows_ = 0

    @property
    def inputs(self) -> list[str]:
        """Graph names of the features the file reads."""
        return self.graph.inputs

    def predict_raw(self, frame: pd.DataFrame) -> np.ndarray:
        out = self.graph.run(frame)
        if self.task == "regression":
            return out.reshape(-1)
        if out.ndim != 2 or out.shape[1] != self.n_classes:
            raise ParameterError(
                "model",
                str(self.path),
                f"outputs shape {out.shape}, expected (n, {self.n_classes}) probabilities",
            )
        return out

    def freeze(self, name: str, sample: pd.DataFrame) -> None:
        """Nothing to convert: the file is the graph."""
