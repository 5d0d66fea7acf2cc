"""``iabma check``: replay a CSV through the served path, in process, before promoting a bundle.

Every row is sent as a CSV-to-JSON reader would send it (empty cells null, numbers as
numbers, the rest as strings) through the same validation and graphs as ``POST /predict``.
Rows the bundle refuses are listed with the reason. When the file is the one the bundle was
trained on (its training rows hash to the manifest's data fingerprint), the test rows are
re-derived and their metrics must equal the ones recorded at training time; on any other
file the metrics are shown next to the recorded ones. Rows without a target were not
trained on, so what only they hold (a category no other row has) may be refused; they are
listed apart. Exit code 1 on any other refused row or mismatch, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.cli.text import help_text
from training.commands.train import add_encoding_argument

if TYPE_CHECKING:
    from app.core.replay import Refusal


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "check",
        help="replay a CSV through a bundle's served path and compare with its recorded metrics",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--store", type=Path, default=Path("models_store"))
    p.add_argument("--name", required=True, help="bundle name")
    p.add_argument("--version", default=None, help="a version (default: LATEST)")
    p.add_argument("--csv", type=Path, required=True, help="the CSV to replay")
    p.add_argument("--target", default=None, help="target column (default: the bundle's)")
    add_encoding_argument(p)
    p.add_argument(
        "--tolerance",
        type=float,
        default=1e-4,
        help="largest accepted difference from a recorded metric, relative to it when it "
        "is beyond 1 (default 1e-4)",
    )
    p.add_argument("--show", type=int, default=20, help="refused rows to list (default 20)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from app.bundle.loader import BundleError
    from app.core.replay import open_served, replay
    from training.csvfile import json_rows, read_text_frame
    from training.errors import CsvError, ParameterError

    if args.tolerance < 0:
        raise ParameterError("--tolerance", args.tolerance, "must be >= 0")
    try:
        model = open_served(args.store, args.name, args.version)
    except BundleError as exc:
        raise ParameterError("--name", args.name, f"cannot be opened: {exc}") from None
    manifest = model.manifest
    if args.encoding is None:
        args.encoding = manifest.training.get("encoding")
    text, _ = read_text_frame(args.csv, args.encoding)
    target = args.target or manifest.target.name
    features = list(model.features.names)
    absent = [f for f in features if f not in text.columns]
    if absent:
        raise CsvError(args.csv, f"lacks the bundle's feature columns {absent}")
    rows = json_rows(text[features])
    print(f"replaying {len(rows)} rows of {args.csv} through {model.name} {model.version}")
    outcomes, refused = replay(model, rows)
    # Rows repeating the header were dropped: name the others by their row in the file.
    file_rows = text.index.to_numpy() + 1
    refused = [dataclasses.replace(r, row=int(file_rows[r.row - 1])) for r in refused]
    unlabelled: list[Refusal] = []
    if target in text.columns:
        # Training drops rows without a target, and with them what only they hold (a
        # category no labelled row has): refusing those is the bundle being right.
        rule = manifest.input_rule.normaliser()
        empty = {int(file_rows[i]) for i, v in enumerate(text[target]) if _label(v, rule) is None}
        unlabelled = [r for r in refused if r.row in empty]
        refused = [r for r in refused if r.row not in empty]
    failed = bool(refused)
    # A row may have several faults, each a line of the table.
    n_refused, n = len({r.row for r in refused}), len({r.row for r in unlabelled})
    print(f"accepted {len(rows) - n_refused - n} rows, refused {n_refused}")
    if refused:
        print(_refusal_table(refused, args.show))
    if unlabelled:
        print(
            f"also refused {n} row{'s' if n != 1 else ''} without a target, which training "
            "dropped along with any value only they hold; not counted as failures:"
        )
        print(_refusal_table(unlabelled, args.show))
    if target not in text.columns:
        print(f"no target column {target!r} in the file: predictions only, no metrics")
        return 1 if failed else 0
    failed |= _compare_metrics(args, model, text, target, outcomes)
    return 1 if failed else 0


def _refusal_table(refused: list[Refusal], show: int) -> str:
    lines = [f"{'row':>7}  {'field':<24} {'code':<18} message", "-" * 78]
    for r in refused[:show]:
        lines.append(f"{r.row:>7}  {r.field[:24]:<24} {r.code:<18} {r.message[:100]}")
    if len(refused) > show:
        lines.append(f"... and {len(refused) - show} more (--show N lists more)")
    return "\n".join(lines)


def _compare_metrics(
    args: argparse.Namespace, model: Any, text: Any, target: str, outcomes: dict[int, Any]
) -> bool:
    """Print the served metrics beside the recorded ones; True on a mismatch."""
    manifest = model.manifest
    rows, same_file = _test_rows(args, manifest, target, text.index)
    scope = "the training run's test rows" if same_file else "every row with a target"
    if rows is None:
        rows = np.arange(len(text))
    rows = np.asarray([r for r in rows if r in outcomes])
    served = _served_metrics(model, rows, text[target].tolist(), outcomes)
    recorded = manifest.metrics.get(manifest.gate.combiner, {})
    print(f"\nmetrics on {len(rows)} rows ({scope}); recorded at training on its test rows")
    # Columns wide enough, and apart, for metrics in a target's units (house prices' RMSE).
    print(f"{'metric':<12} {'served':>18} {'recorded':>18} {'diff':>12}")
    mismatch = False
    for name, value in served.items():
        rec = recorded.get(name)
        diff = None if rec is None else value - rec
        # Relative beyond 1: a metric in the target's units (an RMSE of 170,000 francs) differs
        # by summation order alone in its tenth significant digit.
        bad = same_file and diff is not None and abs(diff) > args.tolerance * max(1.0, abs(rec))
        mismatch |= bad
        rec_text = "-" if rec is None else f"{rec:.6f}"
        diff_text = "-" if diff is None else f"{diff:+12.2e}"
        line = f"{name:<12} {value:>18.6f} {rec_text:>18} {diff_text:>12}"
        print(line + ("  MISMATCH" if bad else ""))
    if same_file and not mismatch:
        print(
            f"every metric is within {args.tolerance:g} of the recorded one (relatively, "
            "for metrics beyond 1)"
        )
    return mismatch


def _test_rows(
    args: argparse.Namespace, manifest: Any, target: str, text_index: Any
) -> tuple[np.ndarray | None, bool]:
    """The 0-based file rows of the training run's test split, if this is its file."""
    from training.datasets import load_csv
    from training.errors import DataWarning, IABMAError
    from training.estimator import fingerprint
    from training.splits import holdout_split

    split = manifest.training.get("split")
    if not isinstance(split, dict):
        return None, False
    rule = manifest.input_rule
    try:
        # Read again only to find the split: what it would warn of was said at training,
        # and the header copies when the file was read for the replay.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataWarning)
            data = load_csv(
                args.csv,
                target,
                manifest.task,
                manifest.training.get("drop", []),
                na_values=rule.na_values,
                keep_default_na=False,
                encoding=args.encoding,
            )
        train, test = holdout_split(data, float(split["test_size"]), int(split["seed"]))
    except IABMAError:
        return None, False
    if fingerprint(train.X, train.y.to_numpy()) != manifest.data_fingerprint:
        print(
            "this file's training rows differ from the bundle's (another file, or one this "
            "version of iabma reads differently): metrics are shown, not compared"
        )
        return None, False
    assert test.source_rows is not None
    # Positions in the frame that was replayed, which lacks any rows repeating the header.
    return text_index.get_indexer(test.source_rows - 1), True


def _served_metrics(
    model: Any, rows: np.ndarray, targets: list[Any], outcomes: dict[int, Any]
) -> dict[str, float]:
    from app.bundle.mixture import mix_regression
    from app.bundle.normalise import Normaliser
    from training.metrics import classification_scores, regression_scores

    manifest = model.manifest
    rule: Normaliser = manifest.input_rule.normaliser()
    y_text = [targets[r] for r in rows]
    if manifest.task == "classification":
        keys: dict[str | None, int] = {
            str(c): k for k, c in enumerate(manifest.target.classes or [])
        }
        pairs = [(r, keys.get(_label(v, rule))) for r, v in zip(rows, y_text, strict=True)]
        pairs = [(r, k) for r, k in pairs if k is not None]
        proba = np.stack([outcomes[r][0].proba[outcomes[r][1]] for r, _ in pairs])
        return classification_scores(proba, np.array([k for _, k in pairs]))
    t = manifest.target
    mean, scale = float(t.mean or 0.0), float(t.scale or 1.0)
    ys = [(r, rule.number(v)[0]) for r, v in zip(rows, y_text, strict=True)]
    ys = [(r, y) for r, y in ys if y is not None]
    pick = [outcomes[r] for r, _ in ys]
    w = np.stack([o.weights[i] for o, i in pick])
    means = (np.stack([o.expert_means[i] for o, i in pick]) - mean) / scale
    interval = (np.stack([o.interval[i] for o, i in pick]) - mean) / scale
    sigmas = np.array([e.sigma for e in manifest.experts], dtype=np.float64)
    if pick and pick[0][0].expert_sds is not None:  # per-row sds from the fused graph
        sigmas = np.stack([o.expert_sds[i] for o, i in pick]) / scale
    mix = mix_regression(w, means, sigmas, manifest.mixture.temperature)
    y_std = (np.array([y for _, y in ys]) - mean) / scale
    return regression_scores(mix, y_std, scale, interval[:, 0], interval[:, 1])


def _label(value: Any, rule: Any) -> str | None:
    """A target cell as the text of a class label ("1" for 1 or 1.0)."""
    if value is None:
        return None
    if isinstance(value, str):
        text = rule.text(value)
        number = None if text is None else rule.number_text(text)
        if number is not None and number.is_integer():
            return str(int(number))
        return text
    return str(int(value)) if float(value).is_integer() else str(value)
