"""A suggested change point in the realised NLL, and what a refit could gain after it.

The mixture's per-row NLL, in the order the rows were served, is tested for one shift of
its mean by the CUSUM statistic ``max_t |S_t| / (sigma sqrt(n))`` (``S_t`` the partial
sums of the deviations from the overall mean, ``sigma`` the pooled within-segment sd at
the argmax): with no change it follows the supremum of a Brownian bridge (Kolmogorov's
distribution), whence the p-value. The argmax is the suggested change: the rows after it
are those ``iabma refit --since auto`` learns from. The gain a refit could give is
estimated on those rows as the mixture's NLL less the best expert's in hindsight, with
the standard error of the paired difference (docs/design.md, "Change point").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

MIN_SEGMENT = 30  # rows on each side of a change: fewer say nothing about a mean
P_VALUE = 0.01  # a change is suggested below this


def kolmogorov_p(t: float) -> float:
    """P(sup |Brownian bridge| > t)."""
    if t <= 0.3:
        return 1.0
    total = sum((-1) ** (k - 1) * math.exp(-2.0 * k * k * t * t) for k in range(1, 101))
    return float(min(1.0, max(0.0, 2.0 * total)))


def cusum(x: np.ndarray) -> tuple[int, float, float]:
    """(rows before the change, statistic, p-value) of one mean shift in ``x``."""
    n = len(x)
    s = np.cumsum(x - x.mean())[:-1]  # S_t after t + 1 rows, t + 1 = 1 .. n - 1
    inner = np.abs(s[MIN_SEGMENT - 1 : n - MIN_SEGMENT])
    tau = int(np.argmax(inner)) + MIN_SEGMENT
    left, right = x[:tau], x[tau:]
    pooled = (((left - left.mean()) ** 2).sum() + ((right - right.mean()) ** 2).sum()) / (n - 2)
    sigma = math.sqrt(pooled) if pooled > 0 else 0.0
    if sigma == 0.0:
        return tau, 0.0, 1.0
    stat = float(inner.max() / (sigma * math.sqrt(n)))
    return tau, stat, kolmogorov_p(stat)


def change_point(
    times_us: np.ndarray, mixture: np.ndarray, experts: Mapping[str, np.ndarray]
) -> dict[str, Any] | None:
    """The suggested change of the mixture's realised NLL (rows in served order; each
    expert's NLL on the same rows), or None when there are too few rows or no change
    stands out (p-value at or above :data:`P_VALUE`)."""
    order = np.argsort(times_us, kind="stable")
    x = np.asarray(mixture, dtype=np.float64)[order]
    if len(x) < 2 * MIN_SEGMENT:
        return None
    tau, stat, p = cusum(x)
    if p >= P_VALUE:
        return None
    at = np.asarray(times_us)[order]
    after = slice(tau, None)
    gain = None
    if experts:
        means = {
            e: float(np.asarray(v, dtype=np.float64)[order][after].mean())
            for e, v in experts.items()
        }
        best = min(means, key=lambda e: means[e])
        diff = x[after] - np.asarray(experts[best], dtype=np.float64)[order][after]
        gain = {
            "best_expert": best,
            "nll_difference": float(diff.mean()),
            "se": float(diff.std(ddof=1) / math.sqrt(len(diff))),
        }
    return {
        "rows_before": tau,
        "rows_after": len(x) - tau,
        "served_at_us": int(at[tau]),
        "statistic": stat,
        "p_value": p,
        "nll_before": float(x[:tau].mean()),
        "nll_after": float(x[tau:].mean()),
        "refit_gain": gain,
    }


def trail_change_point(engine: Any, flt: Any) -> tuple[int, dict[str, Any] | None]:
    """The outcome rows ``flt`` selects in the trail, and their suggested change (the
    mixture's stored NLL; experts left out): what ``iabma refit --since auto`` starts at."""
    from app.audit.read.outcome_filter import scored
    from app.audit.read.scores import KINDS, NLL_CAP

    times, nll = [], []
    for row in scored(engine, flt):
        at, s = row[0], row[3]
        if type(at) is not int or not isinstance(s, bytes | memoryview):
            continue
        s = bytes(s)
        if not s or len(s) % (8 * KINDS):
            continue
        first = float(np.frombuffer(s[:8], "<f8")[0])  # the mixture's NLL comes first
        if math.isfinite(first):
            times.append(at)
            nll.append(min(first, NLL_CAP))
    return len(nll), change_point(np.array(times, dtype=np.int64), np.array(nll), {})
