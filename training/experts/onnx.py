"""Experts as ONNX graphs: conversion, the graph that predicts, and the parity check
against the fitted estimator (docs/design.md, "Experts as ONNX")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd

from training.errors import ExportError
from training.experts.knn_ties import tie_ambiguous_rows

TARGET_OPSET = {"": 17, "ai.onnx.ml": 3}
PARITY_TOL = 1e-4
# Rows per onnxruntime call. A kNN graph builds a (rows x reference rows) float32
# distance matrix: unchunked, 20,000 test rows against 80,000 reference rows took 6 GB.
# 1024 rows against the capped 20,000-row reference set is 80 MB (the server uses 512).
CHUNK_ROWS = 1024
_registered = False


def register_converters() -> None:
    """Teach skl2onnx about XGBoost, the soft-circle expert and our fixes (once)."""
    global _registered
    if _registered:
        return
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import (
        calculate_linear_classifier_output_shapes,
        calculate_linear_regressor_output_shapes,
    )

    from training.experts.converter_fixes import register_fixes
    from training.experts.soft_circle import register_converter

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
    _register_lightgbm(
        update_registered_converter,
        calculate_linear_classifier_output_shapes,
        calculate_linear_regressor_output_shapes,
    )
    _registered = True


def _register_lightgbm(update: Any, classifier_shapes: Any, regressor_shapes: Any) -> None:
    """LightGBM's sklearn models, for pre-fitted experts (an optional library)."""
    try:
        from lightgbm import LGBMClassifier, LGBMRegressor
        from onnxmltools.convert.lightgbm.operator_converters.LightGbm import convert_lightgbm
    except ImportError:
        return
    update(
        LGBMClassifier,
        "LightGbmLGBMClassifier",
        classifier_shapes,
        convert_lightgbm,
        options={"nocl": [True, False], "zipmap": [True, False, "columns"]},
    )
    update(LGBMRegressor, "LightGbmLGBMRegressor", regressor_shapes, convert_lightgbm)


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


def column(onnx_type: str, values: pd.Series) -> np.ndarray:
    """One ``(n, 1)`` graph input from a normalised frame column."""
    from app.bundle.columns import numeric_column, string_column
    from app.bundle.manifest import MISSING_TOKEN

    if onnx_type == "tensor(string)":
        return string_column(values.tolist(), MISSING_TOKEN)
    return numeric_column(values.tolist())


@dataclass
class OnnxGraph:
    """A serialised graph whose inputs are graph names; its session opens on first use.

    Only the bytes are pickled, so fitted experts can travel between processes.
    """

    data: bytes
    output: str
    _session: ort.InferenceSession | None = field(default=None, repr=False)

    @property
    def session(self) -> ort.InferenceSession:
        if self._session is None:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.log_severity_level = 3
            self._session = ort.InferenceSession(
                self.data, sess_options=opts, providers=["CPUExecutionProvider"]
            )
        return self._session

    @property
    def inputs(self) -> list[str]:
        return [i.name for i in self.session.get_inputs()]

    def run(self, frame: pd.DataFrame, chunk_rows: int = CHUNK_ROWS) -> np.ndarray:
        """Float64 output for a frame keyed by graph name, computed ``chunk_rows`` at a time
        so that memory does not grow with the frame."""
        inputs = self.session.get_inputs()
        parts = []
        for start in range(0, max(len(frame), 1), chunk_rows):
            part = frame.iloc[start : start + chunk_rows]
            feed = {i.name: column(i.type, part[i.name]) for i in inputs}
            (out,) = self.session.run([self.output], feed)
            parts.append(np.asarray(out, dtype=np.float64))
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def __getstate__(self) -> dict[str, Any]:
        return {"data": self.data, "output": self.output, "_session": None}


def convert_sklearn_model(
    estimator: Any, names: list[str], inputs: list[str], dtypes: list[str], task: str, name: str
) -> OnnxGraph:
    """skl2onnx conversion with one (n, 1) input per feature, renamed to graph names.

    ``names`` are the columns the estimator was fitted with (graph names, or the user's
    for a pipeline that selects its own columns); ``inputs`` the graph names.
    """
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    register_converters()
    types = [
        (n, FloatTensorType([None, 1]) if d == "float" else StringTensorType([None, 1]))
        for n, d in zip(names, dtypes, strict=True)
    ]
    try:
        onx = convert_sklearn(
            estimator,
            name=name,
            initial_types=types,
            options=_options(estimator),
            target_opset=TARGET_OPSET,
        )
    except Exception as exc:  # skl2onnx raises many unrelated types
        raise ExportError(f"expert {name!r} cannot be converted to ONNX: {exc}") from exc
    declared = [i.name for i in onx.graph.input]
    if len(declared) != len(inputs):
        raise ExportError(
            f"expert {name!r}: its ONNX graph takes {len(declared)} inputs, expected {len(inputs)}"
        )
    # skl2onnx keeps the order of initial_types but may rewrite names it dislikes.
    onx = rename_inputs(onx, dict(zip(declared, inputs, strict=True)))
    # skl2onnx lists the opsets in a set's order, which follows the process's string hash
    # seed: sorted, the same fit gives the same bytes in any process (a Dask worker's too).
    opsets = sorted(onx.opset_import, key=lambda o: o.domain)
    del onx.opset_import[:]
    onx.opset_import.extend(opsets)
    outputs = [o.name for o in onx.graph.output]
    output = outputs[-1] if task == "classification" else outputs[0]
    return OnnxGraph(onx.SerializeToString(), output)


def _options(estimator: Any) -> dict[int, dict[str, Any]]:
    from sklearn.base import is_classifier
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

    steps = [s for _, s in estimator.steps] if hasattr(estimator, "steps") else [estimator]
    opts: dict[int, dict[str, Any]] = {}
    for step in steps:
        if isinstance(step, (KNeighborsClassifier, KNeighborsRegressor)):
            opts[id(step)] = {"optim": "cdist"}  # 13 ms to 0.08 ms a row
        if is_classifier(step):
            opts.setdefault(id(step), {})["zipmap"] = False
    return opts


def check_parity(
    graph: OnnxGraph,
    reference: Callable[[pd.DataFrame], np.ndarray],
    sample: pd.DataFrame,
    name: str,
    estimator: Any = None,
    estimator_input: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
) -> int:
    """Refuse a graph that disagrees with the fitted model; return the tied rows tolerated."""
    got = graph.run(sample).reshape(len(sample), -1)
    want = reference(sample).reshape(len(sample), -1)
    if got.shape != want.shape:
        raise ExportError(
            f"expert {name!r}: its ONNX graph outputs {got.shape[1]} values per row, the "
            f"fitted model {want.shape[1]}"
        )
    tol = PARITY_TOL * max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    bad = np.flatnonzero(np.abs(got - want).max(axis=1) > tol)
    if not bad.size:
        return 0
    if estimator is not None and estimator_input is not None:
        tied = tie_ambiguous_rows(estimator, estimator_input(sample.iloc[bad]))
        if tied is not None and tied.all():
            return int(bad.size)
    diff = float(np.abs(got - want).max())
    raise ExportError(
        f"expert {name!r}: its ONNX graph disagrees with the fitted model on {bad.size} of "
        f"{len(sample)} rows (max abs diff {diff:.3g}); refusing it. Known causes: kNN with "
        "weights='distance', a converter that does not match the estimator"
    )
