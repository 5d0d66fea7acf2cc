"""``iabma train``: fit IA-BMA on the simulation, a shared dataset or any CSV; export it."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("train", help="train experts and the IA-BMA gate, write a bundle")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--dataset", help="simulation, spambase, credit-g, bike or california")
    src.add_argument("--csv", type=Path, help="any CSV file")
    p.add_argument("--target", help="target column (with --csv)")
    p.add_argument("--task", choices=["classification", "regression"], help="with --csv")
    p.add_argument("--drop", nargs="*", default=[], metavar="COL", help="columns to ignore")
    p.add_argument("--data-dir", type=Path, default=None, help="where the shared CSVs are")
    p.add_argument("--store", type=Path, default=Path("models_store"))
    p.add_argument("--name", required=True, help="bundle name")
    p.add_argument("--combiner", default="iabma", help="the gate: iabma (default) or a baseline")
    p.add_argument("--kl-weight", default="auto", help="lambda_KL, or 'auto'")
    p.add_argument("--likelihood-source", choices=["oof", "holdout", "in_sample"], default="oof")
    p.add_argument("--test-size", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(run=run)


def _kl_weight(text: str) -> float | str:
    from training.errors import ParameterError

    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise ParameterError("--kl-weight", text, "must be a number or 'auto'") from None


def load_split(args: argparse.Namespace) -> tuple[Any, Any, list[Any]]:
    """(train, test, experts) for the chosen data source."""
    from training.datasets import load_csv, load_shared, simulate
    from training.errors import ParameterError
    from training.experts.defaults import default_experts, simulation_experts
    from training.splits import holdout_split

    if args.dataset == "simulation":
        return simulate(1000, args.seed), simulate(500, args.seed + 10_000), simulation_experts()
    if args.csv is not None:
        if not args.target or not args.task:
            raise ParameterError("--csv", str(args.csv), "needs --target and --task as well")
        data = load_csv(args.csv, args.target, args.task, args.drop)
    else:
        data = load_shared(args.dataset, args.data_dir)
    if not 0.05 <= args.test_size <= 0.5:
        raise ParameterError("--test-size", args.test_size, "must be between 0.05 and 0.5")
    train, test = holdout_split(data, args.test_size, args.seed)
    return train, test, default_experts(data.task, args.seed)


def run(args: argparse.Namespace) -> int:
    from training.estimator import IABMAClassifier, IABMARegressor
    from training.evaluate import evaluate, format_table
    from training.export.bundle import export_bundle
    from training.gate.iabma_gate import IABMAGate

    train, test, experts = load_split(args)
    cls = IABMAClassifier if train.task == "classification" else IABMARegressor
    combiner: Any = args.combiner
    if args.combiner == "iabma":
        combiner = IABMAGate(
            kl_weight=_kl_weight(args.kl_weight), random_state=args.seed, verbose=not args.quiet
        )
    est = cls(
        experts,
        combiner=combiner,
        likelihood_source=args.likelihood_source,
        random_state=args.seed,
        verbose=not args.quiet,
    )
    print(
        f"training on {len(train.y)} rows x {train.X.shape[1]} features, "
        f"{len(experts)} experts, testing on {len(test.y)} rows"
    )
    t0 = time.perf_counter()
    est.fit(train.X, train.y)
    fit_s = time.perf_counter() - t0
    print(f"fitted in {fit_s:.1f} s (gate {est.gate_fit_seconds_:.2f} s)")
    if hasattr(est.combiner_, "selected_"):
        print(
            "gate variant chosen on the inner validation split:",
            json.dumps(est.combiner_.selected_),
        )
    results = evaluate(est, test.X, test.y)
    metrics = (
        ["accuracy", "ece", "nll", "brier"]
        if train.task == "classification"
        else ["rmse", "r2", "nll", "crps", "coverage90"]
    )
    experts_scores = results.pop("experts")
    print("\ntest metrics (ECE: 15 bins; regression in target units)")
    print(format_table({**results, **{f"  {k}": v for k, v in experts_scores.items()}}, metrics))
    target = train.y.name or "y"
    path = export_bundle(
        est,
        args.store,
        args.name,
        test.X,
        target_name=str(target),
        metrics=results,
        expert_metrics=experts_scores,
        training={
            "source": str(args.csv or args.dataset),
            "fit_seconds": round(fit_s, 2),
            "n_test_rows": len(test.y),
        },
    )
    print(f"\nwrote {path} and pointed {path.parent / 'LATEST'} at it")
    return 0
