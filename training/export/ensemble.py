"""``ensemble.onnx``: every expert, the gate, the mixture and its uncertainty in one graph.

Outputs: ``weights`` (n, m), ``uncertainty`` (n, 4), and ``probabilities`` (n, C) with
``expert_probabilities`` (n, m, C), or ``mean`` and ``std`` (n,) with ``expert_means``
(n, m), and ``expert_sds`` (n, m) where some experts give their own per-row variance
(:mod:`training.export.spread`). The arithmetic: docs/design.md, "The fused graph".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, compose, version_converter

from app.bundle.manifest import FeatureSpec
from app.bundle.mixture import PROBA_EPS, clip_proba, mix_classification, mix_regression
from training.errors import ExportError
from training.experts.tolerance import n_terms, parity_tolerance
from training.export.spread import SPREAD_OUTPUT, add_spread_output, variance_matrix
from training.onnx_graph import FLOAT, OPSET, STRING, GraphBuilder

DOUBLE = TensorProto.DOUBLE
ENSEMBLE_TOL = 1e-5
CLASSIFICATION_OUTPUTS = ("weights", "uncertainty", "probabilities", "expert_probabilities")
REGRESSION_OUTPUTS = ("weights", "uncertainty", "mean", "std", "expert_means")


@dataclass(frozen=True)
class ExpertGraph:
    name: str
    model: onnx.ModelProto
    output: str
    original_units: bool = False  # regression: predicts the target's units, not standardised
    variance_output: str | None = None  # regression: its per-row predictive variance


@dataclass(frozen=True)
class Target:
    task: str
    n_classes: int = 0
    mean: float = 0.0
    scale: float = 1.0
    sigmas: tuple[float, ...] = ()


def add_expert(g: GraphBuilder, j: int, expert: ExpertGraph, features: Mapping[str, int]) -> str:
    """Copy ``expert``'s graph into ``g`` and return the name of its output there."""
    model = expert.model
    default = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), OPSET)
    if default != OPSET:
        try:
            model = version_converter.convert_version(model, OPSET)
        except Exception as exc:  # the converter raises many types
            raise ExportError(
                f"expert {expert.name!r}: its ONNX graph (opset {default}) cannot be brought to "
                f"opset {OPSET} to join the ensemble: {exc}"
            ) from exc
    for o in model.opset_import:
        if o.domain not in ("", "ai.onnx"):
            g.require_opset(o.domain, o.version)
    prefix = f"e{j}_"
    graph = compose.add_prefix_graph(model.graph, prefix, rename_inputs=False)
    casts: dict[str, str] = {}
    for inp in graph.input:
        if inp.name not in features:
            raise ExportError(f"expert {expert.name!r} reads {inp.name!r}, not a feature input")
        wanted = inp.type.tensor_type.elem_type
        if wanted != features[inp.name]:
            # A user's graph may take doubles (or ints): convert from the shared float input.
            casts[inp.name] = g.op("Cast", [inp.name], to=wanted, out=f"{prefix}cast_{inp.name}")
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in casts:
                node.input[i] = casts[name]
    g.nodes.extend(graph.node)
    g.initializers.extend(graph.initializer)
    g.sparse_initializers.extend(graph.sparse_initializer)
    g.ir_version = max(g.ir_version, model.ir_version)
    return prefix + expert.output


def _sum(g: GraphBuilder, x: str, axis: int, keepdims: int = 0) -> str:
    return g.op("ReduceSum", [x, g.const(np.array([axis], dtype=np.int64))], keepdims=keepdims)


def _unsqueeze(g: GraphBuilder, x: str, axis: int) -> str:
    return g.op("Unsqueeze", [x, g.const(np.array([axis], dtype=np.int64))])


def _entropy(g: GraphBuilder, p: str, axis: int) -> str:
    """``-sum p log p`` for strictly positive ``p``."""
    return g.op("Neg", [_sum(g, g.op("Mul", [p, g.op("Log", [p])]), axis)])


def _selection(g: GraphBuilder, w: str, m: int) -> str:
    """Entropy of the weights over ``log m``; a weight of exactly 0 contributes 0."""
    safe = g.op("Max", [w, g.const(1e-300, f64=True)])
    h = g.op("Neg", [_sum(g, g.op("Mul", [w, g.op("Log", [safe])]), 1)])
    return g.op("Div", [h, g.const(math.log(m), f64=True)])


def _column(g: GraphBuilder, *vectors: str) -> str:
    """(n,) vectors side by side as an (n, k) matrix."""
    return g.op("Concat", [_unsqueeze(g, v, 1) for v in vectors], axis=1)


def mixture_outputs(
    g: GraphBuilder,
    weights: str,
    experts: Sequence[tuple[str, bool]],
    target: Target,
    temperature: float,
    variances: Sequence[str | None] = (),
) -> None:
    """Append the mixture, in float64, and declare the named outputs.

    ``experts`` holds each expert's output name and whether it is in original units;
    ``variances`` the name of each one's per-row variance output, or None (regression).
    """
    m = len(experts)
    w = g.cast(weights, DOUBLE)
    w = g.op("Div", [w, _sum(g, w, 1, keepdims=1)])  # float32 softmax rows sum to 1 +- 1e-7
    g.add_output("weights", w, DOUBLE)
    if target.task == "classification":
        eps, one = g.const(PROBA_EPS, f64=True), g.const(1.0 - PROBA_EPS, f64=True)
        probs = []
        for out, _ in experts:
            p = g.op("Clip", [g.cast(out, DOUBLE), eps, one])
            probs.append(_unsqueeze(g, g.op("Div", [p, _sum(g, p, 1, keepdims=1)]), 1))
        P = g.op("Concat", probs, axis=1)  # (n, m, C)
        g.add_output("expert_probabilities", P, DOUBLE, rank=3)
        if temperature != 1.0:
            scaled = g.op("Mul", [g.op("Log", [P]), g.const(1.0 / temperature, f64=True)])
            P = g.op("Softmax", [scaled], axis=-1)
        mixed = _sum(g, g.op("Mul", [_unsqueeze(g, w, 2), P]), 1)
        mixed = g.op("Div", [mixed, _sum(g, mixed, 1, keepdims=1)])
        g.add_output("probabilities", mixed, DOUBLE)
        total = _entropy(g, mixed, 1)
        aleatoric = _sum(g, g.op("Mul", [w, _entropy(g, P, 2)]), 1)
        epistemic = g.op("Sub", [total, aleatoric])
        split = _column(g, total, aleatoric, epistemic, _selection(g, w, m))
        g.add_output("uncertainty", split, DOUBLE)
        return
    means = []
    for out, original in experts:
        mu = g.cast(g.op("Reshape", [out, g.const(np.array([-1, 1], dtype=np.int64))]), DOUBLE)
        if original:
            centred = g.op("Sub", [mu, g.const(target.mean, f64=True)])
            mu = g.op("Div", [centred, g.const(target.scale, f64=True)])
        means.append(mu)
    M = g.op("Concat", means, axis=1)  # (n, m), standardised units
    mean = _sum(g, g.op("Mul", [w, M]), 1, keepdims=1)
    if any(v is not None for v in variances):
        originals = [original for _, original in experts]
        S2 = variance_matrix(g, M, variances, originals, target.sigmas, target.scale)
        add_spread_output(g, S2, target.scale)
        tempered = g.op("Mul", [S2, g.const(temperature**2, f64=True)])
        aleatoric = _sum(g, g.op("Mul", [w, tempered]), 1)
    else:
        s2 = (np.asarray(target.sigmas, dtype=np.float64) * temperature) ** 2
        aleatoric = _sum(g, g.op("Mul", [w, g.const(s2[None, :], f64=True)]), 1)
    dev = g.op("Sub", [M, mean])
    epistemic = _sum(g, g.op("Mul", [w, g.op("Mul", [dev, dev])]), 1)
    variance = g.op("Add", [aleatoric, epistemic])
    a, b = g.const(target.mean, f64=True), g.const(target.scale, f64=True)
    b2 = g.const(target.scale**2, f64=True)
    g.add_output("mean", g.op("Add", [g.op("Mul", [_sum(g, mean, 1), b]), a]), DOUBLE, rank=1)
    g.add_output("std", g.op("Mul", [g.op("Sqrt", [variance]), b]), DOUBLE, rank=1)
    g.add_output("expert_means", g.op("Add", [g.op("Mul", [M, b]), a]), DOUBLE)
    split = _column(
        g,
        g.op("Mul", [variance, b2]),
        g.op("Mul", [aleatoric, b2]),
        g.op("Mul", [epistemic, b2]),
        _selection(g, w, m),
    )
    g.add_output("uncertainty", split, DOUBLE)


def build_ensemble(
    features: Sequence[FeatureSpec],
    encoder: Any,
    combiner: Any,
    experts: Sequence[ExpertGraph],
    target: Target,
    temperature: float,
) -> onnx.ModelProto:
    """The one graph a bundle serves: raw features in, the answer out."""
    g = GraphBuilder("iabma_ensemble", prefix="g_")
    types = {f.input: FLOAT if f.dtype == "float" else STRING for f in features}
    for name, elem_type in types.items():
        g.add_input(name, elem_type)
    weights = combiner.to_onnx(g, encoder.to_onnx(g))
    outputs = [(add_expert(g, j, e, types), e.original_units) for j, e in enumerate(experts)]
    # add_expert prefixes every name in expert j's graph with f"e{j}_".
    variances = [
        None if e.variance_output is None else f"e{j}_{e.variance_output}"
        for j, e in enumerate(experts)
    ]
    mixture_outputs(g, weights, outputs, target, temperature, variances)
    try:
        return g.build()
    except Exception as exc:  # onnx.checker raises its own error types
        raise ExportError(f"the fused ensemble graph does not validate: {exc}") from exc


def estimator_outputs(est: Any, X: Any) -> dict[str, np.ndarray]:
    """The in-memory estimator's answer to ``X``, under the fused graph's output names."""
    columns = est.columns(X)
    w = est._weights(columns)
    outputs = est._outputs(columns)
    if est._task == "classification":
        mix = mix_classification(w, outputs, est.mixture_temperature_)
        return {
            "weights": w,
            "probabilities": mix.proba,
            "expert_probabilities": clip_proba(outputs),
            "uncertainty": np.column_stack(
                [mix.total, mix.aleatoric, mix.epistemic, mix.selection]
            ),
        }
    sigmas = est._sigmas(columns)
    reg = mix_regression(w, outputs, sigmas, est.mixture_temperature_)
    a, b = est.y_mean_, est.y_scale_
    spread = {SPREAD_OUTPUT: sigmas * b} if sigmas.ndim == 2 else {}
    return {
        **spread,
        "weights": w,
        "mean": reg.mean * b + a,
        "std": np.sqrt(reg.variance) * b,
        "expert_means": reg.means * b + a,
        "uncertainty": np.column_stack(
            [reg.variance * b * b, reg.aleatoric * b * b, reg.epistemic * b * b, reg.selection]
        ),
    }


def write_ensemble(est: Any, path: Path, X_check: Any, units: Sequence[bool]) -> float:
    """Build, write and check ``ensemble.onnx``; return its largest difference.

    Checked against the in-memory estimator (whose experts run the same expert graphs):
    every output within ``max(ENSEMBLE_TOL, parity_tolerance(...))`` (the float32 rule of
    :mod:`training.experts.tolerance`), regression outputs in units of the target's scale.
    """
    variance = [e.variance_output for e in est.experts] if est._task == "regression" else []
    experts = [
        ExpertGraph(
            name,
            onnx.load_from_string(m.graph.data),
            m.graph.output,
            original,
            variance[j] if variance else None,
        )
        for j, (name, m, original) in enumerate(
            zip(est.expert_names_, est.experts_.models_, units, strict=True)
        )
    ]
    if est._task == "classification":
        target = Target("classification", n_classes=len(est.classes_))
    else:
        sigmas = tuple(float(s) for s in est.sigmas_)
        target = Target("regression", mean=est.y_mean_, scale=est.y_scale_, sigmas=sigmas)
    model = build_ensemble(
        est.schema_.features, est.encoder_, est.combiner_, experts, target, est.mixture_temperature_
    )
    path.write_bytes(model.SerializeToString())
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    columns = est.columns(X_check)
    got = dict(
        zip(
            [o.name for o in sess.get_outputs()],
            sess.run(None, {i.name: columns[i.name] for i in sess.get_inputs()}),
            strict=True,
        )
    )
    want = estimator_outputs(est, X_check)
    # Regression is compared in standardised units (variances in squared ones).
    b = 1.0 if est._task == "classification" else float(est.y_scale_)
    scale_of = {
        "mean": b,
        "std": b,
        "expert_means": b,
        SPREAD_OUTPUT: b,
        "uncertainty": np.array([b * b] * 3 + [1.0]),
    }
    # The experts' float32 sums move with onnxruntime's batch split (a 300-tree forest by
    # 2e-5): the tolerance follows their size (training.experts.tolerance).
    terms = max(n_terms(e.model) for e in experts)
    worst = 0.0
    for name, value in want.items():
        diff = float(np.max(np.abs(np.asarray(got[name]) - value) / scale_of.get(name, 1.0)))
        scaled = np.asarray(value) / scale_of.get(name, 1.0)
        worst = max(worst, diff)
        tol = max(ENSEMBLE_TOL, parity_tolerance(scaled, terms))
        if not diff <= tol:
            raise ExportError(
                f"the fused ensemble graph's {name!r} disagrees with the estimator by {diff:.3g} "
                f"(tolerance {tol:.3g})"
            )
    return worst
