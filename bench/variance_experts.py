"""Regression models that know their own predictive variance, written as ONNX files with
two outputs: ``mean`` and ``variance`` (the target's units, squared for the variance).

Trained and exported as a team would, without the product: scikit-learn, skl2onnx and
onnx only, one ``(n, 1)`` float input per column named as the column. Used by
bench/per_row_variance.py and by the tests of per-row variance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, compose, helper, numpy_helper
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import BayesianRidge

OPSET = 17


def _inputs(columns: Sequence[str]) -> list[onnx.ValueInfoProto]:
    return [helper.make_tensor_value_info(c, TensorProto.FLOAT, [None, 1]) for c in columns]


def _output(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [None, 1])


def bayesian_ridge_onnx(model: BayesianRidge, columns: Sequence[str]) -> onnx.ModelProto:
    """``model.predict(X, return_std=True)`` as a graph: ``mean = X w + b`` and
    ``variance = 1 / alpha + rowsum((Xc Sigma) * Xc)`` with ``Xc = X - X_offset_``, its
    std squared."""
    f32 = lambda a: numpy_helper.from_array(np.asarray(a, dtype=np.float32), None)  # noqa: E731
    inits = []
    for name, value in {
        "w": np.asarray(model.coef_).reshape(-1, 1),
        "b": np.array([[model.intercept_]]),
        "sigma": model.sigma_,
        "offset": np.asarray(model.X_offset_).reshape(1, -1),
        "noise": np.array([[1.0 / model.alpha_]]),
    }.items():
        t = f32(value)
        t.name = name
        inits.append(t)
    one = numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1")
    nodes = [
        helper.make_node("Concat", list(columns), ["X"], axis=1),
        helper.make_node("MatMul", ["X", "w"], ["Xw"]),
        helper.make_node("Add", ["Xw", "b"], ["mean"]),
        helper.make_node("Sub", ["X", "offset"], ["Xc"]),
        helper.make_node("MatMul", ["Xc", "sigma"], ["XS"]),
        helper.make_node("Mul", ["XS", "Xc"], ["XSX"]),
        helper.make_node("ReduceSum", ["XSX", "axis1"], ["data_var"], keepdims=1),
        helper.make_node("Add", ["data_var", "noise"], ["variance"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bayesian_ridge",
        _inputs(columns),
        [_output("mean"), _output("variance")],
        [*inits, one],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def fit_heteroscedastic_forest(
    X: np.ndarray, y: np.ndarray, seed: int, n_estimators: int = 60
) -> tuple[RandomForestRegressor, RandomForestRegressor]:
    """A forest for the mean, and a second forest for the variance: fitted to the first
    one's squared out-of-bag residuals, so it predicts ``E[(y - mean)^2 | x]``."""
    mean = RandomForestRegressor(
        n_estimators=n_estimators, min_samples_leaf=5, oob_score=True, random_state=seed, n_jobs=1
    ).fit(X, y)
    resid2 = (y - mean.oob_prediction_) ** 2
    variance = RandomForestRegressor(
        n_estimators=n_estimators // 2, min_samples_leaf=40, random_state=seed + 1, n_jobs=1
    ).fit(X, resid2)
    return mean, variance


def _convert(model: RandomForestRegressor, columns: Sequence[str]) -> onnx.ModelProto:
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    types = [("X", FloatTensorType([None, len(columns)]))]
    return convert_sklearn(model, initial_types=types, target_opset={"": OPSET, "ai.onnx.ml": 3})


def forest_onnx(
    mean: RandomForestRegressor, variance: RandomForestRegressor, columns: Sequence[str]
) -> onnx.ModelProto:
    """Both forests in one graph over the same inputs: outputs ``mean`` and ``variance``."""
    m, v = _convert(mean, columns), _convert(variance, columns)
    gm = compose.add_prefix_graph(m.graph, "m_", rename_inputs=False)
    gv = compose.add_prefix_graph(v.graph, "v_", rename_inputs=False)
    nodes = [
        helper.make_node("Concat", list(columns), ["X"], axis=1),
        *gm.node,
        *gv.node,
        helper.make_node("Identity", [gm.output[0].name], ["mean"]),
        helper.make_node("Identity", [gv.output[0].name], ["variance"]),
    ]
    graph = helper.make_graph(
        nodes,
        "forest_mean_variance",
        _inputs(columns),
        [_output("mean"), _output("variance")],
        [*gm.initializer, *gv.initializer],
    )
    return helper.make_model(graph, opset_imports=list(m.opset_import))
