"""IA-BMA variants side by side on the paper's protocol: what each option does, per dataset.

Every variant mixes the same experts (cached per repetition) through the same code; only
the gate's options differ. MoE, uniform and BHS are printed as reference points.

    python bench/iabma_ablation.py --reps 5 --cache-dir /tmp/benchcache

Writes ``bench/results/ablation.json`` and ``ablation.md`` and prints the table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from app.bundle.mixture import mix_classification, mix_regression
from training.combiners.iabma_gate import IABMAGate
from training.combiners.registry import make_combiner
from training.experiments.config import DATASETS, load_config, method_params
from training.experiments.protocol import RepData, prepare_rep
from training.metrics import classification_scores, regression_scores

# name -> (evidence: "oof" | "in_sample", IABMAGate params, or a baseline's name)
VARIANTS: dict[str, tuple[str, dict[str, Any] | str]] = {
    "default": ("oof", {}),
    "no_temperature": ("oof", {"temperature": None}),
    "min_stopping": ("oof", {"stopping_rule": "min"}),
    "paper_epochs": ("oof", {"early_stopping": False, "epochs": 10}),
    "one_split": ("oof", {"selection_folds": 1}),
    "two_repeats": ("oof", {"selection_repeats": 2}),
    # The guard and what the shipped network is: no guard (the network always ships), a
    # guard at 0 or 2 standard errors, one refitted network instead of the fold average,
    # the network trained on the untempered experts.
    "no_guard": ("oof", {"fallback": False}),
    "guard_0se": ("oof", {"guard_se": 0.0}),
    "guard_2se": ("oof", {"guard_se": 2.0}),
    "no_bagging": ("oof", {"bagging": False}),
    "untempered": ("oof", {"tempered": False}),
    "elbo_only": ("oof", {"objective": "elbo"}),
    "marginal_only": ("oof", {"objective": "marginal"}),
    "prior_tau_auto": ("oof", {"prior_temperature": "auto"}),
    "sigma_energy": ("oof", {"energy_scale": "sigma"}),
    "sum_reduction": ("oof", {"energy_reduction": "sum"}),
    # The prior as a regulariser at a chosen lambda (both objectives still compared).
    "lambda_0.01": ("oof", {"kl_weight": 0.01}),
    "lambda_0.03": ("oof", {"kl_weight": 0.03}),
    "lambda_0.1": ("oof", {"kl_weight": 0.1}),
    "lambda_0": ("oof", {"kl_weight": 0.0}),
    "paper_lambda_oof": ("oof", "iabma_paper_oof"),
    "paper_literal": ("in_sample", "iabma_paper"),
    "moe": ("oof", "moe"),
    "moe_tuned": ("oof", "moe_tuned"),
    "bhs": ("oof", "bhs"),
    "uniform": ("oof", "uniform"),
}


def build(
    variant: str, spec: dict[str, Any] | str, config: dict[str, Any], dataset: str, seed: int
) -> Any:
    if spec in ("iabma_paper", "iabma_paper_oof"):
        params = method_params(config, dataset, "iabma_paper")
        if spec == "iabma_paper_oof":
            params["energy_reduction"] = "mean"
        return IABMAGate(random_state=seed, **params)
    if isinstance(spec, str):
        return make_combiner(spec, random_state=seed, **method_params(config, dataset, spec))
    return IABMAGate(random_state=seed, **spec)


def scores(rd: RepData, weights: np.ndarray, temperature: float) -> dict[str, float]:
    if rd.task == "classification":
        return classification_scores(
            mix_classification(weights, rd.test_outputs, temperature).proba, rd.y_test
        )
    assert rd.evidence.sigmas is not None
    mix = mix_regression(weights, rd.test_outputs, rd.evidence.sigmas, temperature)
    return regression_scores(mix, rd.y_test, rd.y_scale, mix.quantile(0.05), mix.quantile(0.95))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--datasets", nargs="*", default=list(DATASETS))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    config = load_config(None)
    rows: dict[str, dict[str, dict[str, list[float]]]] = {}
    selected: dict[str, list[dict[str, Any]]] = {}
    bar = tqdm(total=len(args.datasets) * args.reps * len(args.variants), desc="ablation")
    for dataset in args.datasets:
        for rep in range(args.reps):
            rd = prepare_rep(dataset, rep, config["protocol"], cache_dir=args.cache_dir)
            for variant in args.variants:
                source, spec = VARIANTS[variant]
                ev = rd.evidence_in_sample if source == "in_sample" else rd.evidence
                comb = build(variant, spec, config, dataset, rd.seed)
                t0 = time.perf_counter()
                comb.fit(rd.Z_train, ev)
                fit_s = time.perf_counter() - t0
                s = scores(rd, comb.weights(rd.Z_test), getattr(comb, "temperature_", 1.0))
                s["fit_seconds"] = fit_s
                cell = rows.setdefault(dataset, {}).setdefault(variant, {})
                for k, v in s.items():
                    cell.setdefault(k, []).append(v)
                if hasattr(comb, "selected_"):
                    selected.setdefault(f"{dataset}/{variant}", []).append(comb.selected_)
                bar.update(1)
    bar.close()
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {
        d: {
            v: {k: [float(np.mean(x)), float(np.std(x))] for k, x in m.items()}
            for v, m in per.items()
        }
        for d, per in rows.items()
    }
    (args.out / "ablation.json").write_text(
        json.dumps({"reps": args.reps, "summary": summary, "selected": selected}, indent=1)
    )
    lines = []
    for dataset, per in summary.items():
        metrics = (
            ["nll", "accuracy", "ece", "brier"]
            if "accuracy" in next(iter(per.values()))
            else ["nll", "rmse", "r2", "crps", "coverage90"]
        ) + ["fit_seconds"]
        lines.append(f"\n### {dataset} ({args.reps} reps, mean (sd))\n")
        lines.append("| variant | " + " | ".join(metrics) + " |")
        lines.append("|---" * (len(metrics) + 1) + "|")
        best_nll = min(v["nll"][0] for v in per.values())
        for variant, m in per.items():
            mark = " **" if m["nll"][0] == best_nll else ""
            cells = [f"{m[k][0]:.4f} ({m[k][1]:.4f})" for k in metrics]
            lines.append(f"| {variant}{mark} | " + " | ".join(cells) + " |")
    text = compact(summary) + "\n" + "\n".join(lines)
    (args.out / "ablation.md").write_text(text + "\n")
    print(text)


def compact(summary: dict[str, dict[str, dict[str, list[float]]]]) -> str:
    """Test NLL of every variant on every dataset: one line per variant."""
    datasets = list(summary)
    variants = list(next(iter(summary.values())))
    lines = ["| variant | " + " | ".join(datasets) + " |", "|---" * (len(datasets) + 1) + "|"]
    for v in variants:
        cells = []
        for d in datasets:
            best = min(m["nll"][0] for m in summary[d].values())
            cell = f"{summary[d][v]['nll'][0]:.3f}"
            cells.append(f"**{cell}**" if summary[d][v]["nll"][0] == best else cell)
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return "Test NLL, mean over repetitions (lower is better; best in bold)\n\n" + "\n".join(lines)


if __name__ == "__main__":
    main()
