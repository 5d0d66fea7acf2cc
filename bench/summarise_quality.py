"""One markdown table from several ``iabma bench quality`` runs, next to the paper's table.

    python bench/summarise_quality.py bench/results/quality bench/results/quality-literal

It also prints, per dataset, the paired per-repetition test-NLL differences of the default
IA-BMA against each fair rival (``moe_tuned``, ``stacking``, ``ensemble_selection``) and
against its own ablations: mean, sd and the repetitions IA-BMA wins (lower NLL).

Each argument is a directory of ``<dataset>/results.json``. The paper's numbers are its
appendix table "UCI benchmarks: mean (sd) across runs" (see the citation in the README),
copied here for the side-by-side rows; the paper reports no NLL and no simulation table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from training.combiners.names import ABLATIONS, BENCH_METHODS, NOT_COMPETING
from training.experiments.config import DATASETS

METHODS = BENCH_METHODS
HEADERS = (
    "best single",
    "uniform",
    "acc. weighted",
    "BMA",
    "MoE",
    "DLA",
    "SMC",
    "BHS",
    "IA-BMA",
    "MoE tuned",
    "stacking",
    "ens. selection",
    "IA-BMA (paper setting)",
    "IA-BMA λ=0",
    "IA-BMA no T",
    "IA-BMA prior τ searched",
    "IA-BMA s = σ",
)
RIVALS = ("moe_tuned", "stacking", "ensemble_selection", *ABLATIONS)
METRICS = {
    "classification": ("accuracy", "ece", "nll", "brier"),
    "regression": ("r2", "rmse", "nll", "crps", "coverage90"),
}
HIGHER = {"accuracy", "r2"}
ORDER = DATASETS
# The paper's appendix table (mean, sd) for best_single .. bhs, iabma; no paper-setting row.
PAPER = {
    ("bike", "r2"): [0.706, 0.752, 0.773, 0.774, 0.706, 0.781, 0.756, 0.752, 0.794],
    ("bike", "rmse"): [0.582, 0.491, 0.448, 0.447, 0.581, 0.446, 0.483, 0.491, 0.433],
    ("california", "r2"): [0.772, 0.840, 0.840, 0.812, 0.778, 0.840, 0.817, 0.840, 0.844],
    ("california", "rmse"): [0.036, 0.025, 0.025, 0.029, 0.035, 0.025, 0.029, 0.025, 0.024],
    ("credit-g", "accuracy"): [0.634, 0.676, 0.662, 0.648, 0.624, 0.668, 0.626, 0.682, 0.684],
    ("credit-g", "ece"): [0.260, 0.172, 0.169, 0.174, 0.296, 0.173, 0.222, 0.176, 0.175],
    ("spambase", "accuracy"): [0.699, 0.702, 0.738, 0.760, 0.760, 0.729, 0.757, 0.646, 0.764],
    ("spambase", "ece"): [0.114, 0.163, 0.148, 0.169, 0.095, 0.171, 0.222, 0.180, 0.146],
}


def best(values: dict[str, float], metric: str) -> str:
    pool = {m: v for m, v in values.items() if m not in NOT_COMPETING}
    if metric == "coverage90":
        return min(pool, key=lambda m: abs(pool[m] - 0.9))
    return (max if metric in HIGHER else min)(pool, key=pool.get)


def table(dirs: list[Path]) -> str:
    lines = [
        "| dataset | metric | setting | " + " | ".join(HEADERS) + " |",
        "|---|---|---|" + "---|" * len(HEADERS),
    ]
    found = {p.parent.name for d in dirs for p in d.glob("*/results.json")}
    datasets = [d for d in ORDER if d in found] + sorted(found - set(ORDER))
    for ds in datasets:
        runs = [
            (d.name, json.loads((d / ds / "results.json").read_text()))
            for d in dirs
            if (d / ds / "results.json").is_file()
        ]
        task = runs[0][1]["task"]
        for metric in METRICS[task]:
            for setting, res in runs:
                vals = {
                    m: res["methods"][m][metric]["mean"] for m in METHODS if m in res["methods"]
                }
                top = best(vals, metric)
                cells = []
                for m in METHODS:
                    if m not in res["methods"]:
                        cells.append("")
                        continue
                    cell = f"{vals[m]:.3f} ({res['methods'][m][metric]['sd']:.3f})"
                    cells.append(f"**{cell}**" if m == top else cell)
                lines.append(
                    f"| {ds} | {metric} | ours, {setting} ({res['reps']} reps) | "
                    + " | ".join(cells)
                    + " |"
                )
            if (ds, metric) in PAPER:
                lines.append(
                    f"| {ds} | {metric} | paper | "
                    + " | ".join(f"{v:.3f}" for v in PAPER[(ds, metric)])
                    + " | |"
                )
    return "\n".join(lines)


def paired(dirs: list[Path], metric: str = "nll") -> str:
    """IA-BMA minus each rival, per repetition (same seed, same experts, same test rows)."""
    lines = [
        f"| dataset | run | IA-BMA − rival ({metric}) | reps | mean | sd | IA-BMA wins |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in dirs:
        for path in sorted(d.glob("*/details.json")):
            per = json.loads(path.read_text())["per_rep"]
            if "iabma" not in per:
                continue
            ours = np.array([r[metric] for r in per["iabma"]])
            for rival in RIVALS:
                if rival not in per:
                    continue
                diff = ours - np.array([r[metric] for r in per[rival]])
                sd = float(diff.std(ddof=1)) if len(diff) > 1 else 0.0
                lines.append(
                    f"| {path.parent.name} | {d.name} | {rival} | {len(diff)} "
                    f"| {diff.mean():+.4f} | {sd:.4f} | {int((diff < 0).sum())}/{len(diff)} |"
                )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("dirs", nargs="+", type=Path)
    args = ap.parse_args()
    print(table(args.dirs))
    print()
    print(paired(args.dirs))


if __name__ == "__main__":
    main()
