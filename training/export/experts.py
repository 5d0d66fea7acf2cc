"""Writing the experts' ONNX graphs into a bundle.

The graphs were made, and checked against the fitted estimators, when the experts were
fitted (:mod:`training.experts.onnx`); the in-memory estimator predicts through these very
graphs, so the bundle serves exactly what was evaluated.
"""

from __future__ import annotations

from pathlib import Path

from training.errors import ExportError
from training.experts.models import OnnxExpertModel, SklearnExpertModel


def write_expert(
    model: SklearnExpertModel | OnnxExpertModel, name: str, path: Path
) -> tuple[str, list[str]]:
    """Write ``model``'s graph at ``path``; return (output name, graph input names)."""
    if model.graph is None:
        raise ExportError(
            f"expert {name!r} has no ONNX graph: it was fitted with to_onnx=False, which is "
            "for benchmarks only"
        )
    path.write_bytes(model.graph.data)
    return model.graph.output, model.graph.inputs
