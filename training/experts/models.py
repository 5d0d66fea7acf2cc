"""Turning a registered :class:`Expert` into something that predicts on normalised frames.

``predict_raw`` returns ``(n, C)`` probabilities for every class of the task (classes an
estimator never saw get probability 0 before clipping) or ``(n,)`` means, in the units
the expert was fitted in.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from training.experts.onnx import OnnxGraph, check_parity, convert_sklearn_model
from training.experts.onnx_adapter import adapt, drop_zipmap, graph_labels, map_classes
from training.experts.prefit import Converted, convert
from training.experts.spec import Expert
from training.experts.tolerance import n_terms, parity_tolerance
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
    """A model trained elsewhere, run as an ONNX graph with onnxruntime; never refitted.

    Either an ONNX file, or a pre-fitted model converted once (:mod:`.prefit`) and checked
    against its own predictions on ``check_rows``. The graph is fitted to the bundle's
    convention by :mod:`.onnx_adapter`: it runs, and is stored, with one input per column
    named by graph name; a classifier's probabilities come in the task's class order.
    """

    def __init__(
        self,
        expert: Expert,
        task: str,
        n_classes: int,
        schema: FeatureSchema,
        classes: Sequence[Any] | None = None,
        check_rows: pd.DataFrame | None = None,
    ) -> None:
        self.task = task
        self.n_classes = n_classes
        self.path = Path(expert.model) if expert.kind == "onnx" else None
        self.source = str(self.path) if self.path is not None else expert.name
        what = f"expert {expert.name!r}"
        converted = None
        order: Sequence[str] | None
        labels: Sequence[Any] | None
        if self.path is not None:
            model, order, labels = load_onnx(self.path), expert.features, expert.classes
        else:
            converted = convert(
                expert.model, schema, expert.features, task, expert.classes, expert.name
            )
            model, order, labels = converted.model, converted.order, converted.labels
        fed, zip_labels = drop_zipmap(model)
        output = self._output(model, expert, fed)
        if task == "classification" and classes is not None:
            found = labels if labels is not None else zip_labels or graph_labels(model)
            if found is not None and not _are_codes(found, labels, classes):
                output = map_classes(model, output, found, classes, what)
        adapted = adapt(model, schema, order, what)
        self.schema = schema.subset(adapted.features)
        # A file is stored as written; a conversion's opsets are put in a stable order.
        final = adapted.model if converted is None else sorted_opsets(adapted.model)
        self.graph = OnnxGraph(final.SerializeToString(), output)
        self.terms = n_terms(model)
        self.tied_rows_ = 0
        if converted is not None and check_rows is not None:
            self._check(converted, check_rows, schema, classes, expert.name)

    def _output(self, model: onnx.ModelProto, expert: Expert, fed: str | None) -> str:
        outputs = [o.name for o in model.graph.output]
        if expert.output is not None:
            if expert.output not in outputs:
                raise ParameterError("output", expert.output, f"is not one of {outputs}")
            return expert.output
        if fed is not None:
            return fed  # the probabilities that fed the ZipMap
        # skl2onnx classifiers put (label, probabilities); regressors a single output.
        return outputs[-1] if self.task == "classification" else outputs[0]

    def _check(
        self,
        converted: Converted,
        sample: pd.DataFrame,
        schema: FeatureSchema,
        classes: Sequence[Any] | None,
        name: str,
    ) -> None:
        """Refuse a conversion that disagrees with the model's own predictions."""
        want = converted.predict(sample[schema.inputs].set_axis(schema.names, axis=1))
        if self.task == "classification" and classes is not None:
            labels = converted.labels or list(range(want.shape[1]))
            if not _are_codes(labels, converted.labels, classes):
                task = [str(c) for c in classes]
                wide = np.zeros((want.shape[0], len(task)))
                for i, c in enumerate(labels):
                    wide[:, task.index(str(c))] = want[:, i]
                want = wide
        got = self.predict_raw(sample).reshape(len(sample), -1)
        want = want.reshape(len(sample), -1)
        tol = parity_tolerance(want, self.terms)
        diff = float(np.abs(got - want).max()) if got.shape == want.shape else np.inf
        if not diff <= tol:
            raise ParameterError(
                "model",
                name,
                f"its ONNX conversion disagrees with the model's own predictions (max abs "
                f"diff {diff:.3g} > tolerance {tol:.3g} on {len(sample)} rows); refusing it",
            )
        self.parity_max_abs_diff_ = diff

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
                self.source,
                f"outputs shape {out.shape}, expected (n, {self.n_classes}) probabilities",
            )
        return out

    def freeze(self, name: str, sample: pd.DataFrame) -> None:
        """Nothing to convert: the graph was made (and checked) when it was opened."""


def load_onnx(path: Path) -> onnx.ModelProto:
    try:
        model = onnx.load(str(path))
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnx and onnxruntime raise their own untyped errors
        raise ParameterError("model", str(path), f"cannot be loaded: {exc}") from None
    return model


def sorted_opsets(model: onnx.ModelProto) -> onnx.ModelProto:
    """Opsets in domain order: converters list them in a set's (hash-seeded) order."""
    opsets = sorted(model.opset_import, key=lambda o: o.domain)
    del model.opset_import[:]
    model.opset_import.extend(opsets)
    return model


def _are_codes(
    found: Sequence[Any], declared: Sequence[Any] | None, classes: Sequence[Any]
) -> bool:
    """A graph's own labels 0..C-1 on a task whose labels are not: the file was trained on
    the class codes (only when nobody declared the classes)."""
    return (
        declared is None
        and [str(c) for c in found] != [str(c) for c in classes]
        and list(found) == list(range(len(classes)))
    )
