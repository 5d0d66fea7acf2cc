"""A small builder for hand-written ONNX graphs (the gates' preprocessing and combiners).

Writing these few operators directly keeps the gate graph exact and small: the same
float32 arrays that the in-memory gate multiplies are the graph's initializers.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
ML_OPSET = 3
FLOAT = TensorProto.FLOAT
STRING = TensorProto.STRING
INT64 = TensorProto.INT64


class GraphBuilder:
    """Accumulates nodes, initializers, inputs and outputs; names are made unique."""

    def __init__(self, name: str, prefix: str = "") -> None:
        self.name = name
        self.prefix = prefix  # keeps this builder's names apart from graphs merged in
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.sparse_initializers: list[onnx.SparseTensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.opsets = {"": OPSET, "ai.onnx.ml": ML_OPSET}
        self.ir_version = 8
        self._input_types: dict[str, int] = {}
        self._ids = itertools.count()

    def fresh(self, hint: str) -> str:
        return f"{self.prefix}{hint}_{next(self._ids)}"

    def add_input(self, name: str, elem_type: int, width: int = 1) -> str:
        """Declare a graph input once; a second declaration must agree with the first."""
        known = self._input_types.get(name)
        if known is None:
            self.inputs.append(helper.make_tensor_value_info(name, elem_type, [None, width]))
            self._input_types[name] = elem_type
        elif known != elem_type:
            raise ValueError(f"graph input {name!r} declared with two element types")
        return name

    def add_output(self, name: str, source: str, elem_type: int = FLOAT, rank: int = 2) -> str:
        self.op("Identity", [source], out=name)
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, [None] * rank))
        return name

    def require_opset(self, domain: str, version: int) -> None:
        self.opsets[domain] = max(self.opsets.get(domain, version), version)

    def const(
        self,
        value: np.ndarray | np.number | float | int | Sequence[float],
        hint: str = "c",
        *,
        f64: bool = False,
    ) -> str:
        """An initializer; floats are stored as float32 unless ``f64`` asks for float64."""
        arr = np.asarray(value)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float64 if f64 else np.float32)
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(arr, name))
        return name

    def op(
        self,
        op_type: str,
        inputs: Sequence[str],
        *,
        out: str | None = None,
        domain: str = "",
        **attrs: Any,
    ) -> str:
        out = out or self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], domain=domain, **attrs))
        return out

    def op_multi(
        self, op_type: str, inputs: Sequence[str], n_outputs: int, **attrs: Any
    ) -> list[str]:
        """A node with several outputs (TopK, say)."""
        outs = [self.fresh(op_type.lower()) for _ in range(n_outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs

    def cast(self, x: str, to: int = TensorProto.DOUBLE) -> str:
        return self.op("Cast", [x], to=to)

    def softmax_rows(self, logits: str) -> str:
        return self.op("Softmax", [logits], axis=1)

    def build(self) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            self.name,
            self.inputs,
            self.outputs,
            initializer=self.initializers,
            sparse_initializer=self.sparse_initializers,
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid(d, v) for d, v in self.opsets.items()],
            producer_name="iabma",
        )
        model.ir_version = self.ir_version
        onnx.checker.check_model(model, full_check=True)
        return model


def dense_layers(g: GraphBuilder, x: str, layers: Sequence[tuple[np.ndarray, np.ndarray]]) -> str:
    """``ReLU(x W + b)`` for every layer but the last, which stays linear (the logits)."""
    for i, (w, b) in enumerate(layers):
        x = g.op("Add", [g.op("MatMul", [x, g.const(w, "W")]), g.const(b.reshape(1, -1), "b")])
        if i < len(layers) - 1:
            x = g.op("Relu", [x])
    return x


def mean_softmax(
    g: GraphBuilder, x: str, nets: Sequence[Sequence[tuple[np.ndarray, np.ndarray]]]
) -> str:
    """The mean over ``nets`` (networks of one shape) of ``softmax(dense_layers(x))``.

    The first layers run as one MatMul; the rest as batched MatMuls over a leading
    network axis, so the graph has the same dozen nodes however many networks it holds.
    """
    if len(nets) == 1:
        return g.softmax_rows(dense_layers(g, x, nets[0]))
    k = len(nets)
    w0 = np.concatenate([net[0][0] for net in nets], axis=1)
    b0 = np.concatenate([net[0][1] for net in nets]).reshape(1, -1)
    h = g.op("Add", [g.op("MatMul", [x, g.const(w0, "W")]), g.const(b0, "b")])
    width = nets[0][0][0].shape[1]
    h = g.op("Reshape", [h, g.const(np.array([0, k, width], dtype=np.int64))])
    h = g.op("Transpose", [h], perm=[1, 0, 2])  # (networks, rows, width)
    for i in range(1, len(nets[0])):
        h = g.op("Relu", [h])
        w = np.stack([net[i][0] for net in nets])
        b = np.stack([net[i][1] for net in nets])[:, None, :]
        h = g.op("Add", [g.op("MatMul", [h, g.const(w, "W")]), g.const(b, "b")])
    return g.op("ReduceMean", [g.op("Softmax", [h], axis=-1)], axes=[0], keepdims=0)
