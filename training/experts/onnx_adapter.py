"""Fitting a foreign ONNX graph (a team's file, or a converted pre-fitted model) to the
bundle's input convention: one ``(n, 1)`` input per raw column, named by graph name.

A graph with a single tensor input ``(n, k)`` is wrapped: per-column inputs, each cast to
float32, are concatenated in a declared feature order and feed the graph's own input. A
graph with one input per column keeps its nodes; inputs renamed by a converter (skl2onnx
writes ``fixed acidity`` as ``fixed_acidity``) are matched back by their sanitised names.
A classifier's ZipMap output is dropped for the probability tensor that feeds it, and its
class order is mapped onto the task's. See docs/design.md, "Pre-fitted experts".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from training.errors import ParameterError
from training.experts.onnx import rename_inputs
from training.features import FeatureSchema

_LABEL_ATTRS = ("classlabels_strings", "classlabels_int64s")


def sanitised(name: str) -> str:
    """A name as converters rewrite it: lower case, every other character than a letter or
    a digit as ``_``."""
    return re.sub(r"[^0-9a-z]", "_", str(name).lower())


@dataclass(frozen=True)
class Adapted:
    """A graph in the bundle's convention: its inputs are graph names of ``features``."""

    model: onnx.ModelProto
    features: list[str]  # the user's column names it reads


def match_columns(names: Sequence[str], schema: FeatureSchema, what: str) -> list[str]:
    """The schema column (user name) each of ``names`` stands for.

    A name matches a column by the user's name, by its graph name, or, when exactly one
    column shares its sanitised form, by that; anything else is refused by name.
    """
    by_graph = {f.input: f.name for f in schema.features}
    by_clean: dict[str, list[str]] = {}
    for f in schema.features:
        by_clean.setdefault(sanitised(f.name), []).append(f.name)
    out, unmatched = [], []
    for n in names:
        if n in schema.names:
            out.append(n)
        elif n in by_graph:
            out.append(by_graph[n])
        elif len(by_clean.get(sanitised(n), [])) == 1:
            out.append(by_clean[sanitised(n)][0])
        else:
            unmatched.append(n)
    if unmatched:
        raise ParameterError(
            "features", unmatched, f"of {what} match no column of X (or more than one)"
        )
    if len(set(out)) != len(out):
        raise ParameterError("features", list(names), f"of {what} name one column twice")
    return out


def drop_zipmap(model: onnx.ModelProto) -> tuple[str | None, list[Any] | None]:
    """Remove a ZipMap node in place; return the tensor that fed it and its labels."""
    graph = model.graph
    for node in graph.node:
        if node.op_type != "ZipMap":
            continue
        labels = class_labels(node)
        graph.node.remove(node)
        for out in [o for o in graph.output if o.name in node.output]:
            graph.output.remove(out)
        graph.output.append(helper.make_tensor_value_info(node.input[0], TensorProto.FLOAT, None))
        return node.input[0], labels
    return None, None


def class_labels(node: onnx.NodeProto) -> list[Any] | None:
    for attr in node.attribute:
        if attr.name in _LABEL_ATTRS:
            values = helper.get_attribute_value(attr)
            return [v.decode() if isinstance(v, bytes) else int(v) for v in values]
    return None


def graph_labels(model: onnx.ModelProto) -> list[Any] | None:
    """The class labels a classifier node of the graph carries, if any."""
    for node in model.graph.node:
        labels = class_labels(node)
        if labels is not None:
            return labels
    return None


def _is_tensor_input(inp: onnx.ValueInfoProto, schema: FeatureSchema) -> bool:
    dims = inp.type.tensor_type.shape.dim
    width = dims[1].dim_value if len(dims) == 2 and dims[1].HasField("dim_value") else None
    if width is not None and width != 1:
        return True
    try:
        match_columns([inp.name], schema, "a graph input")
    except ParameterError:
        return True
    return False


def adapt(
    model: onnx.ModelProto,
    schema: FeatureSchema,
    order: Sequence[str] | None,
    what: str,
) -> Adapted:
    """``model`` taking the schema's graph names, one input per column.

    ``order`` is the feature order a single tensor input takes (declared, or the model's
    own feature names); every column of ``schema`` in order when None.
    """
    inputs = list(model.graph.input)
    if len(inputs) == 1 and _is_tensor_input(inputs[0], schema):
        names = match_columns(order if order is not None else schema.names, schema, what)
        return _wrap_tensor(model, schema, names, what)
    names = match_columns([i.name for i in inputs], schema, what)
    return _wrap_columns(model, schema, names)


def _elem(inp: onnx.ValueInfoProto) -> int:
    return int(inp.type.tensor_type.elem_type)


def _new_input(name: str, string: bool) -> onnx.ValueInfoProto:
    kind = TensorProto.STRING if string else TensorProto.FLOAT
    return helper.make_tensor_value_info(name, kind, [None, 1])


def _wrap_columns(model: onnx.ModelProto, schema: FeatureSchema, names: list[str]) -> Adapted:
    """Rename inputs that already take our types; cast into those that take others."""
    specs = {f.name: f for f in schema.features}
    renames: dict[str, str] = {}
    casts: list[onnx.NodeProto] = []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for inp, col in zip(list(out.graph.input), names, strict=True):
        f = specs[col]
        ours = TensorProto.STRING if f.dtype == "string" else TensorProto.FLOAT
        if _elem(inp) == ours:
            renames[inp.name] = f.input
            continue
        if ours == TensorProto.STRING:
            raise ParameterError("features", col, "is categorical; the graph reads it as numbers")
        casts.append(helper.make_node("Cast", [f.input], [inp.name], to=_elem(inp)))
        out.graph.input.remove(inp)
        out.graph.input.append(_new_input(f.input, False))
    if casts:
        _prepend(out, casts)
    out = rename_inputs(out, renames) if renames else out
    return Adapted(out, names)


def _wrap_tensor(
    model: onnx.ModelProto, schema: FeatureSchema, names: list[str], what: str
) -> Adapted:
    """Per-column float inputs -> Concat(axis=1) -> (Cast) -> the graph's one input."""
    (inp,) = model.graph.input
    dims = inp.type.tensor_type.shape.dim
    width = dims[1].dim_value if len(dims) == 2 and dims[1].HasField("dim_value") else None
    if width is not None and width != len(names):
        raise ParameterError(
            "features",
            names,
            f"are {len(names)} columns; {what} takes {width} in its one tensor input",
        )
    specs = {f.name: f for f in schema.features}
    text = [n for n in names if specs[n].dtype == "string"]
    if text:
        raise ParameterError("features", text, f"are categorical; {what} takes one numeric tensor")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.input.remove(out.graph.input[0])
    graph_names = [specs[n].input for n in names]
    for g in graph_names:
        out.graph.input.append(_new_input(g, False))
    joined = inp.name if _elem(inp) == TensorProto.FLOAT else f"{inp.name}__float"
    nodes = [helper.make_node("Concat", graph_names, [joined], axis=1)]
    if joined != inp.name:
        nodes.append(helper.make_node("Cast", [joined], [inp.name], to=_elem(inp)))
    _prepend(out, nodes)
    return Adapted(out, names)


def _prepend(model: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> None:
    """Put ``nodes`` first, keeping the graph topologically sorted."""
    rest = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes + rest)


def map_classes(
    model: onnx.ModelProto,
    output: str,
    labels: Sequence[Any],
    task_classes: Sequence[Any],
    what: str,
) -> str:
    """Add ``probabilities (n, k) @ P`` putting the model's classes in the task's order.

    A task class the model lacks gets probability 0 (clipped later); a model class the
    task lacks is refused. Returns the new output's name (``output`` if already in order).
    """
    task = [str(c) for c in task_classes]
    unknown = [c for c in labels if str(c) not in task]
    if unknown:
        raise ParameterError("classes", list(unknown), f"of {what} are not classes of the target")
    if [str(c) for c in labels] == task:
        return output
    P = np.zeros((len(labels), len(task)), dtype=np.float32)
    for i, c in enumerate(labels):
        P[i, task.index(str(c))] = 1.0
    name = f"{output}__task_order"
    model.graph.initializer.append(numpy_helper.from_array(P, f"{name}__map"))
    as_float = f"{output}__float"
    model.graph.node.extend(
        [
            helper.make_node("Cast", [output], [as_float], to=TensorProto.FLOAT),
            helper.make_node("MatMul", [as_float, f"{name}__map"], [name]),
        ]
    )
    model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return name
