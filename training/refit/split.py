"""The refit's held-out rows: the latest requests, whole; and their bootstrap by request.

A refitted gate is judged as production will judge it, on requests served after every
row it learnt from. Rows served at one moment fall on one side together (a request's rows
share its record's time), so no request is split between fitting and judging, and the
standard error of the comparison resamples whole requests: rows of one request share
their sender, their moment and whatever their outcomes have in common.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from training.errors import ParameterError
from training.evaluate import BOOTSTRAP_RESAMPLES, BOOTSTRAP_ROWS
from training.refit.data import RefitRefused

# The held-out share must land within these bounds however the requests fall: below, the
# comparison rests on too few rows; above, the gate is fitted on too few.
LOWEST_SHARE, HIGHEST_SHARE = 0.05, 0.5
# A bootstrap over one request has no spread, and would call any gain significant.
MIN_HELD_REQUESTS = 2


@dataclass(frozen=True)
class TimeSplit:
    """Positions of the fitting and the held-out rows (each ascending), and for each
    held-out row its request's number among the held-out requests (0, 1, ...)."""

    fit: np.ndarray
    held_out: np.ndarray
    held_requests: np.ndarray

    @property
    def n_held_requests(self) -> int:
        return int(self.held_requests.max()) + 1


def check_served_us(served_us: object, n: int) -> np.ndarray:
    """``served_us`` as ``n`` integer times."""
    arr = np.asarray(served_us)
    if arr.shape != (n,) or not np.issubdtype(arr.dtype, np.integer):
        raise ParameterError(
            "served_us", f"{arr.dtype} of shape {arr.shape}", f"must be {n} integer times"
        )
    return arr.astype(np.int64)


def latest_requests(served_us: np.ndarray, holdout: float) -> TimeSplit:
    """Hold out the rows served at or after one moment: the cut between two moments whose
    held-out share is nearest ``holdout`` (ties: the larger), among the cuts that hold out
    5-50% of the rows in at least two requests."""
    n = len(served_us)
    order = np.argsort(served_us, kind="stable")
    t = served_us[order]
    starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])  # each moment's first row
    cuts = starts[1:]  # cutting before moment k + 1, for k = 0 .. moments - 2
    held = n - cuts
    moments_held = len(starts) - 1 - np.arange(len(cuts))
    share = held / n
    ok = (share >= LOWEST_SHARE) & (share <= HIGHEST_SHARE) & (moments_held >= MIN_HELD_REQUESTS)
    if not ok.any():
        largest = int(np.diff(np.r_[starts, n]).max())
        raise RefitRefused(
            f"the held-out rows are the latest requests, whole, and the {n:,} outcome rows "
            f"come in {len(starts):,} request{'s' * (len(starts) != 1)} (the largest has "
            f"{largest:,} rows): no cut between them holds out {LOWEST_SHARE:.0%}-"
            f"{HIGHEST_SHARE:.0%} of the rows in at least {MIN_HELD_REQUESTS} requests; widen "
            "the window with --since/--until"
        )
    candidates = np.flatnonzero(ok)
    best = candidates[np.argmin(np.abs(held[candidates] - holdout * n))]
    fit, held_out = np.sort(order[: cuts[best]]), np.sort(order[cuts[best] :])
    held_requests = np.unique(served_us[held_out], return_inverse=True)[1].ravel()
    return TimeSplit(fit, held_out, held_requests.astype(np.int64))


def request_bootstrap_se(values: np.ndarray, requests: np.ndarray, seed: int = 0) -> float:
    """Bootstrap standard error of the mean of ``values`` with whole requests resampled:
    each resample draws as many requests as there are, with replacement, and averages
    their rows. With one row per request it is the row bootstrap, draw for draw."""
    sums = np.bincount(requests, weights=values)
    counts = np.bincount(requests).astype(np.float64)
    k = len(sums)
    rng = np.random.default_rng(seed)
    per = max(1, BOOTSTRAP_ROWS // max(k, 1))  # a few resamples at a time bounds memory
    means = []
    for start in range(0, BOOTSTRAP_RESAMPLES, per):
        idx = rng.integers(0, k, size=(min(per, BOOTSTRAP_RESAMPLES - start), k))
        means.append(sums[idx].sum(axis=1) / counts[idx].sum(axis=1))
    return float(np.concatenate(means).std(ddof=1))
