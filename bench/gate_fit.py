"""How long fitting the gate takes, excluding the experts, against the paper's runtimes.

The experts are fitted once per dataset (out-of-fold, as in training); then the gate is
fitted ``--repeats`` times on the same evidence and the median is reported, for the
default IA-BMA gate and for the paper's fixed setting (lambda fixed, 10 epochs, no
selection). The first fit in the process is reported apart: it pays torch's start-up.

    python bench/gate_fit.py            # writes bench/results/gate_fit.json

Target: at most a tenth of the paper's IA-BMA runtime (its appendix table, mean of 10
repetitions) on each of the five datasets, for the default gate.

    python bench/gate_fit.py --datasets simulation,california --repeats 3
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from training.combiners.iabma_gate import IABMAGate
from training.datasets import load_shared, simulate
from training.estimator import IABMAClassifier, IABMARegressor
from training.experts.defaults import default_experts, simulation_experts
from training.splits import holdout_split

#: The paper's IA-BMA runtimes in seconds (appendix, "Runtimes", mean of 10 repetitions).
PAPER_SECONDS = {
    "simulation": 5.889,
    "spambase": 18.651,
    "credit-g": 3.345,
    "bike": 29.663,
    "california": 9.815,
}
TARGET_RATIO = 0.1
GATES = {
    "default (auto)": {},
    "paper setting": {
        "kl_weight": 0.05,
        "objective": "elbo",
        "epochs": 10,
        "temperature": None,
        "early_stopping": False,
    },
}


def fitted_estimator(dataset: str, data_dir: Path | None) -> tuple[Any, Any]:
    """Experts fitted out-of-fold (a uniform gate: only the evidence is needed), and X."""
    if dataset == "simulation":
        train = simulate(1000, 0)
        est = IABMAClassifier(simulation_experts(), combiner="uniform")
    else:
        train, _ = holdout_split(load_shared(dataset, data_dir), 0.2, 0)
        cls = IABMAClassifier if train.task == "classification" else IABMARegressor
        est = cls(default_experts(train.task), combiner="uniform", n_jobs=2)
    return est.fit(train.X, train.y), train.X


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--datasets", default=",".join(PAPER_SECONDS))
    ap.add_argument("--out", type=Path, default=Path("bench/results/gate_fit.json"))
    args = ap.parse_args()
    results: dict[str, Any] = {"machine": platform.platform(), "repeats": args.repeats, "runs": []}
    cold: float | None = None
    for dataset in [d for d in args.datasets.split(",") if d]:
        target = TARGET_RATIO * PAPER_SECONDS[dataset]
        print(f"fitting the experts of {dataset} once (not timed)...", flush=True)
        est, X = fitted_estimator(dataset, args.data_dir)
        Z = est.encoder_.transform(est.columns(X))
        ev = est.evidence_
        for label, params in GATES.items():
            times = []
            for _ in tqdm(range(args.repeats), desc=f"{dataset}: {label}", leave=False):
                t0 = time.perf_counter()
                IABMAGate(**params).fit(Z, ev)
                times.append(time.perf_counter() - t0)
                cold = times[0] if cold is None else cold
            row = {
                "dataset": dataset,
                "gate": label,
                "n_rows": ev.n,
                "median_s": statistics.median(times),
                "min_s": min(times),
                "max_s": max(times),
                "target_s": target,
                "paper_s": PAPER_SECONDS[dataset],
                "ratio_to_paper": statistics.median(times) / PAPER_SECONDS[dataset],
            }
            results["runs"].append(row)
    results["first_fit_in_process_s"] = cold
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    head = f"{'dataset':<12}{'gate':<16}{'rows':>7}{'median s':>10}{'max s':>8}"
    print(f"\n{head}{'paper s':>9}{'ratio':>7}{'target':>9}")
    for r in results["runs"]:
        ok = "ok" if r["median_s"] <= r["target_s"] else "OVER"
        print(
            f"{r['dataset']:<12}{r['gate']:<16}{r['n_rows']:>7}{r['median_s']:>10.3f}"
            f"{r['max_s']:>8.3f}{r['paper_s']:>9.3f}{r['ratio_to_paper']:>7.3f}"
            f"{r['target_s']:>7.2f}s {ok}"
        )
    print(f"first fit in the process (torch start-up included): {cold:.3f} s")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
