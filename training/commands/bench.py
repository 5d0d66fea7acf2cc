"""``iabma bench quality``: every combiner on the paper's protocol, with a report and plots."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from training.combiners.names import BENCH_METHODS
from training.experiments.config import DATASETS

METHOD_CHOICES = BENCH_METHODS


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bench", help="benchmarks of the paper's experiments")
    bench_sub = p.add_subparsers(dest="bench_command", required=True)
    q = bench_sub.add_parser(
        "quality",
        help="all methods on a dataset over repetitions: results.json, results.md, plots",
        description="Runs the paper's protocol (80/20 splits, feature bundles B1-B7, the "
        "paper's experts) --reps times and scores every method's mixture on the test split.",
    )
    src = q.add_mutually_exclusive_group(required=True)
    src.add_argument("--dataset", choices=DATASETS, help="a shared dataset")
    src.add_argument("--csv", type=Path, help="any CSV file (with --target and --task)")
    q.add_argument("--target", help="target column (with --csv)")
    q.add_argument("--task", choices=["classification", "regression"], help="with --csv")
    q.add_argument("--drop", nargs="*", default=[], metavar="COL", help="columns to ignore")
    q.add_argument("--data-dir", type=Path, default=None, help="where the shared CSVs are")
    q.add_argument("--reps", type=int, default=10, help="repetitions (default 10, as the paper)")
    q.add_argument("--seed", type=int, default=0, help="base seed; rep r uses seed + r")
    q.add_argument(
        "--config",
        type=Path,
        default=None,
        help="JSON or TOML file overriding the paper's hyperparameters",
    )
    q.add_argument(
        "--methods",
        nargs="+",
        choices=METHOD_CHOICES,
        default=list(METHOD_CHOICES),
        metavar="METHOD",
        help=f"a subset of: {', '.join(METHOD_CHOICES)}",
    )
    q.add_argument(
        "--paper-literal",
        action="store_true",
        help="every method on in-sample likelihoods; iabma with the paper's "
        "settings (sum energies, the paper's lambda)",
    )
    q.add_argument(
        "--cache-dir", type=Path, default=None, help="keep fitted repetitions here and reuse them"
    )
    q.add_argument("--out", type=Path, required=True, help="output directory")
    q.add_argument("--quiet", action="store_true", help="no progress bar")
    q.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from training.errors import ParameterError
    from training.experiments.config import load_config
    from training.experiments.results import format_paired, format_table
    from training.experiments.runner import CsvSource, run_quality

    csv = None
    if args.csv is not None:
        if not args.target or not args.task:
            raise ParameterError("--csv", str(args.csv), "needs --target and --task as well")
        csv = CsvSource(args.csv, args.target, args.task, tuple(args.drop))
    elif args.target or args.task or args.drop:
        raise ParameterError("--target/--task/--drop", args.dataset, "apply to --csv only")
    if args.reps < 1:
        raise ParameterError("--reps", args.reps, "must be at least 1")
    config = load_config(args.config)
    t0 = time.perf_counter()
    results = run_quality(
        args.dataset,
        args.reps,
        config,
        args.out,
        csv=csv,
        methods=args.methods,
        paper_literal=args.paper_literal,
        base_seed=args.seed,
        data_dir=args.data_dir,
        cache_dir=args.cache_dir,
        progress=not args.quiet,
    )
    print(format_table(results))
    if results.get("paired") or results.get("shipped"):
        print("\n" + format_paired(results))
    print(
        f"\nwrote results.json, results.md, details.json and plots to {args.out} "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    return 0
