"""A model joining a served bundle from any source ``iabma train --experts`` reads: skops,
XGBoost, LightGBM, joblib (behind ``--trust-pickle``), an MLflow model, or an ONNX file
whose inputs are not one per column (a single tensor, renamed columns, a ZipMap). It is
read, converted and adapted as a pre-fitted expert is (training.experts), and checked
against its own predictions on the refit's rows before the gate is fitted."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from app.bundle.columns import Columns
from app.bundle.manifest import Manifest
from training.errors import ParameterError
from training.experts.fitting import PARITY_ROWS
from training.experts.models import OnnxExpertModel
from training.experts.sources import load_source
from training.experts.spec import Expert, Source
from training.features import FeatureSchema, frame_of


@dataclass(frozen=True)
class Converted:
    """The graph (inputs named by the bundle's graph names), its output, the source, and
    the parity check to run on the refit's columns."""

    model: onnx.ModelProto
    output: str
    source: Source
    check: Callable[[Columns], None]


def converted_expert(
    name: str, uri: str, text: str, manifest: Manifest, trust_pickle: bool
) -> Converted:
    """The model ``uri`` names, made a graph the bundle can serve; faults name
    ``--add-expert``."""
    try:
        model, source = load_source(uri, trust_pickle=trust_pickle, task=manifest.task)
        if isinstance(model, Path):
            model = str(model)
        expert = Expert(name, model, prefit=True, source=source, preprocess="none")
        schema = FeatureSchema(tuple(manifest.features), manifest.input_rule.normaliser())
        classes = manifest.target.classes
        n_classes = len(classes or [])
        built = OnnxExpertModel(expert, manifest.task, n_classes, schema, classes=classes)
    except ParameterError as exc:
        raise ParameterError("--add-expert", text, _why(exc)) from None

    def check(columns: Columns) -> None:
        """Refuse a conversion that disagrees with the model on the refit's rows."""
        if isinstance(model, str):
            return  # an ONNX file is its own reference
        sample = frame_of({k: v[:PARITY_ROWS] for k, v in columns.items()})
        try:
            OnnxExpertModel(
                expert, manifest.task, n_classes, schema, classes=classes, check_rows=sample
            )
        except ParameterError as exc:
            raise ParameterError("--add-expert", text, _why(exc)) from None

    graph = onnx.load_from_string(built.graph.data)
    return Converted(graph, built.graph.output, source, check)


def _why(exc: ParameterError) -> str:
    """The source's own fault, with what it named, cut to keep the line short."""
    said = str(exc)
    return "cannot join: " + (said if len(said) <= 300 else said[:297] + "...")
