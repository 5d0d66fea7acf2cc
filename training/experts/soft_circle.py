"""The simulation's "soft-circle" expert (paper appendix, "Candidate predictors").

``p(y=1 | x) = sigmoid(gamma * (R - ||x - c||))``: a smooth disc around ``c``. With
``fit_center=False`` it is the paper's fixed model (c = (0.8 t, 0), R = 1, gamma = 5); with
``fit_center=True`` the centre is the mean of the positive class and ``R``, ``gamma`` are
fitted by a one-dimensional logistic regression on the distance. An ONNX converter is
registered with skl2onnx so it exports like any other expert.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.linear_model import LogisticRegression


class SoftCircleClassifier(ClassifierMixin, BaseEstimator):
    def __init__(
        self,
        center: tuple[float, float] = (0.8, 0.0),
        radius: float = 1.0,
        gamma: float = 5.0,
        fit_center: bool = False,
    ) -> None:
        self.center = center
        self.radius = radius
        self.gamma = gamma
        self.fit_center = fit_center

    def fit(self, X: Any, y: Any) -> SoftCircleClassifier:
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y)
        self.classes_ = np.unique(y)
        if len(self.classes_) != 2 or X.shape[1] != 2:
            raise ValueError("SoftCircleClassifier needs two classes and two features")
        pos = y == self.classes_[1]
        if self.fit_center:
            self.center_ = X[pos].mean(axis=0)
            dist = np.linalg.norm(X - self.center_, axis=1, keepdims=True)
            lr = LogisticRegression(C=100.0).fit(dist, pos.astype(int))
            # sigmoid(a + b d) = sigmoid(gamma (R - d))  =>  gamma = -b, R = a / gamma
            self.gamma_ = float(max(-lr.coef_[0, 0], 1e-3))
            self.radius_ = float(lr.intercept_[0] / self.gamma_)
        else:
            self.center_ = np.asarray(self.center, dtype=np.float64)
            self.radius_, self.gamma_ = float(self.radius), float(self.gamma)
        self.n_features_in_ = 2
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        d = np.linalg.norm(X - self.center_, axis=1)
        p = 1.0 / (1.0 + np.exp(-self.gamma_ * (self.radius_ - d)))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[self.predict_proba(X).argmax(axis=1)]


def _shape(operator: Any) -> None:
    from skl2onnx.common.data_types import FloatTensorType, Int64TensorType

    n = operator.inputs[0].get_first_dimension()
    operator.outputs[0].type = Int64TensorType([n])
    operator.outputs[1].type = FloatTensorType([n, 2])


def _convert(scope: Any, operator: Any, container: Any) -> None:
    from skl2onnx.algebra.onnx_ops import (
        OnnxArgMax,
        OnnxConcat,
        OnnxMul,
        OnnxReduceSumSquare,
        OnnxSigmoid,
        OnnxSqrt,
        OnnxSub,
    )

    op = operator.raw_operator
    opv = container.target_opset
    x = operator.inputs[0]
    diff = OnnxSub(x, op.center_.astype(np.float32), op_version=opv)
    dist = OnnxSqrt(OnnxReduceSumSquare(diff, axes=[1], keepdims=1, op_version=opv), op_version=opv)
    logit = OnnxMul(
        OnnxSub(np.array([op.radius_], dtype=np.float32), dist, op_version=opv),
        np.array([op.gamma_], dtype=np.float32),
        op_version=opv,
    )
    p1 = OnnxSigmoid(logit, op_version=opv)
    p0 = OnnxSub(np.array([1.0], dtype=np.float32), p1, op_version=opv)
    proba = OnnxConcat(p0, p1, axis=1, op_version=opv, output_names=[operator.outputs[1]])
    label = OnnxArgMax(
        proba, axis=1, keepdims=0, op_version=opv, output_names=[operator.outputs[0]]
    )
    proba.add_to(scope, container)
    label.add_to(scope, container)


def register_converter() -> None:
    from skl2onnx import update_registered_converter

    update_registered_converter(
        SoftCircleClassifier,
        "IABMASoftCircleClassifier",
        _shape,
        _convert,
        options={"zipmap": [False, True], "nocl": [False, True]},
    )
