"""Regression experts that give their own per-row predictive variance.

``Expert(..., variance_output="variance")`` names an output of the expert's ONNX graph
holding its predictive VARIANCE per row (never an sd), shaped (n,) or (n, 1), in the units
of its mean output: the target's units squared when ``output_units="original"``. The
likelihood of that expert then uses ``sigma_j(x)``, its square root in standardised units,
cleaned by :func:`app.bundle.spread.clean_variance`; every other expert keeps its constant
``sigma_j``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pandas as pd

from app.bundle.spread import SD_FLOOR, clean_variance
from training.errors import DataWarning, ParameterError
from training.experts.onnx import OnnxGraph
from training.experts.spec import Expert


def check_variance_expert(expert: Expert, task: str) -> None:
    """Refuse a ``variance_output`` where it cannot apply, naming the expert."""
    if expert.variance_output is None:
        return
    if task != "regression":
        raise ParameterError(
            "variance_output",
            expert.variance_output,
            f"of expert {expert.name!r} applies to regression only",
        )
    if not expert.is_prefit:  # Expert.check refuses it first; kept for direct callers
        raise ParameterError(
            "variance_output",
            expert.variance_output,
            f"of expert {expert.name!r} needs an ONNX file or a pre-fitted model: an expert "
            "fitted here predicts its mean only",
        )


def variance_graph(expert: Expert, graph: OnnxGraph) -> OnnxGraph:
    """The expert's own graph (inputs already renamed), read at its variance output."""
    assert expert.variance_output is not None
    names = [o.name for o in onnx.load_from_string(graph.data).graph.output]
    if expert.variance_output not in names:
        raise ParameterError(
            "variance_output",
            expert.variance_output,
            f"of expert {expert.name!r} is not one of its graph's outputs {names}",
        )
    if expert.variance_output == graph.output:
        raise ParameterError(
            "variance_output",
            expert.variance_output,
            f"of expert {expert.name!r} is its mean output too",
        )
    return OnnxGraph(graph.data, expert.variance_output)


class ExpertVariance:
    """The per-row spreads of a fitted set of regression experts.

    Parameters
    ----------
    experts : sequence of Expert
        In the estimator's order.
    graphs : sequence of OnnxGraph or None
        Each fitted expert's graph (None where it has none).
    y_scale : float
        The target's std: a variance in original units is divided by its square.

    Attributes
    ----------
    graphs_ : dict of int to OnnxGraph
        The variance graph of each expert (by position) that declares one.
    """

    def __init__(self, experts: Sequence[Expert], graphs: Sequence[Any], y_scale: float) -> None:
        self.experts = experts
        self.graphs = graphs
        self.y_scale = y_scale

    def fit(self) -> ExpertVariance:
        self.graphs_: dict[int, OnnxGraph] = {}
        for j, (expert, graph) in enumerate(zip(self.experts, self.graphs, strict=True)):
            if expert.variance_output is None:
                continue
            if graph is None:
                raise ParameterError(
                    "variance_output",
                    expert.variance_output,
                    f"of expert {expert.name!r} needs its ONNX graph (to_onnx=True)",
                )
            self.graphs_[j] = variance_graph(expert, graph)
        return self

    @property
    def names(self) -> list[str]:
        """The experts with a per-row variance."""
        return [self.experts[j].name for j in self.graphs_]

    def variance(self, j: int, frame: pd.DataFrame) -> np.ndarray:
        """Expert ``j``'s raw variance on ``frame`` (n,), in standardised units."""
        expert = self.experts[j]
        out = self.graphs_[j].run(frame)
        if out.shape not in ((len(frame),), (len(frame), 1)):
            raise ParameterError(
                "variance_output",
                expert.variance_output,
                f"of expert {expert.name!r} gives shape {out.shape} for {len(frame)} rows; "
                "expected (n,) or (n, 1)",
            )
        out = out.reshape(-1)
        return out / self.y_scale**2 if expert.output_units == "original" else out

    def sigmas(
        self, frame: pd.DataFrame, constants: np.ndarray
    ) -> tuple[np.ndarray, dict[str, dict[str, int]]]:
        """(n, m) standardised sds on ``frame``: the constant ``sigma_j`` for experts
        without a variance; and per such expert, the rows floored and replaced."""
        out = np.tile(np.asarray(constants, dtype=np.float64), (len(frame), 1))
        counts: dict[str, dict[str, int]] = {}
        for j in self.graphs_:
            clean = clean_variance(self.variance(j, frame), float(constants[j]))
            out[:, j] = clean.sd
            counts[self.experts[j].name] = {"floored": clean.floored, "replaced": clean.replaced}
        return out, counts


def warn_cleaned(counts: dict[str, dict[str, int]], n: int) -> None:
    """Tell the user which experts' variances the rule changed, and on how many rows."""
    changed = {k: c for k, c in counts.items() if c["floored"] or c["replaced"]}
    for name, c in changed.items():
        warnings.warn(
            f"expert {name!r}: of {n} rows, {c['floored']} had a variance below the floor "
            f"(sd {SD_FLOOR} in standardised units; raised to it) and {c['replaced']} a NaN "
            "or infinite one (given the expert's constant spread instead)",
            DataWarning,
            stacklevel=3,
        )
