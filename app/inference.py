"""One batch through the bundle, and the per-instance answer built from it.

Every ONNX graph runs once per batch (in :class:`~app.bundle.predictor.BundlePredictor`);
this module only reshapes the arrays into the JSON the native routes return and the audit
trail stores, and refuses rows whose output is not finite: an input far outside the
training range can overflow float32 inside a graph, and that is the input's fault (422),
not a server error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.bundle.columns import Columns
from app.bundle.predictor import INTERVAL
from app.errors import Fault, InvalidInput
from app.inputs import MAX_FAULTS
from app.runtime import LoadedModel

UNCERTAINTY = ("total", "aleatoric", "epistemic", "selection")
RowField = Callable[[int], str]


@dataclass(frozen=True)
class Outcome:
    model: LoadedModel
    weights: np.ndarray  # (n, m)
    uncertainty: np.ndarray  # (n, 4) in UNCERTAINTY order
    items: list[dict[str, Any]]  # the per-instance JSON objects
    timings: dict[str, float]  # seconds per graph, "gate" included
    proba: np.ndarray | None = None  # classification: (n, C)
    mean: np.ndarray | None = None  # regression: (n,), target units
    std: np.ndarray | None = None
    interval: np.ndarray | None = None  # (n, 2)
    expert_means: np.ndarray | None = None  # regression: (n, m), target units

    @property
    def n(self) -> int:
        return int(self.weights.shape[0])


def check_finite(
    row_field: RowField,
    *arrays: np.ndarray,
    experts: tuple[str, ...] = (),
    per_expert: np.ndarray | None = None,
) -> None:
    """Refuse rows with a non-finite output; ``per_expert`` (n, m, ...) names the culprits."""
    bad = np.zeros(arrays[0].shape[0], dtype=bool)
    for arr in arrays:
        bad |= ~np.isfinite(arr.reshape(arr.shape[0], -1)).all(axis=1)
    if not bad.any():
        return
    culprits = None
    if per_expert is not None:
        n, m = per_expert.shape[:2]
        culprits = ~np.isfinite(per_expert.reshape(n, m, -1)).all(axis=2)
    faults = []
    for i in np.flatnonzero(bad)[:MAX_FAULTS]:
        names = [e for j, e in enumerate(experts) if culprits is not None and culprits[i, j]]
        who = f"expert {', '.join(names)} gives" if names else "the model gives"
        faults.append(
            Fault(
                "non_finite_output",
                row_field(int(i)),
                f"{who} no finite output for this row: a missing value it cannot handle, "
                "or values far outside the range seen in training",
            )
        )
    raise InvalidInput(faults)


def gate_only(
    model: LoadedModel, columns: Columns, row_field: RowField
) -> tuple[np.ndarray, float]:
    weights, seconds = model.predictor.gate_weights(columns)
    check_finite(row_field, weights)
    return weights, seconds


def run(model: LoadedModel, columns: Columns, row_field: RowField) -> Outcome:
    pred = model.predictor.predict(columns)
    w = pred.weights
    if pred.classes is not None and pred.expert_proba is not None:
        mix = pred.classes
        unc = np.column_stack([mix.total, mix.aleatoric, mix.epistemic, mix.selection])
        check_finite(
            row_field,
            w,
            mix.proba,
            pred.expert_proba,
            unc,
            experts=model.experts,
            per_expert=pred.expert_proba,
        )
        items = _classification_items(model, w, mix.proba, pred.expert_proba, unc)
        return Outcome(model, w, unc, items, pred.timings, proba=mix.proba)
    assert pred.regression is not None
    s = model.predictor.summarise_regression(pred)
    unc = np.column_stack([s.total, s.aleatoric, s.epistemic, pred.regression.selection])
    interval = np.column_stack([s.lower, s.upper])
    check_finite(
        row_field,
        w,
        s.mean,
        s.std,
        interval,
        s.expert_means,
        unc,
        experts=model.experts,
        per_expert=s.expert_means,
    )
    items = _regression_items(model, w, s.mean, s.std, interval, s.expert_means, unc)
    return Outcome(
        model,
        w,
        unc,
        items,
        pred.timings,
        mean=s.mean,
        std=s.std,
        interval=interval,
        expert_means=s.expert_means,
    )


def _classification_items(
    model: LoadedModel,
    weights: np.ndarray,
    proba: np.ndarray,
    expert_proba: np.ndarray,
    unc: np.ndarray,
) -> list[dict[str, Any]]:
    classes, keys, experts = model.classes, model.class_keys, model.experts
    p, label = proba.tolist(), proba.argmax(axis=1).tolist()
    ep, elabel = expert_proba.tolist(), expert_proba.argmax(axis=2).tolist()
    w, u = weights.tolist(), unc.tolist()
    return [
        {
            "prediction": {
                "label": classes[label[i]],
                "probabilities": dict(zip(keys, p[i], strict=True)),
            },
            "weights": dict(zip(experts, w[i], strict=True)),
            "experts": {
                e: {
                    "label": classes[elabel[i][j]],
                    "probabilities": dict(zip(keys, ep[i][j], strict=True)),
                }
                for j, e in enumerate(experts)
            },
            "uncertainty": dict(zip(UNCERTAINTY, u[i], strict=True)),
        }
        for i in range(len(w))
    ]


def _regression_items(
    model: LoadedModel,
    weights: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray,
    interval: np.ndarray,
    expert_means: np.ndarray,
    unc: np.ndarray,
) -> list[dict[str, Any]]:
    experts, expert_std = model.experts, model.expert_std
    mu, sd, iv = mean.tolist(), std.tolist(), interval.tolist()
    em, w, u = expert_means.tolist(), weights.tolist(), unc.tolist()
    return [
        {
            "prediction": {
                "mean": mu[i],
                "std": sd[i],
                "interval": {"level": INTERVAL, "lower": iv[i][0], "upper": iv[i][1]},
            },
            "weights": dict(zip(experts, w[i], strict=True)),
            "experts": {e: {"mean": em[i][j], "std": expert_std[j]} for j, e in enumerate(experts)},
            "uncertainty": dict(zip(UNCERTAINTY, u[i], strict=True)),
        }
        for i in range(len(w))
    ]
