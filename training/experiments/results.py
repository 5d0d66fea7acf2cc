"""Aggregate per-repetition scores into ``results.json`` and render ``results.md``.

``results.md`` follows the paper's UCI table: one row per (dataset, metric), one column per
method, cells ``mean (sd)``, the best method per metric in bold.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training.combiners.names import NOT_COMPETING
from training.experiments.schema import METHODS, METRICS, validate_results, write_schema

#: "max", "min", or a target value the best method is closest to.
DIRECTION: dict[str, str | float] = {
    "accuracy": "max",
    "r2": "max",
    "ece": "min",
    "nll": "min",
    "brier": "min",
    "rmse": "min",
    "crps": "min",
    "coverage90": 0.90,
}
_ARROW = {"max": "↑", "min": "↓"}

#: A reference row, not a competitor: the paper's own setting of our method.

PerRep = Mapping[str, Sequence[Mapping[str, float]]]  # method -> one score dict per rep


def mean_sd(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample sd (ddof=1); sd is 0 when there is a single repetition."""
    v = np.asarray(values, dtype=np.float64)
    sd = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return {"mean": float(v.mean()), "sd": sd}


def paired(scores: PerRep, reference: str = "iabma", metric: str = "nll") -> dict[str, Any] | None:
    """``reference``'s score minus every other method's, repetition by repetition: mean,
    sd and the repetitions where ``reference`` is lower (None without ``reference``)."""
    if reference not in scores:
        return None
    ref = np.array([rep[metric] for rep in scores[reference]], dtype=np.float64)
    against = {}
    for m in (m for m in METHODS if m in scores and m != reference):
        diff = ref - np.array([rep[metric] for rep in scores[m]], dtype=np.float64)
        against[m] = {
            **mean_sd(diff.tolist()),
            "wins": int((diff < 0).sum()),
            "reps": int(diff.size),
        }
    return {"reference": reference, "metric": metric, "against": against}


def searched(selected: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """Per searched method: the gate it shipped and the objective, lambda and lambda_pool
    it chose, one entry per repetition."""
    shipped = {m: [s["gate"] for s in sel] for m, sel in selected.items() if _all(sel, "gate")}
    chosen = {
        m: [
            {
                "objective": s["objective"],
                "kl_weight": float(s["kl_weight"]),
                "pool_kl_weight": float(s.get("pool_kl_weight", 0.0)),
            }
            for s in sel
        ]
        for m, sel in selected.items()
        if _all(sel, "objective")
    }
    return {"shipped": shipped, "chosen": chosen}


def _all(selected: Sequence[Mapping[str, Any]], key: str) -> bool:
    return bool(selected) and all(key in s for s in selected)


def aggregate(
    dataset: str,
    task: str,
    reps: int,
    scores: PerRep,
    fit_seconds: Mapping[str, Sequence[float]],
    tuning: Mapping[str, Mapping[str, Any]] | None = None,
    selected: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The ``results.json`` dict, validated against its schema.

    ``tuning``: per method, ``search`` and ``temperature`` (text) and the list of fitted
    ``temperatures``, one per repetition. ``selected``: per searched method, its
    ``selected_`` of each repetition.
    """
    metrics = METRICS[task]
    methods = [m for m in METHODS if m in scores]
    results = {
        "dataset": dataset,
        "task": task,
        "reps": reps,
        "methods": {
            m: {k: mean_sd([rep[k] for rep in scores[m]]) for k in metrics} for m in methods
        },
        "fit_seconds": {m: mean_sd(fit_seconds[m]) for m in methods},
    }
    if tuning is not None:
        results["tuning"] = {
            m: {
                "search": tuning[m]["search"],
                "temperature": tuning[m]["temperature"],
                "temperature_fitted": mean_sd(tuning[m]["temperatures"]),
            }
            for m in methods
        }
    pairs = paired(scores)
    if pairs is not None:
        results["paired"] = pairs
    results.update(searched(selected or {}))
    return validate_results(results)


def best_methods(results: Mapping[str, Any], metric: str) -> set[str]:
    """The methods that win ``metric``, compared at the 3 decimals the table shows.

    Ties at that precision all win, so the bold never picks between cells that look equal.
    """
    direction = DIRECTION[metric]
    means = {
        m: round(s[metric]["mean"], 3)
        for m, s in results["methods"].items()
        if m not in NOT_COMPETING
    }
    if not means:
        return set()
    if direction == "max":
        key = {m: -v for m, v in means.items()}
    elif direction == "min":
        key = dict(means)
    else:
        key = {m: round(abs(v - float(direction)), 3) for m, v in means.items()}
    top = min(key.values())
    return {m for m, v in key.items() if v == top}


def _metric_label(metric: str) -> str:
    direction = DIRECTION[metric]
    mark = _ARROW[direction] if isinstance(direction, str) else f"→ {direction:.2f}"
    return f"{metric} ({mark})"


def _cell(stat: Mapping[str, float], bold: bool) -> str:
    mean = f"{stat['mean']:.3f}"
    return f"{'**' + mean + '**' if bold else mean} ({stat['sd']:.3f})"


def format_table(results: Mapping[str, Any]) -> str:
    """The metrics table in the paper's layout (markdown)."""
    methods = list(results["methods"])
    lines = [
        "| Dataset | Metric | " + " | ".join(methods) + " |",
        "|---|---|" + "---|" * len(methods),
    ]
    for metric in METRICS[results["task"]]:
        best = best_methods(results, metric)
        cells = [_cell(results["methods"][m][metric], m in best) for m in methods]
        lines.append(
            f"| {results['dataset']} | {_metric_label(metric)} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def format_fit_table(results: Mapping[str, Any]) -> str:
    """Combiner fit seconds, mean (sd), one column per method."""
    methods = list(results["fit_seconds"])
    cells = [_cell(results["fit_seconds"][m], False) for m in methods]
    return "\n".join(
        [
            "| Dataset | | " + " | ".join(methods) + " |",
            "|---|---|" + "---|" * len(methods),
            f"| {results['dataset']} | fit seconds | " + " | ".join(cells) + " |",
        ]
    )


def format_paired(results: Mapping[str, Any]) -> str:
    """The reference's paired test-NLL differences and the gates shipped (markdown)."""
    pairs = results.get("paired")
    lines: list[str] = []
    if pairs:
        ref = pairs["reference"]
        lines += [
            f"| {ref} − method | test NLL, mean | sd | {ref} better |",
            "|---|---|---|---|",
        ]
        for m, d in pairs["against"].items():
            lines.append(f"| {m} | {d['mean']:+.4f} | {d['sd']:.4f} | {d['wins']}/{d['reps']} |")
    for m, gates in results.get("shipped", {}).items():
        counts = {g: gates.count(g) for g in dict.fromkeys(gates)}
        lines.append(
            f"\n{m} shipped: " + ", ".join(f"{g} {c}/{len(gates)}" for g, c in counts.items())
        )
    return "\n".join(lines).strip("\n")


def render_markdown(results: Mapping[str, Any], header: Sequence[str]) -> str:
    """``results.md``: a title, ``header`` bullet lines, both tables and the footnotes."""
    title = f"# Quality benchmark: {results['dataset']} ({results['task']})"
    notes = [
        "Cells are mean (sd) over repetitions; sd is the sample sd (0 with one repetition).",
        "**Bold**: the best of the paper's nine methods per metric at the precision shown "
        "(ties are all bold); ↑ higher is better, ↓ lower, → 0.90 closest to 0.90.",
        "`iabma_paper` (in-sample likelihoods, `sum` energies, the paper's λ) is a reference "
        "row for the paper's literal setting and does not compete for bold.",
    ]
    if results["task"] == "regression":
        notes.append(
            "rmse, nll and crps are in the target's original units; coverage90 is "
            "the share of test targets inside the mixture's central 90% interval."
        )
    else:
        notes.append(
            "ece: top-label, 15 equal-width bins (Guo et al. 2017); nll: mean "
            "negative log-likelihood; brier: multiclass Brier score."
        )
    parts = [title, "", *[f"- {h}" for h in header], "", format_table(results), ""]
    parts += [f"{i}. {n}" for i, n in enumerate(notes, 1)]
    if results.get("paired") or results.get("shipped"):
        parts += [
            "",
            "## Paired differences (same experts and test rows per repetition)",
            "",
            format_paired(results),
        ]
    parts += [
        "",
        "## Combiner fit time (seconds; the experts are shared and timed apart)",
        "",
        format_fit_table(results),
        "",
    ]
    return "\n".join(parts)


def _plain(value: Any) -> Any:
    """numpy values in ``details.json`` as plain JSON (it is free-form, unlike results)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def write_outputs(
    out: Path, results: dict[str, Any], details: dict[str, Any], markdown: str
) -> dict[str, Path]:
    """Write ``results.json`` (validated), its schema, ``details.json`` and ``results.md``."""
    out.mkdir(parents=True, exist_ok=True)
    validate_results(results)
    paths = {
        "results": out / "results.json",
        "schema": out / "results.schema.json",
        "details": out / "details.json",
        "markdown": out / "results.md",
    }
    paths["results"].write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    write_schema(paths["schema"])
    paths["details"].write_text(
        json.dumps(details, indent=2, default=_plain) + "\n", encoding="utf-8"
    )
    paths["markdown"].write_text(markdown, encoding="utf-8")
    return paths
