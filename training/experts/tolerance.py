"""How far an ONNX graph may drift from the model it stands for: a rule that follows
float32 arithmetic (docs/design.md, "Parity tolerance").

A graph sums its terms (trees, coefficients) in float32, in an order onnxruntime picks
per batch size. Each addition rounds by at most half an ulp of the running sum, so the
rounding error of a sum of ``T`` terms whose result has magnitude ``s`` is bounded by
``T * eps32 * s``, and behaves like ``sqrt(T) * eps32 * s`` when the rounding errors are
independent. The rule allows ``C`` such random walks, with a floor for outputs near 0::

    tol = max(FLOOR, C * eps32 * scale * sqrt(T))

``scale`` is the largest absolute value of the reference output (at least 1, so a
probability has scale 1), ``T`` the number of trees of the largest tree ensemble in the
graph, else the widest input a linear node reads, else 1.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

EPS32 = float(np.finfo(np.float32).eps)
FLOOR = 1e-5
C = 16.0
_TREES = ("TreeEnsembleRegressor", "TreeEnsembleClassifier", "TreeEnsemble")


def n_terms(model: onnx.ModelProto) -> int:
    """The most terms one output of ``model`` sums: trees of its largest ensemble, else
    coefficients of its widest linear node, else 1 (subgraphs are not searched)."""
    trees = 0
    for node in model.graph.node:
        if node.op_type in _TREES:
            for attr in node.attribute:
                if attr.name == "nodes_treeids":
                    trees = max(trees, len(set(attr.ints)))
                elif attr.name == "tree_roots":  # ai.onnx.ml opset 5's TreeEnsemble
                    trees = max(trees, len(attr.ints))
    if trees:
        return trees
    width = 1
    for init in model.graph.initializer:
        if len(init.dims) >= 1:
            width = max(width, int(init.dims[0]))
    return width


def parity_tolerance(reference: np.ndarray, terms: int) -> float:
    """The largest absolute difference allowed between a graph and ``reference``."""
    ref = np.asarray(reference, dtype=np.float64)
    scale = max(1.0, float(np.abs(ref).max())) if ref.size else 1.0
    return max(FLOOR, C * EPS32 * scale * math.sqrt(max(int(terms), 1)))
