"""The gate's view of the raw features: median-imputed, standardised, one-hot encoded.

:class:`GateEncoder` computes this in numpy for training and writes the same steps as ONNX
operators in front of the gate, so the exported gate takes raw features.
"""

from __future__ import annotations

import numpy as np

from app.bundle.columns import Columns
from training.errors import NotFittedError
from training.features import FeatureSchema
from training.onnx_graph import FLOAT, STRING, GraphBuilder

MAX_CATEGORIES = 50


class GateEncoder:
    """Fit on training columns; ``transform`` gives float32 ``Z``; ``to_onnx`` the graph.

    Parameters
    ----------
    schema : FeatureSchema
        The gate's raw features, in order.
    max_categories : int
        Keep at most this many of a categorical column's most frequent levels; the rest
        (and levels unseen in training) encode as all zeros.
    """

    def __init__(self, schema: FeatureSchema, max_categories: int = MAX_CATEGORIES) -> None:
        self.schema = schema
        self.max_categories = max_categories

    def fit(self, columns: Columns) -> GateEncoder:
        num = self.schema.numeric
        if num:
            x = np.hstack([columns[n] for n in num]).astype(np.float64)
            med = np.nanmedian(np.where(np.isnan(x).all(axis=0), 0.0, x), axis=0)
            filled = np.where(np.isnan(x), med, x)
            std = filled.std(axis=0)
            self.median_ = med.astype(np.float32)
            self.mean_ = filled.mean(axis=0).astype(np.float32)
            self.scale_ = np.where(std > 1e-12, std, 1.0).astype(np.float32)
        self.levels_: dict[str, list[str]] = {}
        for name in self.schema.categorical:
            values, counts = np.unique(columns[name].ravel().astype(str), return_counts=True)
            order = np.lexsort((values, -counts))[: self.max_categories]
            self.levels_[name] = sorted(values[order].tolist())
        self.n_features_out_ = len(num) + sum(len(v) for v in self.levels_.values())
        return self

    def transform(self, columns: Columns) -> np.ndarray:
        if not hasattr(self, "n_features_out_"):
            raise NotFittedError("GateEncoder.transform called before fit")
        parts = []
        if self.schema.numeric:
            x = np.hstack([columns[n] for n in self.schema.numeric]).astype(np.float32)
            x = np.where(np.isnan(x), self.median_, x)
            parts.append((x - self.mean_) / self.scale_)
        for name, levels in self.levels_.items():
            col = columns[name].ravel().astype(str)
            parts.append((col[:, None] == np.asarray(levels)[None, :]).astype(np.float32))
        return np.hstack(parts).astype(np.float32)

    def to_onnx(self, g: GraphBuilder) -> str:
        """Declare one graph input per raw feature and return the name of ``Z``."""
        parts = []
        if self.schema.numeric:
            ins = [g.add_input(n, FLOAT) for n in self.schema.numeric]
            x = g.op("Concat", ins, axis=1) if len(ins) > 1 else ins[0]
            x = g.op("Where", [g.op("IsNaN", [x]), g.const(self.median_[None, :]), x])
            x = g.op("Sub", [x, g.const(self.mean_[None, :])])
            parts.append(g.op("Div", [x, g.const(self.scale_[None, :])]))
        for name, levels in self.levels_.items():
            col = g.add_input(name, STRING)
            codes = g.op(
                "LabelEncoder",
                [col],
                domain="ai.onnx.ml",
                keys_strings=levels,
                values_int64s=list(range(len(levels))),
                default_int64=-1,
            )
            hot = g.op("Equal", [codes, g.const(np.arange(len(levels), dtype=np.int64)[None, :])])
            parts.append(g.op("Cast", [hot], to=FLOAT))
        return g.op("Concat", parts, axis=1) if len(parts) > 1 else parts[0]
