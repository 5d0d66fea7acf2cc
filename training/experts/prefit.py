"""Pre-fitted models: converted to ONNX once, and their own predictions for the parity check.

A fitted scikit-learn estimator or Pipeline, an XGBoost or LightGBM model (sklearn API or
Booster) becomes an ONNX graph with either one tensor input ``(n, k)`` (a model that reads
numbers only, in its own feature order) or one input per column (a model with a
ColumnTransformer or categorical columns, which selects columns by name). The graph then
goes through :mod:`training.experts.onnx_adapter` like any ONNX file. The model itself is
never cloned, refit or modified: conversions work on copies where a converter needs one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import pandas as pd

from training.errors import ParameterError
from training.experts.onnx import TARGET_OPSET, _options, register_converters
from training.features import FeatureSchema

TENSOR_INPUT = "input"
# onnxmltools converts a LightGBM Booster up to this opset; the ensemble lifts it.
LGB_OPSET = 15


@dataclass
class Converted:
    """A pre-fitted model as ONNX, with what the adapter and the parity check need."""

    model: onnx.ModelProto
    order: list[str] | None  # the feature order of a single tensor input
    labels: list[Any] | None  # classification: the model's class order
    predict: Any  # DataFrame with the user's column names -> (n,) or (n, k) in labels' order


def own_feature_names(model: Any) -> list[str] | None:
    """The feature names the model was fitted with, if it kept any."""
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        return [str(n) for n in names]
    if type(model).__module__.startswith("xgboost") and type(model).__name__ == "Booster":
        return list(model.feature_names) if model.feature_names else None
    if type(model).__module__.startswith("lightgbm") and type(model).__name__ == "Booster":
        found = [str(n) for n in model.feature_name()]
        generic = all(n == f"Column_{i}" for i, n in enumerate(found))
        return None if generic else found
    return None


def _steps(model: Any) -> list[Any]:
    return [s for _, s in model.steps] if hasattr(model, "steps") else [model]


def _selects_columns(model: Any) -> bool:
    from sklearn.compose import ColumnTransformer

    return any(isinstance(s, ColumnTransformer) for s in _steps(model))


def as_sklearn_api(model: Any, task: str) -> Any:
    """An XGBoost Booster as a fresh XGBRegressor/XGBClassifier over the same trees."""
    if not (type(model).__module__.startswith("xgboost") and type(model).__name__ == "Booster"):
        return model
    from xgboost import XGBClassifier, XGBRegressor

    wrapper = XGBClassifier() if task == "classification" else XGBRegressor()
    wrapper.load_model(bytearray(model.save_raw("ubj")))
    return wrapper


def _without_xgb_names(model: Any) -> Any:
    """A copy of a bare XGBoost model without feature names: onnxmltools reads the trees'
    split features as ``f<i>`` and refuses any other name."""
    if not type(model).__module__.startswith("xgboost"):
        return model
    copy = type(model)()
    copy.load_model(bytearray(model.get_booster().save_raw("ubj")))
    copy.get_booster().feature_names = None
    return copy


def convert(
    model: Any,
    schema: FeatureSchema,
    order: Sequence[str] | None,
    task: str,
    classes: Sequence[Any] | None,
    name: str,
) -> Converted:
    """Convert ``model`` (reading ``schema``'s columns) for the adapter; see module doc."""
    register_converters()
    model = as_sklearn_api(model, task)
    own = own_feature_names(model)
    cols = list(order) if order is not None else own
    if type(model).__name__ == "Booster":  # LightGBM's, the one without a sklearn face
        return _convert_lgb_booster(model, cols, schema, task, classes, name)
    if cols is None:
        cols = schema.names
    from training.experts.onnx_adapter import match_columns

    users = match_columns(cols, schema, f"expert {name!r}")
    specs = {f.name: f for f in schema.features}
    text = any(specs[u].dtype == "string" for u in users)
    per_column = _selects_columns(model) or text
    onx = _skl2onnx(model, cols, [specs[u].dtype for u in users], per_column, name)
    booster = _lgb_booster(model)
    if booster is not None:
        lower_lgb_thresholds(onx, booster)
    labels = list(classes) if classes is not None else _labels(model, task)
    fed = own if own is not None else users

    def predict(X: pd.DataFrame) -> np.ndarray:
        frame = X[users].set_axis(fed, axis=1)
        if task == "regression":
            return np.asarray(model.predict(frame), dtype=np.float64).reshape(-1)
        return np.asarray(model.predict_proba(frame), dtype=np.float64)

    return Converted(onx, None if per_column else users, labels, predict)


def _lgb_booster(model: Any) -> Any:
    steps = _steps(model)
    last = steps[-1] if len(steps) == 1 else None
    if last is None or not type(last).__module__.startswith("lightgbm"):
        return None
    return last if type(last).__name__ == "Booster" else last.booster_


def _thresholds(tree: dict[str, Any], out: dict[int, set[float]]) -> None:
    if "split_feature" in tree and tree.get("decision_type") == "<=":
        out.setdefault(int(tree["split_feature"]), set()).add(float(tree["threshold"]))
    for side in ("left_child", "right_child"):
        if side in tree:
            _thresholds(tree[side], out)


def lower_lgb_thresholds(onx: onnx.ModelProto, booster: Any) -> None:
    """Make a LightGBM graph's float32 splits exact for float32 inputs, in place.

    LightGBM splits on ``x <= t`` with a double ``t``; the graph holds ``t`` rounded to
    the nearest float32, which moves a float32 ``x`` equal to it to the wrong side when
    the rounding went up (2 of 442 rows, 8.6 target units apart, on a small forest). For
    float32 ``x``, ``x <= t`` is ``x <= t32`` with ``t32`` the largest float32 not above
    ``t``: each rounded-up value is replaced by the float32 below it.
    """
    found: dict[int, set[float]] = {}
    for tree in booster.dump_model()["tree_info"]:
        _thresholds(tree["tree_structure"], found)
    for node in onx.graph.node:
        if not node.op_type.startswith("TreeEnsemble"):
            continue
        attrs = {a.name: a for a in node.attribute}
        if "nodes_values" not in attrs or "nodes_featureids" not in attrs:
            continue
        values, feats = attrs["nodes_values"].floats, attrs["nodes_featureids"].ints
        for i, (v, f) in enumerate(zip(list(values), list(feats), strict=True)):
            v32 = np.float32(v)
            near = [t for t in found.get(int(f), ()) if np.float32(t) == v32]
            if near and all(t < float(v32) for t in near):
                values[i] = float(np.nextafter(v32, np.float32(-np.inf)))


def _labels(model: Any, task: str) -> list[Any] | None:
    """The model's own class labels; XGBoost's ``classes_`` are codes 0..k-1, not labels."""
    if task != "classification" or type(model).__module__.startswith("xgboost"):
        return None
    found = getattr(model, "classes_", None)
    return None if found is None else list(np.asarray(found).tolist())


def _skl2onnx(
    model: Any, cols: list[str], dtypes: list[str], per_column: bool, name: str
) -> onnx.ModelProto:
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    if per_column:
        types = [
            (c, FloatTensorType([None, 1]) if d == "float" else StringTensorType([None, 1]))
            for c, d in zip(cols, dtypes, strict=True)
        ]
    else:
        types = [(TENSOR_INPUT, FloatTensorType([None, len(cols)]))]
    target = _without_xgb_names(model)
    try:
        return convert_sklearn(
            target,
            name=name,
            initial_types=types,
            options=_options(target),
            target_opset=TARGET_OPSET,
        )
    except Exception as exc:  # skl2onnx and onnxmltools raise many unrelated types
        raise ParameterError(
            "model", type(model).__name__, f"of expert {name!r} cannot be converted: {exc}"
        ) from None


def _convert_lgb_booster(
    booster: Any,
    cols: list[str] | None,
    schema: FeatureSchema,
    task: str,
    classes: Sequence[Any] | None,
    name: str,
) -> Converted:
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType

    from training.experts.onnx_adapter import match_columns

    users = match_columns(cols if cols is not None else schema.names, schema, f"expert {name!r}")
    try:
        onx = convert_lightgbm(
            booster,
            name=name,
            initial_types=[(TENSOR_INPUT, FloatTensorType([None, len(users)]))],
            target_opset=LGB_OPSET,
            zipmap=False,
        )
    except Exception as exc:  # onnxmltools raises many unrelated types
        raise ParameterError(
            "model", "Booster", f"of expert {name!r} cannot be converted: {exc}"
        ) from None

    lower_lgb_thresholds(onx, booster)

    def predict(X: pd.DataFrame) -> np.ndarray:
        out = np.asarray(booster.predict(X[users].to_numpy(np.float64)), dtype=np.float64)
        if task == "classification" and out.ndim == 1:
            out = np.stack([1.0 - out, out], axis=1)
        return out

    labels = None
    if task == "classification":
        k = max(2, int(booster.num_model_per_iteration()))
        labels = list(classes) if classes is not None else list(range(k))
    return Converted(onx, users, labels, predict)
