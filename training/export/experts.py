"""Fitted experts to ONNX: one float32 or string input per raw feature, as the app feeds them.

Every converted graph is run in onnxruntime on sample rows and compared with the fitted
estimator before it is accepted: converters can be silently wrong (skl2onnx's kNN with
``weights="distance"`` is one, see TOOLCHAIN.md).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd

from training.errors import ExportError
from training.experts.models import OnnxExpertModel, SklearnExpertModel, onnx_feed
from training.features import FeatureSchema

TARGET_OPSET = {"": 17, "ai.onnx.ml": 3}
PARITY_TOL = 1e-4
_registered = False


def register_converters() -> None:
    """Teach skl2onnx about XGBoost and the soft-circle expert (once per process)."""
    global _registered
    if _registered:
        return
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import (
        calculate_linear_classifier_output_shapes,
        calculate_linear_regressor_output_shapes,
    )

    from training.experts.soft_circle import register_converter
    from training.export.fixes import register_fixes

    register_converter()
    register_fixes()
    try:
        from onnxmltools.convert.xgboost.operator_converters.XGBoost import convert_xgboost
        from xgboost import XGBClassifier, XGBRegressor
    except ImportError:  # xgboost is optional; its experts then cannot be registered anyway
        pass
    else:
        update_registered_converter(
            XGBClassifier,
            "XGBoostXGBClassifier",
            calculate_linear_classifier_output_shapes,
            convert_xgboost,
            options={"nocl": [True, False], "zipmap": [True, False, "columns"]},
        )
        update_registered_converter(
            XGBRegressor,
            "XGBoostXGBRegressor",
            calculate_linear_regressor_output_shapes,
            convert_xgboost,
        )
    _registered = True


def _initial_types(schema: FeatureSchema) -> list[tuple[str, Any]]:
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    return [
        (f.name, FloatTensorType([None, 1]) if f.dtype == "float" else StringTensorType([None, 1]))
        for f in schema.features
    ]


def _options(estimator: Any) -> dict[int, dict[str, Any]]:
    from sklearn.base import is_classifier
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

    steps = [s for _, s in estimator.steps] if hasattr(estimator, "steps") else [estimator]
    opts: dict[int, dict[str, Any]] = {}
    for step in steps:
        if isinstance(step, (KNeighborsClassifier, KNeighborsRegressor)):
            opts[id(step)] = {"optim": "cdist"}  # 13 ms to 0.08 ms a row (TOOLCHAIN.md)
        if is_classifier(step):
            opts.setdefault(id(step), {})["zipmap"] = False
    return opts


def sklearn_to_onnx(model: SklearnExpertModel, name: str) -> tuple[onnx.ModelProto, str]:
    """Convert; return the graph and the name of its probability or mean output."""
    from skl2onnx import convert_sklearn

    register_converters()
    try:
        onx = convert_sklearn(
            model.estimator,
            name=name,
            initial_types=_initial_types(model.schema),
            options=_options(model.estimator),
            target_opset=TARGET_OPSET,
        )
    except Exception as exc:  # skl2onnx raises many unrelated types
        raise ExportError(f"expert {name!r} cannot be converted to ONNX: {exc}") from exc
    outputs = [o.name for o in onx.graph.output]
    output = outputs[-1] if model.task == "classification" else outputs[0]
    return onx, output


def check_parity(
    path: Path,
    output: str,
    model: SklearnExpertModel | OnnxExpertModel,
    sample: pd.DataFrame,
    name: str,
) -> float:
    """Max abs difference between onnxruntime and the in-memory model on ``sample``."""
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = sess.run([output], onnx_feed(sess, sample))
    got = np.asarray(got, dtype=np.float64).reshape(len(sample), -1)
    want = model.predict_raw(sample).reshape(len(sample), -1)
    diff = float(np.max(np.abs(got - want))) if got.size else 0.0
    if got.shape != want.shape or diff > PARITY_TOL * max(1.0, float(np.abs(want).max())):
        raise ExportError(
            f"expert {name!r}: its ONNX graph disagrees with the fitted model "
            f"(max abs diff {diff:.3g} on {len(sample)} rows); refusing to export it. Known "
            "causes: kNN with weights='distance', kNN on rows with exactly tied distances"
        )
    return diff


def write_expert(
    model: SklearnExpertModel | OnnxExpertModel, name: str, path: Path, sample: pd.DataFrame
) -> tuple[str, list[str], float]:
    """Write ``model`` as ONNX at ``path``; return (output name, input names, parity)."""
    if isinstance(model, OnnxExpertModel):
        shutil.copyfile(model.path, path)
        return model.output, list(model.inputs), 0.0
    onx, output = sklearn_to_onnx(model, name)
    path.write_bytes(onx.SerializeToString())
    diff = check_parity(path, output, model, sample, name)
    return output, model.schema.names, diff
