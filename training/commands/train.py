"""``iabma train``: fit IA-BMA on the simulation, a shared dataset or any CSV; export it."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Literal

from app.bundle.normalise import PANDAS_NA_VALUES
from training.commands.team_experts import (
    add_expert_arguments,
    check_expert_arguments,
    choose_experts,
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("train", help="train experts and the IA-BMA gate, write a bundle")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--dataset",
        help="simulation, spambase, credit-g, bike, california, or one of scikit-learn's: "
        "breast-cancer, diabetes, wine, digits",
    )
    src.add_argument("--csv", type=Path, help="any CSV file")
    p.add_argument("--target", help="target column (with --csv)")
    p.add_argument(
        "--sample-rows",
        type=int,
        default=None,
        metavar="N",
        help="with --csv: train on a uniform random sample of N rows of the file (--seed), "
        "for a file too large to read in memory",
    )
    p.add_argument("--task", choices=["classification", "regression"], help="with --csv")
    p.add_argument("--drop", nargs="*", default=[], metavar="COL", help="columns to ignore")
    add_encoding_argument(p)
    add_rule_arguments(p)
    p.add_argument(
        "--max-categories",
        type=int,
        default=1000,
        help="keep at most this many levels of a categorical column; the rest share one "
        "'__other__' level (default 1000)",
    )
    p.add_argument("--cv", type=int, default=5, help="folds for the experts' cross-fitting")
    p.add_argument(
        "--n-jobs",
        type=int,
        default=1,
        help="processes for the experts' cross-fitting (-1: every core; default 1)",
    )
    p.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="run the cross-fitting on this Dask scheduler (default: $IABMA_DASK_SCHEDULER; "
        "needs the dask extra)",
    )
    p.add_argument("--data-dir", type=Path, default=None, help="where the shared CSVs are")
    p.add_argument("--store", type=Path, default=Path("models_store"))
    p.add_argument("--name", required=True, help="bundle name")
    p.add_argument("--combiner", default="iabma", help="the gate: iabma (default) or a baseline")
    p.add_argument("--kl-weight", default="auto", help="lambda_KL, or 'auto'")
    p.add_argument("--likelihood-source", choices=["oof", "holdout", "in_sample"], default="oof")
    p.add_argument("--test-size", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--no-publish",
        dest="publish",
        action="store_false",
        help="write the version but leave LATEST alone (stage it for `iabma promote`)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="read and check the data, show how each column will be read, and stop",
    )
    add_expert_arguments(p)
    p.set_defaults(run=run)


def _kl_weight(text: str) -> float | Literal["auto"]:
    from training.errors import ParameterError

    if text == "auto":
        return "auto"
    try:
        return float(text)
    except ValueError:
        raise ParameterError("--kl-weight", text, "must be a number or 'auto'") from None


def add_encoding_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--encoding",
        default=None,
        help="the CSV's text encoding (default UTF-8, or UTF-16 when the file starts with "
        "its byte-order mark; for check, the training file's); e.g. cp1252 for Excel on "
        "Windows",
    )


def add_rule_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--na-values",
        nargs="+",
        action="extend",
        default=None,
        metavar="TEXT",
        help="text that means a missing value, besides pandas' read_csv defaults ('', 'NA', "
        "'NaN', 'null', 'N/A', 'None', ...); e.g. --na-values '?' unknown; repeat the "
        "option to add more, and write a text starting with '-' as --na-values=-Inf",
    )
    p.add_argument(
        "--no-default-na",
        action="store_true",
        help="do not treat pandas' default strings as missing; only --na-values",
    )


def load_split(args: argparse.Namespace) -> tuple[Any, Any, list[Any]]:
    """(train, test, experts) for the chosen data source; checked before any fitting."""
    from training.datasets import load_csv, load_shared, simulate
    from training.errors import ParameterError
    from training.experts.defaults import default_experts, simulation_experts
    from training.splits import holdout_split

    if not 2 <= args.cv <= 20:
        raise ParameterError("--cv", args.cv, "must be between 2 and 20")
    if args.max_categories < 2:
        raise ParameterError("--max-categories", args.max_categories, "must be at least 2")
    check_expert_arguments(args)
    if args.dataset == "simulation":
        experts = choose_experts(args, "classification", simulation_experts())
        return simulate(1000, args.seed), simulate(500, args.seed + 10_000), experts
    if args.csv is not None:
        if not args.target or not args.task:
            raise ParameterError("--csv", str(args.csv), "needs --target and --task as well")
        data = load_csv(
            args.csv,
            args.target,
            args.task,
            args.drop,
            na_values=args.na_values,
            keep_default_na=not args.no_default_na,
            encoding=args.encoding,
            sample_rows=args.sample_rows,
            seed=args.seed,
        )
    else:
        if (
            args.na_values
            or args.no_default_na
            or args.target
            or args.task
            or args.drop
            or args.encoding
            or args.sample_rows is not None
        ):
            raise ParameterError(
                "--dataset",
                args.dataset,
                "takes none of --target, --task, --drop, --na-values, --encoding, --sample-rows",
            )
        data = load_shared(args.dataset, args.data_dir)
    if not 0.05 <= args.test_size <= 0.5:
        raise ParameterError("--test-size", args.test_size, "must be between 0.05 and 0.5")
    train, test = holdout_split(data, args.test_size, args.seed)
    if data.task == "classification":
        check_class_sizes(
            args.csv or args.dataset, str(data.y.name or "target"), data, train, args.cv
        )
    return train, test, choose_experts(args, data.task, default_experts(data.task, args.seed))


def check_class_sizes(source: Any, target: str, data: Any, train: Any, cv: int) -> None:
    """Every class needs ``cv`` training rows for stratified cross-fitting."""
    from training.errors import CsvError

    counts = train.y.value_counts()
    small = counts[counts < cv]
    if len(small):
        label = small.index[0]
        total = int((data.y == label).sum())
        raise CsvError(
            source,
            f"class {label!r} has {total} rows ({int(small.iloc[0])} in the training split); "
            f"{cv}-fold cross-fitting needs at least {cv} there. Merge or drop the class, or "
            "lower --cv",
            column=target,
        )


def describe(train: Any, test: Any, max_categories: int) -> str:
    """What training would see: rows, the target, and how every column is read."""
    from training.features import FeatureSchema
    from training.hints import warn_lookalikes

    schema = FeatureSchema.infer(train.X, rule=train.rule, max_categories=max_categories)
    y = train.y
    if train.task == "classification":
        warn_lookalikes(f"target {y.name!r}", [str(v) for v in y.unique()])
    target = (
        f"{y.nunique()} classes: {', '.join(map(str, sorted(y.unique(), key=str)[:10]))}"
        if train.task == "classification"
        else f"numeric, {y.min():g} to {y.max():g}"
    )
    rule = train.rule
    extra = sorted(set(rule.na_values) - set(PANDAS_NA_VALUES))
    lines = [
        f"{train.task}: {len(train.y)} training rows, {len(test.y)} test rows",
        f"target {y.name!r}: {target}",
        "missing values: pandas' read_csv strings"
        + (f" plus {extra}" if extra else "")
        + (f"; decimal mark {rule.decimal!r}" if rule.decimal != "." else ""),
        "",
        f"{'column':<28} {'graph input':<28} {'type':<12} {'missing':>8}  levels",
    ]
    for f in schema.features:
        col = train.X[f.name]
        n_missing = int(col.isna().sum())
        levels = "" if f.categories is None else str(len(f.categories) - f.other)
        if f.other:
            levels += " (capped; the rest in '__other__')"
        kind = "numeric" if f.dtype == "float" else "categorical"
        lines.append(f"{f.name[:28]:<28} {f.input[:28]:<28} {kind:<12} {n_missing:>8}  {levels}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from training.combiners.iabma_gate import IABMAGate
    from training.estimator import IABMAClassifier, IABMARegressor
    from training.evaluate import comparison_verdict, evaluate, format_table, plain_comparison
    from training.export.bundle import export_bundle

    t_load = time.perf_counter()
    if args.csv is not None and not args.quiet and args.csv.is_file():
        print(f"reading {args.csv} ({args.csv.stat().st_size / 1e6:.0f} MB)", flush=True)
    train, test, experts = load_split(args)
    load_s = time.perf_counter() - t_load
    if args.dry_run:
        print(describe(train, test, args.max_categories))
        return 0
    cls = IABMAClassifier if train.task == "classification" else IABMARegressor
    combiner: Any = args.combiner
    if args.combiner == "iabma":
        combiner = IABMAGate(
            kl_weight=_kl_weight(args.kl_weight), random_state=args.seed, verbose=not args.quiet
        )
    rule = train.rule
    est = cls(
        experts,
        combiner=combiner,
        na_values=sorted(rule.na_values),
        keep_default_na=False,
        decimal=rule.decimal,
        max_categories=args.max_categories,
        cv=args.cv,
        likelihood_source=args.likelihood_source,
        random_state=args.seed,
        verbose=not args.quiet,
        n_jobs=args.n_jobs,
        scheduler=args.scheduler,
    )
    print(
        f"training on {len(train.y)} rows x {train.X.shape[1]} features, "
        f"{len(experts)} experts, testing on {len(test.y)} rows"
    )
    t0 = time.perf_counter()
    est.fit(train.X, train.y)
    fit_s = time.perf_counter() - t0
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
    t_eval = time.perf_counter()
    results = evaluate(est, test.X, test.y)
    eval_s = time.perf_counter() - t_eval
    metrics = (
        ["accuracy", "ece", "nll", "brier"]
        if train.task == "classification"
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
    target = train.y.name or "y"
    t_export = time.perf_counter()
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
            "seconds": {
                "load": round(load_s, 2),
                "experts": round(est.expert_fit_seconds_, 2),
                "gate": round(est.gate_fit_seconds_, 2),
                "evaluate": round(eval_s, 2),
            },
            "n_test_rows": len(test.y),
            "versus_plain": versus,
            # `iabma check` re-derives the test rows of the same file from these.
            "split": {"test_size": args.test_size, "seed": args.seed},
            "drop": list(args.drop),
            "encoding": args.encoding,  # check's default for the same file
            **({"experts_file": str(args.experts)} if args.experts is not None else {}),
        },
        publish=args.publish,
    )
    export_s = time.perf_counter() - t_export
    if args.publish:
        print(f"\nwrote {path} and pointed {path.parent / 'LATEST'} at it")
    else:
        print(
            f"\nwrote {path}; serve it with: iabma promote --store {args.store} "
            f"--name {args.name} {path.name}"
        )
    print(
        f"timings: load {load_s:.1f} s, experts {est.expert_fit_seconds_:.1f} s, gate "
        f"{est.gate_fit_seconds_:.1f} s, evaluate {eval_s:.1f} s, export {export_s:.1f} s"
    )
    if args.mlflow_log:
        from training.commands.mlflow_log import log_bundle

        run_id, where = log_bundle(path)
        print(f"logged the bundle as MLflow run {run_id} at {where}")
    return 0
