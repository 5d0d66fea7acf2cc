"""The experts' per-row variances inside ``ensemble.onnx``.

Where some experts give their own predictive variance (:mod:`training.experts.variance`),
the fused graph builds an (n, m) matrix of standardised variances: the cleaned per-row
variance of those experts (the rule of :mod:`app.bundle.spread`, in graph ops), the
constant ``sigma_j ** 2`` of the others. The mixture's aleatoric part then uses it, and the
graph outputs ``expert_sds`` (n, m), the experts' own sds in the target's units.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.bundle.spread import SD_FLOOR
from training.onnx_graph import GraphBuilder

DOUBLE = 11  # TensorProto.DOUBLE
SPREAD_OUTPUT = "expert_sds"


def _row_variance(g: GraphBuilder, out: str, original: bool, scale: float, fallback: float) -> str:
    """One expert's variance output as an (n, 1) float64 column, cleaned, standardised."""
    v = g.cast(g.op("Reshape", [out, g.const(np.array([-1, 1], dtype=np.int64))]), DOUBLE)
    if original:
        v = g.op("Div", [v, g.const(scale * scale, f64=True)])
    bad = g.op("Or", [g.op("IsNaN", [v]), g.op("IsInf", [v])])
    floored = g.op("Max", [v, g.const(SD_FLOOR * SD_FLOOR, f64=True)])
    return g.op("Where", [bad, g.const(np.full((1, 1), fallback * fallback), f64=True), floored])


def variance_matrix(
    g: GraphBuilder,
    means: str,
    variances: Sequence[str | None],
    originals: Sequence[bool],
    sigmas: Sequence[float],
    scale: float,
) -> str:
    """(n, m) standardised variances: per-row where ``variances[j]`` names an output,
    ``sigmas[j] ** 2`` (broadcast to the rows of ``means``) elsewhere."""
    rows = g.op("Shape", [means], start=0, end=1)
    columns = []
    for out, original, sigma in zip(variances, originals, sigmas, strict=True):
        if out is None:
            const = g.const(np.full((1, 1), sigma * sigma), f64=True)
            shape = g.op("Concat", [rows, g.const(np.array([1], dtype=np.int64))], axis=0)
            columns.append(g.op("Expand", [const, shape]))
        else:
            columns.append(_row_variance(g, out, original, scale, sigma))
    return g.op("Concat", columns, axis=1)


def add_spread_output(g: GraphBuilder, variance: str, scale: float) -> None:
    """Declare ``expert_sds``: the experts' own sds (before the temperature), target units."""
    sds = g.op("Mul", [g.op("Sqrt", [variance]), g.const(scale, f64=True)])
    g.add_output(SPREAD_OUTPUT, sds, DOUBLE)
