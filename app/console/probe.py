"""Probing the gate from the console: one input, or one feature swept over its range.

A probe reads its input as ``GET /weights`` reads features, runs the served graph, and is
logged (``iabma.console``), never audited: it served no client.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.audit.store.records import UNCERTAINTY
from app.core.inputs import query_row
from app.core.plane import check_finite
from app.core.runtime import LoadedModel
from app.errors import Fault, InvalidInput

log = logging.getLogger("iabma.console")
FIELD_PREFIX = "f:"  # form field of a feature: feature names may be any text
SWEEP_POINTS = 41


@dataclass(frozen=True)
class ProbeResult:
    weights: dict[str, float]
    top_expert: str
    experts: list[dict[str, Any]]  # per expert: name, weight, prediction text
    mixture: dict[str, Any]
    uncertainty: dict[str, float]


@dataclass(frozen=True)
class Sweep:
    feature: str
    x: list[float]
    weights: dict[str, list[float]]


def form_fields(model: LoadedModel) -> frozenset[str]:
    """The names of the probe form's fields: one per feature, and the feature to sweep."""
    return frozenset({"sweep", *(FIELD_PREFIX + name for name in model.features.names)})


def form_values(form: dict[str, str], model: LoadedModel) -> dict[str, str]:
    """The feature values of a submitted probe form, every feature present."""
    values = {}
    for name in model.features.names:
        values[name] = form.get(FIELD_PREFIX + name, "")
    return values


def _run(model: LoadedModel, rows: list[dict[str, Any]]) -> Any:
    table = model.features
    columns = table.columns(rows, lambda _i, name: name)
    pred = model.predictor.predict(columns, interval=False)
    check_finite(model, pred, lambda _i: "probe")
    return pred


def _label(model: LoadedModel, proba: np.ndarray) -> Any:
    return model.classes[int(np.argmax(proba))]


def probe(model: LoadedModel, values: dict[str, str]) -> ProbeResult:
    pred = _run(model, [query_row(values, model.features)])
    w = pred.weights[0].tolist()
    weights = dict(zip(model.experts, w, strict=True))
    experts = []
    if pred.proba is not None:
        keys = model.class_keys
        for j, name in enumerate(model.experts):
            p = pred.expert_proba[0, j]
            experts.append(
                {
                    "name": name,
                    "weight": w[j],
                    "label": _label(model, p),
                    "probabilities": dict(zip(keys, p.tolist(), strict=True)),
                }
            )
        proba = pred.proba[0]
        mixture = {
            "label": _label(model, proba),
            "probabilities": dict(zip(keys, proba.tolist(), strict=True)),
        }
    else:
        for j, name in enumerate(model.experts):
            experts.append({"name": name, "weight": w[j], "mean": float(pred.expert_means[0, j])})
        mixture = {"mean": float(pred.mean[0]), "std": float(pred.std[0])}
    top = model.experts[int(np.argmax(w))]
    log.info("gate probe of %s version %s: top expert %s", model.name, model.version, top)
    return ProbeResult(
        weights=weights,
        top_expert=top,
        experts=experts,
        mixture=mixture,
        uncertainty=dict(zip(UNCERTAINTY, pred.uncertainty[0].tolist(), strict=True)),
    )


def sweep(model: LoadedModel, values: dict[str, str], feature: str) -> Sweep:
    """The gate's weights as ``feature`` moves over its training range, the rest fixed."""
    if feature not in model.features.names:
        raise InvalidInput([Fault("unknown_feature", "sweep", f"unknown feature {feature!r}")])
    spec = model.manifest.feature(feature)
    if spec.dtype != "float":
        raise InvalidInput([Fault("invalid_value", "sweep", f"{feature!r} is not numeric")])
    if spec.low is None or spec.high is None:
        raise InvalidInput(
            [Fault("invalid_value", "sweep", f"this bundle records no range for {feature!r}")]
        )
    xs = np.linspace(spec.low, spec.high, SWEEP_POINTS).tolist()
    rows = [query_row({**values, feature: repr(x)}, model.features) for x in xs]
    pred = _run(model, rows)
    log.info("gate sweep of %s version %s over %r", model.name, model.version, feature)
    return Sweep(
        feature=feature,
        x=xs,
        weights={e: pred.weights[:, j].tolist() for j, e in enumerate(model.experts)},
    )
