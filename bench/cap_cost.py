"""What the default experts' row bounds cost in test NLL (issue 31).

Fits the default experts with and without their bounds (kNN reference rows, forest draws,
boosting rows; :mod:`training.experts.caps`) on the same split of the scale benchmark's
data, and reports, per size, the test NLL of the mixture and of the bounded experts, the
paired difference (bounded minus unbounded) and its bootstrap standard error over the test
rows. Both fits see the same rows and seeds; only the bounds differ.

    .venv/bin/python bench/cap_cost.py --rows 20000 100000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.train_scale import RESULTS, make_scale_csv  # noqa: E402
from training.datasets import load_csv  # noqa: E402
from training.estimator import IABMAClassifier  # noqa: E402
from training.evaluate import bootstrap_se, row_nll  # noqa: E402
from training.experts.defaults import default_experts  # noqa: E402
from training.splits import holdout_split  # noqa: E402

SHOWN = ("knn", "forest", "hgb")


def row_nlls(est: IABMAClassifier, X: object, y: object) -> dict[str, np.ndarray]:
    """Per-row test NLL of the mixture and of each expert alone."""
    y_enc = est.encode_target(y)
    outputs = est.expert_outputs(X)
    n, m = outputs.shape[:2]
    out = {"iabma": row_nll(est, outputs, est.weights(X), y_enc, est.mixture_temperature_)}
    for j, name in enumerate(est.expert_names_):
        out[name] = row_nll(est, outputs, np.eye(m)[np.full(n, j)], y_enc)
    return out


def cost(n: int, workdir: Path, seed: int) -> dict[str, dict[str, float]]:
    csv = workdir / f"scale-{n}.csv"
    make_scale_csv(csv, n, seed)
    train, test = holdout_split(load_csv(csv, "y", "classification"), 0.2, seed)
    nll = {}
    for bounded in (True, False):
        experts = default_experts("classification", seed, bounded=bounded)
        est = IABMAClassifier(experts, random_state=seed, n_jobs=2).fit(train.X, train.y)
        nll[bounded] = row_nlls(est, test.X, test.y)
        print(f"{n} rows, bounded={bounded}: NLL {nll[bounded]['iabma'].mean():.4f}", flush=True)
    out = {}
    for name in ("iabma", *SHOWN):
        diff = nll[True][name] - nll[False][name]
        out[name] = {
            "bounded": round(float(nll[True][name].mean()), 4),
            "unbounded": round(float(nll[False][name].mean()), 4),
            "difference": round(float(diff.mean()), 4),
            "se_difference": round(bootstrap_se(diff), 4),
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[20_000, 100_000])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cap_cost-") as tmp:
        result = {n: cost(n, Path(tmp), args.seed) for n in args.rows}
    lines = ["| rows | model | NLL bounded | NLL unbounded | paired difference (se) |"]
    lines.append("|---|---|---|---|---|")
    for n, rows in result.items():
        for name, r in rows.items():
            lines.append(
                f"| {n:,} | {name} | {r['bounded']} | {r['unbounded']} | "
                f"{r['difference']:+.4f} ({r['se_difference']}) |"
            )
    text = "\n".join(lines)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"cap_cost-{stamp}.json").write_text(json.dumps(result, indent=1))
    (RESULTS / f"cap_cost-{stamp}.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
