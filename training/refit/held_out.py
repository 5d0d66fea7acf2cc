"""Every expert of a refitted version, and its mixture, scored on the same held-out
outcome rows: the bundle page's table and the realised-NLL alerts' reference then compare
like with like (the source's experts' test scores were on other rows)."""

from __future__ import annotations

import numpy as np

from app.bundle.mixture import mix_classification, mix_regression
from app.bundle.reference import MIXTURE_KEY, NLL_CAP, NllReference, PerformanceReference
from training.metrics import classification_scores, regression_scores
from training.refit.gate import GateRefit


def expert_held_out_metrics(refit: GateRefit) -> dict[str, dict[str, float]]:
    """Each expert of the new set alone on the held-out rows, scored as the mixture is."""
    y, held = refit.y_held_, refit.held_out_
    outputs = refit.outputs_[held]
    m = len(refit.expert_names_)
    out: dict[str, dict[str, float]] = {}
    for j, name in enumerate(refit.expert_names_):
        w = np.eye(m)[np.full(len(held), j)]
        if refit.manifest_.task == "classification":
            out[name] = classification_scores(mix_classification(w, outputs, 1.0).proba, y)
            continue
        mix = mix_regression(w, outputs, refit.sigmas_, 1.0)
        scale = refit.manifest_.target.scale or 1.0
        lo, hi = mix.quantile(0.05), mix.quantile(0.95)
        out[name] = regression_scores(mix, np.asarray(y), scale, lo, hi)
    return out


def held_out_reference(refit: GateRefit) -> PerformanceReference:
    """The refitted mixture's and each expert's per-row NLL on the held-out rows."""
    y, held = refit.y_held_, refit.held_out_
    outputs = refit.outputs_[held]
    m = len(refit.expert_names_)
    rows = {
        MIXTURE_KEY: refit.row_nll(
            refit.held_weights_["new"], outputs, y, refit.temperature_, refit.sigmas_
        )
    }
    for j, name in enumerate(refit.expert_names_):
        w = np.eye(m)[np.full(len(held), j)]
        rows[name] = refit.row_nll(w, outputs, y, 1.0, refit.sigmas_)
    capped = {k: np.minimum(v, NLL_CAP) for k, v in rows.items()}
    return PerformanceReference(
        rows=len(held),
        nll={
            k: NllReference(mean=float(v.mean()), sd=float(v.std(ddof=1)))
            for k, v in capped.items()
        },
    )
