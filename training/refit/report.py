"""What a refit prints and records: the served and the refitted gate on the held-out rows."""

from __future__ import annotations

import numpy as np

from app.bundle.mixture import mix_classification, mix_regression
from training.evaluate import comparison_verdict
from training.metrics import classification_scores, regression_scores
from training.refit.gate import GateRefit


def comparison_lines(refit: GateRefit, source: str) -> list[str]:
    """The two gates side by side: held-out NLL and mean weights, then the verdict."""
    c, w = refit.comparison_, refit.mean_weights_
    experts = list(w["old"])
    width = max(10, *(len(e) for e in experts))
    head = f"{'gate':<30} {'held-out NLL':>12}  " + " ".join(f"{e:>{width}}" for e in experts)
    rows = [
        (f"served ({source})", c["old_nll"], w["old"]),
        ("refitted", c["new_nll"], w["new"]),
    ]
    lines = ["", "mean weight per expert on the held-out rows", head]
    for label, nll, weights in rows:
        shares = " ".join(f"{weights[e]:>{width}.3f}" for e in experts)
        lines.append(f"{label:<30} {nll:>12.4f}  {shares}")
    lines.append(
        f"difference (refitted - served) {c['difference']:+.4f}, bootstrap standard error of "
        f"the paired difference {c['se_difference']:.4f} ({c['resamples']} resamples of "
        f"{c['n_held_out']:,} held-out rows; gate fitted on {c['n_fit']:,}): "
        + comparison_verdict(c["difference"], c["se_difference"])
    )
    selected = refit.combiner_.selected_
    if "gate_reason" in selected:
        lines.append(f"shipped gate: {selected['gate']}: {selected['gate_reason']}")
    return lines


def held_out_metrics(refit: GateRefit) -> dict[str, dict[str, float]]:
    """Scores of the refitted (``iabma``) and the served gate on the held-out outcome rows:
    the new version's test metrics."""
    y, out = refit.y_held_, refit.outputs_[refit.held_out_]
    temps = {"new": refit.temperature_, "old": refit.manifest_.mixture.temperature}
    scores: dict[str, dict[str, float]] = {}
    for key, label in (("new", "iabma"), ("old", "served gate")):
        w = refit.held_weights_[key]
        if refit.manifest_.task == "classification":
            scores[label] = classification_scores(mix_classification(w, out, temps[key]).proba, y)
            continue
        mix = mix_regression(w, out, refit.sigmas, temps[key])
        scale = refit.manifest_.target.scale or 1.0
        lo, hi = mix.quantile(0.05), mix.quantile(0.95)
        scores[label] = regression_scores(mix, np.asarray(y), scale, lo, hi)
    return scores
