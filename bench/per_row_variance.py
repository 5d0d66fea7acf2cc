"""Per-row predictive variance against the constant spread, same experts, same split.

Two models that know their variance are trained on older rows of california housing
(bench/variance_experts.py: a Bayesian ridge, and a forest with a second forest fitted to
its squared out-of-bag residuals) and written as ONNX files with ``mean`` and ``variance``
outputs. The gate is fitted on recent rows twice: once with each expert's constant spread
(``variance_output`` unset) and once with its per-row variance. Both are scored on the
same test rows: NLL in target units, the 90% interval's coverage and mean width, for the
mixture and for each expert alone. Repeated over seeds (a new split each), paired.

    .venv/bin/python bench/per_row_variance.py --seeds 5
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.variance_experts import (  # noqa: E402
    bayesian_ridge_onnx,
    fit_heteroscedastic_forest,
    forest_onnx,
)
from training.datasets import default_data_dir  # noqa: E402
from training.estimator import IABMARegressor  # noqa: E402
from training.evaluate import row_nll  # noqa: E402
from training.experts.spec import Expert  # noqa: E402

RESULTS = ROOT / "bench" / "results"
EXPERTS = ("ridge", "forest")
SPLIT = (8000, 4000, 4000)  # older rows (the experts'), recent rows (the gate's), test


def team_files(X: pd.DataFrame, y: np.ndarray, seed: int, root: Path) -> dict[str, Path]:
    """The two models, trained without the product on ``X``, as ONNX files."""
    from sklearn.linear_model import BayesianRidge

    cols = list(X.columns)
    files = {name: root / f"{name}-{seed}.onnx" for name in EXPERTS}
    ridge = BayesianRidge().fit(X.to_numpy(), y)
    files["ridge"].write_bytes(bayesian_ridge_onnx(ridge, cols).SerializeToString())
    forest = fit_heteroscedastic_forest(X.to_numpy(), y, seed)
    files["forest"].write_bytes(forest_onnx(*forest, cols).SerializeToString())
    return files


def scores(est: IABMARegressor, X: pd.DataFrame, y: np.ndarray) -> dict[str, dict[str, float]]:
    """Test NLL, 90% coverage and width of the mixture and of each expert alone."""
    y_enc = est.encode_target(y)
    outputs = est.expert_outputs(X)
    sigmas = est.expert_sigmas(X)
    n, m = outputs.shape
    t = est.mixture_temperature_
    dist = est.distribution(X)
    out = {
        "mixture": {
            "nll": float(row_nll(est, outputs, est.weights(X), y_enc, t, sigmas).mean()),
            "coverage90": float(np.mean((dist.lower <= y) & (y <= dist.upper))),
            "width90": float(np.mean(dist.upper - dist.lower)),
        }
    }
    z90 = 1.6448536269514722
    s = np.broadcast_to(sigmas, (n, m)) * est.y_scale_
    for j, name in enumerate(est.expert_names_):
        one = np.eye(m)[np.full(n, j)]
        mean = outputs[:, j] * est.y_scale_ + est.y_mean_
        out[name] = {
            "nll": float(row_nll(est, outputs, one, y_enc, 1.0, sigmas).mean()),
            "coverage90": float(np.mean(np.abs(y - mean) <= z90 * s[:, j])),
            "width90": float(np.mean(2 * z90 * s[:, j])),
        }
    return out


def run_seed(frame: pd.DataFrame, seed: int, root: Path) -> dict[str, Any]:
    rows = np.random.default_rng(seed).permutation(len(frame))
    a, b, c = SPLIT
    y = frame["MedHouseVal"].to_numpy()
    X = frame.drop(columns="MedHouseVal").astype(np.float32)
    old, recent, test = rows[:a], rows[a : a + b], rows[a + b : a + b + c]
    files = team_files(X.iloc[old], y[old], seed, root)
    out = {}
    for kind, variance in (("constant", None), ("per_row", "variance")):
        experts = [
            Expert(name, str(files[name]), output="mean", variance_output=variance)
            for name in EXPERTS
        ]
        est = IABMARegressor(experts, random_state=seed).fit(X.iloc[recent], y[recent])
        out[kind] = scores(est, X.iloc[test], y[test])
        print(f"seed {seed} {kind}: {out[kind]['mixture']}", flush=True)
    return out


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over seeds of each score, and of the paired difference per-row - constant."""
    summary: dict[str, Any] = {}
    for who in ("mixture", *EXPERTS):
        summary[who] = {}
        for metric in ("nll", "coverage90", "width90"):
            const = np.array([r["constant"][who][metric] for r in runs])
            rows = np.array([r["per_row"][who][metric] for r in runs])
            diff = rows - const
            summary[who][metric] = {
                "constant": float(np.median(const)),
                "per_row": float(np.median(rows)),
                "difference_median": float(np.median(diff)),
                "difference_min": float(diff.min()),
                "difference_max": float(diff.max()),
                "per_row_lower_in": int((diff < 0).sum()),
            }
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args(argv)
    frame = pd.read_csv(default_data_dir() / "california_housing.csv")
    with tempfile.TemporaryDirectory() as tmp:
        runs = [run_seed(frame, seed, Path(tmp)) for seed in range(args.seeds)]
    result = {
        "dataset": "california_housing",
        "split": dict(zip(("experts", "gate", "test"), SPLIT, strict=True)),
        "seeds": args.seeds,
        "runs": runs,
        "summary": summarise(runs),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"per_row_variance-{stamp}.json"
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["summary"], indent=2))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
