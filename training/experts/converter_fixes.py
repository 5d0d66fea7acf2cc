"""Converters that replace skl2onnx's where its output differs from scikit-learn's.

Found by the parity check in :mod:`training.experts.onnx`, which stays on for every
expert: a wrong converter is refused there even if this module misses one.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _convert_lda(scope: Any, operator: Any, container: Any) -> None:
    """LinearDiscriminantAnalysis: skl2onnx applies softmax to ``[-d, d]`` for two classes,
    i.e. ``sigmoid(2 d)``, and a logistic for more; scikit-learn uses ``sigmoid(d)`` and a
    softmax respectively."""
    from skl2onnx.algebra.onnx_ops import (
        OnnxAdd,
        OnnxArgMax,
        OnnxConcat,
        OnnxMatMul,
        OnnxSigmoid,
        OnnxSoftmax,
        OnnxSub,
    )

    op = operator.raw_operator
    opv = container.target_opset
    coef = np.asarray(op.coef_, dtype=np.float32).T
    intercept = np.asarray(op.intercept_, dtype=np.float32).reshape(1, -1)
    decision = OnnxAdd(
        OnnxMatMul(operator.inputs[0], coef, op_version=opv), intercept, op_version=opv
    )
    out_proba, out_label = operator.outputs[1], operator.outputs[0]
    if len(op.classes_) == 2:
        p1 = OnnxSigmoid(decision, op_version=opv)
        p0 = OnnxSub(np.array([1.0], dtype=np.float32), p1, op_version=opv)
        proba = OnnxConcat(p0, p1, axis=1, op_version=opv, output_names=[out_proba])
    else:
        proba = OnnxSoftmax(decision, axis=1, op_version=opv, output_names=[out_proba])
    # Labels are the class codes 0..C-1: the experts are always fitted on codes here.
    label = OnnxArgMax(proba, axis=1, keepdims=0, op_version=opv, output_names=[out_label])
    proba.add_to(scope, container)
    label.add_to(scope, container)


def register_fixes() -> None:
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import calculate_linear_classifier_output_shapes
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    update_registered_converter(
        LinearDiscriminantAnalysis,
        "SklearnLinearDiscriminantAnalysis",
        calculate_linear_classifier_output_shapes,
        _convert_lda,
        options={"zipmap": [False, True], "nocl": [False, True]},
    )
