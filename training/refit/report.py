"""What a refit prints and records: the served and the refitted gate on the held-out rows,
and when the rows it fitted on and judged on were served."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from app.audit.store.records import iso_from_us
from app.bundle.mixture import mix_classification, mix_regression
from training.evaluate import comparison_verdict
from training.metrics import classification_scores, regression_scores
from training.refit.data import OutcomeRows
from training.refit.gate import GateRefit


def time_ranges(refit: GateRefit) -> dict[str, str]:
    """When the fitting rows and the held-out rows were served (``served_us`` in
    microseconds since the epoch): ``fit_first_row`` ... ``held_out_last_row``, ISO 8601."""
    return {
        f"{side}_{end}_row": iso_from_us(us)
        for side, (first, last) in refit.served_ranges_.items()
        for end, us in (("first", first), ("last", last))
    }


def comparison_lines(refit: GateRefit, source: str) -> list[str]:
    """The rows each gate saw, the two gates side by side (held-out NLL and mean weights),
    then the verdict."""
    c, w, t = refit.comparison_, refit.mean_weights_, time_ranges(refit)
    experts = list(dict.fromkeys([*w["old"], *w["new"]]))  # retired ones, then added ones
    width = max(10, *(len(e) for e in experts))
    head = f"{'gate':<30} {'held-out NLL':>12}  " + " ".join(f"{e:>{width}}" for e in experts)
    rows = [
        (f"served ({source})", c["old_nll"], w["old"]),
        ("refitted", c["new_nll"], w["new"]),
    ]
    lines = [
        f"gate fitted on {c['n_fit']:,} rows served {t['fit_first_row']} to "
        f"{t['fit_last_row']}; held out the latest {c['n_held_requests']:,} requests, "
        f"{c['n_held_out']:,} rows served {t['held_out_first_row']} to {t['held_out_last_row']}",
        "",
        "mean weight per expert on the held-out rows",
        head,
    ]
    for label, nll, weights in rows:
        shares = " ".join(
            f"{weights[e]:>{width}.3f}" if e in weights else f"{'-':>{width}}" for e in experts
        )
        lines.append(f"{label:<30} {nll:>12.4f}  {shares}")
    lines.append(
        f"difference (refitted - served) {c['difference']:+.4f}, bootstrap standard error of "
        f"the paired difference {c['se_difference']:.4f} ({c['resamples']} resamples of the "
        f"{c['n_held_requests']:,} held-out requests, whole): "
        + comparison_verdict(c["difference"], c["se_difference"])
    )
    selected = getattr(refit.combiner_, "selected_", {})
    if "gate_reason" in selected:
        lines.append(f"shipped gate: {selected['gate']}: {selected['gate_reason']}")
    return lines


def held_out_metrics(refit: GateRefit) -> dict[str, dict[str, float]]:
    """Scores of the refitted gate (under its combiner's name, as training records it) and
    of the served gate on the held-out outcome rows: the new version's test metrics."""
    y, held = refit.y_held_, refit.held_out_
    temps = {"new": refit.temperature_, "old": refit.manifest_.mixture.temperature}
    outputs = {"new": refit.outputs_[held], "old": refit.served_outputs_[held]}
    sigmas = {"new": refit.sigmas_, "old": refit.served_sigmas}
    scores: dict[str, dict[str, float]] = {}
    for key, label in (("new", refit.combiner_.name), ("old", "served gate")):
        w, out = refit.held_weights_[key], outputs[key]
        if refit.manifest_.task == "classification":
            scores[label] = classification_scores(mix_classification(w, out, temps[key]).proba, y)
            continue
        mix = mix_regression(w, out, sigmas[key], temps[key])
        scale = refit.manifest_.target.scale or 1.0
        lo, hi = mix.quantile(0.05), mix.quantile(0.95)
        scores[label] = regression_scores(mix, np.asarray(y), scale, lo, hi)
    return scores


def expert_lines(refit: GateRefit) -> list[str]:
    """The experts a refit added (where from; a regression one's spread) and retired."""
    lines = []
    for a in refit.add:
        j = refit.expert_names_.index(a.name)
        spread = (
            f"; sigma {refit.sigmas_[j]:.4f} in standardised units, from the "
            f"{len(refit.fit_rows_):,} fitting rows"
            if refit.manifest_.task == "regression"
            else ""
        )
        lines.append(f"expert added: {a.name} from {a.source.uri} ({a.source.format}{spread})")
    lines.extend(f"expert retired: {name}" for name in refit.retire)
    return lines


def refit_record(
    refit: GateRefit,
    data: OutcomeRows,
    *,
    source: str,
    since: str | None,
    until: str | None,
    inputs: str,
    excluded: dict[str, int],
    combiner: str,
    overrides: dict[str, Any],
    fit_seconds: float,
) -> dict[str, Any]:
    """What the new version's manifest records of its refit (``training.refit``): the
    source version, the window and its rows, whence their inputs, the posters left out,
    the experts added and retired, the split and both gates' held-out NLL, and the gate."""
    c = refit.comparison_
    return {
        "source_version": source,
        "since": since,
        "until": until,
        "first_row": iso_from_us(int(data.record_us[0])),
        "last_row": iso_from_us(int(data.record_us[-1])),
        "rows": len(data.y),
        "served_by": list(data.versions),
        "inputs": inputs,
        "excluded_posters": excluded,
        "excluded_rows": sum(excluded.values()),
        "experts_added": [{"name": a.name, **dataclasses.asdict(a.source)} for a in refit.add],
        "experts_retired": list(refit.retire),
        "holdout": refit.holdout,
        **time_ranges(refit),
        **{k: c[k] for k in ("n_fit", "n_held_out", "n_held_requests", "old_nll", "new_nll")},
        **{k: c[k] for k in ("difference", "se_difference")},
        "combiner": combiner,
        "overrides": overrides,
        "gate": getattr(refit.combiner_, "selected_", {}).get("gate", "network"),
        "fit_seconds": round(fit_seconds, 2),
    }
