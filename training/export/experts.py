"""Fitted experts to ONNX: one float32 or string input per raw feature, as the app feeds them.

Every converted graph is run in onnxruntime on sample rows and compared with the fitted
estimator before it is accepted: converters can be silently wrong (skl2onnx's kNN with
``weights="distance"`` is one, see TOOLCHAIN.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd

from training.errors import ExportError
from training.experts.models import OnnxExpertModel, SklearnExpertModel, onnx_feed

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


def _initial_types(model: SklearnExpertModel) -> list[tuple[str, Any]]:
    """One (n, 1) input per feature, under the names the estimator was fitted with."""
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    names = model.schema.names if model.user_columns else model.schema.inputs
    return [
        (name, FloatTensorType([None, 1]) if f.dtype == "float" else StringTensorType([None, 1]))
        for name, f in zip(names, model.schema.features, strict=True)
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
            initial_types=_initial_types(model),
            options=_options(model.estimator),
            target_opset=TARGET_OPSET,
        )
    except Exception as exc:  # skl2onnx raises many unrelated types
        raise ExportError(f"expert {name!r} cannot be converted to ONNX: {exc}") from exc
    declared = [i.name for i in onx.graph.input]
    if len(declared) != len(model.schema.inputs):
        raise ExportError(
            f"expert {name!r}: its ONNX graph takes {len(declared)} inputs, expected "
            f"{len(model.schema.inputs)}"
        )
    # skl2onnx keeps the order of initial_types but may rewrite names it dislikes; the
    # bundle's graphs all take the graph input names.
    onx = rename_inputs(onx, dict(zip(declared, model.schema.inputs, strict=True)))
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


def rename_inputs(model: onnx.ModelProto, renames: dict[str, str]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph inputs (and every use of them) carry new names."""
    out = onnx.ModelProto()
    out.CopyFrom(model)

    def rename(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            for i, name in enumerate(node.input):
                if name in renames:
                    node.input[i] = renames[name]
            for attr in node.attribute:  # subgraphs (If, Loop, Scan) may read outer names
                if attr.type == onnx.AttributeProto.GRAPH:
                    rename(attr.g)
                for sub in attr.graphs:
                    rename(sub)

    for inp in out.graph.input:
        if inp.name in renames:
            inp.name = renames[inp.name]
    rename(out.graph)
    return out


def write_expert(
    model: SklearnExpertModel | OnnxExpertModel, name: str, path: Path, sample: pd.DataFrame
) -> tuple[str, list[str], float]:
    """Write ``model`` as ONNX at ``path``; return (output name, graph input names, parity)."""
    if isinstance(model, OnnxExpertModel):
        onx = rename_inputs(onnx.load(str(model.path)), model.renames)
        path.write_bytes(onx.SerializeToString())
        diff = check_parity(path, model.output, model, sample, name)
        return model.output, model.inputs, diff
    onx, output = sklearn_to_onnx(model, name)
    path.write_bytes(onx.SerializeToString())
    diff = check_parity(path, output, model, sample, name)
    return output, model.schema.inputs, diff
