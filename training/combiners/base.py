"""The interface every combiner shares with IA-BMA's gate.

A combiner learns weights ``alpha(x)`` on the simplex from the gate features ``Z`` and the
experts' :class:`~training.evidence.Evidence`. Every method mixes the same experts through
the same code (:mod:`app.bundle.mixture`); only the weights differ. Each one can write
itself as ONNX operators, so any combiner can be a bundle's gate.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator

from training.errors import NotFittedError, ParameterError
from training.evidence import Evidence
from training.onnx_graph import GraphBuilder


class Combiner(BaseEstimator, ABC):
    """``fit(Z, evidence)`` returns self; ``weights(Z)`` is ``(n, m)``, rows on the simplex."""

    #: The name used by ``--combiner`` and in ``results.json``.
    name: ClassVar[str]

    @abstractmethod
    def fit(self, Z: np.ndarray, evidence: Evidence) -> Combiner: ...

    @abstractmethod
    def weights(self, Z: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def to_onnx(self, g: GraphBuilder, z: str) -> str:
        """Append nodes mapping the float32 ``(n, d)`` tensor ``z`` to the weights tensor."""

    def manifest_params(self) -> dict[str, Any]:
        """JSON-safe hyperparameters recorded in the bundle's manifest."""
        return {
            k: v
            for k, v in self.get_params(deep=False).items()
            if isinstance(v, (int, float, str, bool, type(None), list, tuple))
        }

    def _check_fitted(self, attr: str) -> None:
        if not hasattr(self, attr):
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit first")


def check_fit_inputs(Z: np.ndarray, evidence: Evidence) -> np.ndarray:
    Z = np.asarray(Z, dtype=np.float32)
    if Z.ndim != 2 or Z.shape[0] != evidence.n:
        raise ParameterError("Z", Z.shape, f"must be 2-D with {evidence.n} rows, like the evidence")
    if evidence.m < 2:
        raise ParameterError("experts", evidence.m, "must be at least 2 to combine")
    if not np.isfinite(Z).all():
        raise ParameterError("Z", "non-finite values", "must be finite (the encoder imputes)")
    return Z


def check_features(Z: np.ndarray, n_features: int) -> np.ndarray:
    """``Z`` as a 2-D float32 array of width ``n_features``, the width seen in ``fit``."""
    Z = np.asarray(Z, dtype=np.float32)
    if Z.ndim != 2 or Z.shape[1] != n_features:
        raise ParameterError("Z", Z.shape, f"must be 2-D with {n_features} columns, as in fit")
    return Z


def constant_weights(n: int, w: np.ndarray) -> np.ndarray:
    return np.broadcast_to(np.asarray(w, dtype=np.float64), (n, len(w))).copy()


def constant_weights_onnx(g: GraphBuilder, z: str, w: np.ndarray) -> str:
    """``(n, m)`` copies of ``w``: zeros of shape ``(n, 1)`` taken from ``z``, plus ``w``."""
    zero_col = g.op(
        "Mul",
        [
            g.op("ReduceSum", [z, g.const(np.array([1], dtype=np.int64))], keepdims=1),
            g.const(np.float32(0.0)),
        ],
    )
    return g.op("Add", [zero_col, g.const(np.asarray(w, dtype=np.float32)[None, :])])


class UniformCombiner(Combiner):
    """``alpha_j(x) = 1/m`` everywhere: the plain average of the experts."""

    name = "uniform"

    def fit(self, Z: np.ndarray, evidence: Evidence) -> UniformCombiner:
        self.n_features_in_ = check_fit_inputs(Z, evidence).shape[1]
        self.weights_ = np.full(evidence.m, 1.0 / evidence.m)
        return self

    def weights(self, Z: np.ndarray) -> np.ndarray:
        self._check_fitted("weights_")
        return constant_weights(len(check_features(Z, self.n_features_in_)), self.weights_)

    def to_onnx(self, g: GraphBuilder, z: str) -> str:
        self._check_fitted("weights_")
        return constant_weights_onnx(g, z, self.weights_)
