"""``iabma train``: fit IA-BMA on the simulation, a shared dataset or any CSV; export it."""

from __future__ import annotations

import argparse
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
    _add_fitting_arguments(p)
    p.add_argument("--data-dir", type=Path, default=None, help="where the shared CSVs are")
    p.add_argument("--store", type=Path, default=Path("models_store"))
    p.add_argument("--name", default=None, help="bundle name (needed unless --dry-run)")
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


def _add_fitting_arguments(p: argparse.ArgumentParser) -> None:
    """How the experts' cross-fitting runs."""
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

    if args.name is None and not args.dry_run:
        raise ParameterError("--name", None, "is needed to write a bundle (--dry-run goes without)")
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
    from training.commands.train_report import export, print_fit, test_report

    t_load = time.perf_counter()
    if args.csv is not None and not args.quiet and args.csv.is_file():
        print(f"reading {args.csv} ({args.csv.stat().st_size / 1e6:.0f} MB)", flush=True)
    train, test, experts = load_split(args)
    load_s = time.perf_counter() - t_load
    if args.dry_run:
        print(describe(train, test, args.max_categories))
        return 0
    est = _estimator(args, train, experts)
    print(
        f"training on {len(train.y)} rows x {train.X.shape[1]} features, "
        f"{len(experts)} experts, testing on {len(test.y)} rows"
    )
    t0 = time.perf_counter()
    est.fit(train.X, train.y)
    fit_s = time.perf_counter() - t0
    print_fit(est, fit_s)
    t_eval = time.perf_counter()
    results, experts_scores, versus = test_report(est, test, train.task)
    seconds = {
        "load": round(load_s, 2),
        "experts": round(est.expert_fit_seconds_, 2),
        "gate": round(est.gate_fit_seconds_, 2),
        "evaluate": round(time.perf_counter() - t_eval, 2),
    }
    t_export = time.perf_counter()
    path = export(args, est, train, test, results, experts_scores, versus, fit_s, seconds)
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
        f"{est.gate_fit_seconds_:.1f} s, evaluate {seconds['evaluate']:.1f} s, export "
        f"{export_s:.1f} s"
    )
    if args.mlflow_log:
        from training.commands.mlflow_log import log_bundle

        run_id, where = log_bundle(path)
        print(f"logged the bundle as MLflow run {run_id} at {where}")
    return 0


def _estimator(args: argparse.Namespace, train: Any, experts: list[Any]) -> Any:
    """The unfitted estimator the options describe."""
    from training.combiners.iabma_gate import IABMAGate
    from training.estimator import IABMAClassifier, IABMARegressor

    cls = IABMAClassifier if train.task == "classification" else IABMARegressor
    combiner: Any = args.combiner
    if args.combiner == "iabma":
        combiner = IABMAGate(
            kl_weight=_kl_weight(args.kl_weight), random_state=args.seed, verbose=not args.quiet
        )
    rule = train.rule
    return cls(
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
