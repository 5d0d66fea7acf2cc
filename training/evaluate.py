"""Test-set scores of a fitted estimator, the uniform average and each expert alone.

All three go through the same mixture code with different weights, so they differ only by
the weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.bundle.mixture import mix_classification, mix_regression
from app.bundle.reference import MIXTURE_KEY, NLL_CAP, NllReference, PerformanceReference
from training.estimator import IABMAClassifier, IABMARegressor
from training.metrics import classification_scores, regression_scores


def score(
    est: IABMAClassifier | IABMARegressor,
    outputs: np.ndarray,
    weights: np.ndarray,
    y_enc: np.ndarray,
    temperature: float = 1.0,
    sigmas: np.ndarray | None = None,
) -> dict[str, float]:
    """Scores of one mixture; ``sigmas`` are the experts' sds at these rows (regression;
    the constant ``est.sigmas_`` if None)."""
    if isinstance(est, IABMAClassifier):
        return classification_scores(mix_classification(weights, outputs, temperature).proba, y_enc)
    mix = mix_regression(weights, outputs, est.sigmas_ if sigmas is None else sigmas, temperature)
    return regression_scores(mix, y_enc, est.y_scale_, mix.quantile(0.05), mix.quantile(0.95))


def _sigmas(est: IABMAClassifier | IABMARegressor, X: Any) -> np.ndarray | None:
    """The experts' sds at ``X`` (per row where some give their own variance)."""
    return est.expert_sigmas(X) if isinstance(est, IABMARegressor) else None


def evaluate(est: IABMAClassifier | IABMARegressor, X: Any, y: Any) -> dict[str, Any]:
    """``{"iabma": scores, "uniform": scores, "experts": {name: scores}}`` on ``(X, y)``."""
    y_enc = est.encode_target(y)
    outputs = est.expert_outputs(X)
    s = _sigmas(est, X)
    n, m = outputs.shape[:2]
    w = est.weights(X)
    result: dict[str, Any] = {
        est.combiner_.name: score(est, outputs, w, y_enc, est.mixture_temperature_, s),
        "uniform": score(est, outputs, np.full((n, m), 1.0 / m), y_enc, sigmas=s),
        "experts": {},
    }
    for j, name in enumerate(est.expert_names_):
        onehot = np.zeros((n, m))
        onehot[:, j] = 1.0
        result["experts"][name] = score(est, outputs, onehot, y_enc, sigmas=s)
    return result


BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_ROWS = 4_000_000  # resampled values held at once (32 MB of indices)


def row_nll(
    est: IABMAClassifier | IABMARegressor,
    outputs: np.ndarray,
    weights: np.ndarray,
    y_enc: np.ndarray,
    temperature: float = 1.0,
    sigmas: np.ndarray | None = None,
) -> np.ndarray:
    """Per-row test NLL of a mixture; regression in the target's units, as ``score``."""
    if isinstance(est, IABMAClassifier):
        p = mix_classification(weights, outputs, temperature).proba
        return -np.log(np.clip(p[np.arange(len(y_enc)), y_enc], 1e-300, None))
    mix = mix_regression(weights, outputs, est.sigmas_ if sigmas is None else sigmas, temperature)
    return np.log(est.y_scale_) - mix.logpdf(y_enc)


def bootstrap_se(values: np.ndarray, seed: int = 0) -> float:
    """Bootstrap standard error of the mean of ``values`` (rows resampled with replacement)."""
    rng = np.random.default_rng(seed)
    # A few resamples at a time: all 2000 at once over 200,000 test rows took 6 GB. The
    # generator draws the same numbers in pieces as in one block.
    per = max(1, BOOTSTRAP_ROWS // max(len(values), 1))
    means = []
    for start in range(0, BOOTSTRAP_RESAMPLES, per):
        count = min(per, BOOTSTRAP_RESAMPLES - start)
        idx = rng.integers(0, len(values), size=(count, len(values)))
        means.append(values[idx].mean(axis=1))
    return float(np.concatenate(means).std(ddof=1))


def plain_comparison(est: IABMAClassifier | IABMARegressor, X: Any, y: Any) -> dict[str, Any]:
    """The shipped mixture's test NLL against the better of the uniform average and the
    best expert (by test NLL), with bootstrap standard errors over the test rows.

    ``se_difference`` is the standard error of the paired per-row difference, the one the
    comparison needs; ``se_nll`` that of the shipped mixture's own NLL.
    """
    y_enc = est.encode_target(y)
    outputs = est.expert_outputs(X)
    s = _sigmas(est, X)
    n, m = outputs.shape[:2]
    ours = row_nll(est, outputs, est.weights(X), y_enc, est.mixture_temperature_, s)
    plain = {"uniform": row_nll(est, outputs, np.full((n, m), 1.0 / m), y_enc, sigmas=s)}
    for j, name in enumerate(est.expert_names_):
        onehot = np.eye(m)[np.full(n, j)]
        plain[f"expert {name}"] = row_nll(est, outputs, onehot, y_enc, sigmas=s)
    rival = min(plain, key=lambda k: plain[k].mean())
    diff = ours - plain[rival]
    se = bootstrap_se(diff)
    return {
        "nll": float(ours.mean()),
        "rival": rival,
        "rival_nll": float(plain[rival].mean()),
        "difference": float(diff.mean()),
        "se_difference": se,
        "se_nll": bootstrap_se(ours),
        "within_one_se": bool(diff.mean() <= se),  # not worse by more than one SE
        "resamples": BOOTSTRAP_RESAMPLES,
    }


def performance_reference(
    est: IABMAClassifier | IABMARegressor, X: Any, y: Any
) -> PerformanceReference:
    """The bundle's held-out reference for realised-performance alerts: mean and sd of the
    per-row NLL (capped as the server caps it) of the mixture and of each expert alone on
    ``(X, y)``, rows the estimator did not learn from."""
    y_enc = est.encode_target(y)
    outputs = est.expert_outputs(X)
    s = _sigmas(est, X)
    n, m = outputs.shape[:2]
    rows = {MIXTURE_KEY: row_nll(est, outputs, est.weights(X), y_enc, est.mixture_temperature_, s)}
    for j, name in enumerate(est.expert_names_):
        rows[name] = row_nll(est, outputs, np.eye(m)[np.full(n, j)], y_enc, sigmas=s)
    capped = {k: np.minimum(v, NLL_CAP) for k, v in rows.items()}
    return PerformanceReference(
        rows=n,
        nll={
            k: NllReference(mean=float(v.mean()), sd=float(v.std(ddof=1)))
            for k, v in capped.items()
        },
    )


def comparison_verdict(difference: float, se: float) -> str:
    """How a paired NLL difference (ours minus the rival's) reads against its standard
    error: lower NLL is better, so a difference below ``-se`` is better beyond the noise."""
    if difference < -se:
        return "better by more than one standard error"
    if difference <= se:
        return "within one standard error"
    return "WORSE by more than one standard error"


def format_table(rows: dict[str, dict[str, float]], metrics: list[str]) -> str:
    width = max(len(r) for r in rows) + 2
    head = "method".ljust(width) + "".join(m.rjust(12) for m in metrics)
    lines = [head, "-" * len(head)]
    for name, scores in rows.items():
        lines.append(name.ljust(width) + "".join(f"{scores[m]:12.4f}" for m in metrics))
    return "\n".join(lines)
