"""What ``iabma train`` prints of a fitted estimator (the fit, the test metrics, the
comparison with a plain combiner) and what it records with the bundle."""

from __future__ import annotations

import argparse
import json
from typing import Any


def print_fit(est: Any, fit_s: float) -> None:
    """How long the fit took, and which gate variant was chosen and shipped."""
    # Pre-fitted experts are converted and checked, not fitted.
    prefit = getattr(est.experts_, "likelihood_source_", None) == "prefit"
    how = "converted, not refit," if prefit else "with cross-fitting"
    print(
        f"fitted in {fit_s:.1f} s (experts {how} {est.expert_fit_seconds_:.1f} s, "
        f"gate {est.gate_fit_seconds_:.2f} s)"
    )
    selected = dict(getattr(est.combiner_, "selected_", {}))
    reason = selected.pop("gate_reason", None)
    if selected:
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in selected.items()}
        shown.pop("held_out_nll", None)  # the reason below lists it
        print("gate variant chosen on held-out training rows:", json.dumps(shown))
    if reason is not None:
        print(f"shipped gate: {selected['gate']}: {reason}")


def test_report(est: Any, test: Any, task: str) -> tuple[dict, dict, dict]:
    """Print and return the test metrics, each expert's, and the plain comparison."""
    from training.evaluate import comparison_verdict, evaluate, format_table, plain_comparison

    results = evaluate(est, test.X, test.y)
    metrics = (
        ["accuracy", "ece", "nll", "brier"]
        if task == "classification"
        else ["rmse", "r2", "nll", "crps", "coverage90"]
    )
    experts_scores = results.pop("experts")
    print("\ntest metrics (ECE: 15 bins; regression in target units)")
    print(format_table({**results, **{f"  {k}": v for k, v in experts_scores.items()}}, metrics))
    versus = plain_comparison(est, test.X, test.y)
    print(
        f"\ntest NLL {versus['nll']:.4f} against the better plain combiner ({versus['rival']}) "
        f"{versus['rival_nll']:.4f}: difference {versus['difference']:+.4f}, bootstrap standard "
        f"error {versus['se_difference']:.4f} (paired, {versus['resamples']} resamples of the "
        f"test rows; of the NLL itself {versus['se_nll']:.4f}); "
        + comparison_verdict(versus["difference"], versus["se_difference"])
    )
    return results, experts_scores, versus


def export(
    args: argparse.Namespace,
    est: Any,
    train: Any,
    test: Any,
    results: dict,
    experts_scores: dict,
    versus: dict,
    fit_s: float,
    seconds: dict[str, float],
) -> Any:
    """Write the bundle, with what ``iabma check`` and a reader need to know of the run."""
    from training.evaluate import performance_reference
    from training.export.bundle import export_bundle

    return export_bundle(
        est,
        args.store,
        args.name,
        test.X,
        target_name=str(train.y.name or "y"),
        metrics=results,
        expert_metrics=experts_scores,
        training={
            "source": str(args.csv or args.dataset),
            "fit_seconds": round(fit_s, 2),
            "seconds": seconds,
            "n_test_rows": len(test.y),
            "versus_plain": versus,
            # `iabma check` re-derives the test rows of the same file from these.
            "split": {"test_size": args.test_size, "seed": args.seed},
            "drop": list(args.drop),
            "encoding": args.encoding,  # check's default for the same file
            **({"experts_file": str(args.experts)} if args.experts is not None else {}),
        },
        publish=args.publish,
        performance=performance_reference(est, test.X, test.y),
    )
