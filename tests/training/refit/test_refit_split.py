"""The refit's held-out rows are the latest requests, whole, and are resampled whole."""

from __future__ import annotations

import numpy as np
import pytest

from training.errors import ParameterError
from training.evaluate import bootstrap_se
from training.refit.data import RefitRefused
from training.refit.split import (
    HIGHEST_SHARE,
    LOWEST_SHARE,
    MIN_HELD_REQUESTS,
    check_served_us,
    latest_requests,
    request_bootstrap_se,
)


def shuffled_requests(sizes: list[int], seed: int) -> np.ndarray:
    """Serving times of requests of ``sizes`` rows (request k at time 1000 k), their rows
    in a random order, as a trail never lists them."""
    served = np.repeat(1000 * np.arange(len(sizes)), sizes)
    return np.random.default_rng(seed).permutation(served)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("holdout", [0.05, 0.2, 0.5])
def test_the_held_out_rows_are_the_latest_requests_whole(seed: int, holdout: float) -> None:
    rng = np.random.default_rng(100 + seed)
    sizes = rng.integers(1, 40, size=60).tolist()
    served = shuffled_requests(sizes, seed)
    split = latest_requests(served, holdout)
    n = len(served)
    assert np.array_equal(np.sort(np.r_[split.fit, split.held_out]), np.arange(n))
    assert np.all(np.diff(split.fit) > 0) and np.all(np.diff(split.held_out) > 0)
    # Ordered in time: every held-out row was served after every fitted row.
    assert served[split.fit].max() < served[split.held_out].min()
    # Disjoint by request: no serving time (request) has rows on both sides.
    assert not set(served[split.fit]) & set(served[split.held_out])
    requests = np.unique(served[split.held_out])
    assert split.n_held_requests == len(requests) >= MIN_HELD_REQUESTS
    assert np.array_equal(np.unique(split.held_requests), np.arange(len(requests)))
    # Each held-out row carries its own request's number.
    assert np.array_equal(requests[split.held_requests], served[split.held_out])
    # Of every cut between requests that the bounds allow, the one nearest the share.
    tails = np.cumsum(sizes[::-1])[:-1]  # rows held out by the latest 1, 2, ... requests
    k = np.arange(1, len(sizes))
    allowed = (tails >= LOWEST_SHARE * n) & (tails <= HIGHEST_SHARE * n) & (k >= 2)
    best = np.min(np.abs(tails[allowed] - holdout * n))
    assert abs(len(split.held_out) - holdout * n) == best


def test_a_tie_holds_out_the_larger_set() -> None:
    # Ten requests of 10 rows: 0.25 of 100 rows lies between the latest 2 and 3 requests.
    split = latest_requests(shuffled_requests([10] * 10, 0), 0.25)
    assert len(split.held_out) == 30 and split.n_held_requests == 3


def test_rows_in_order_are_one_request_each() -> None:
    split = latest_requests(np.arange(1000), 0.2)
    assert np.array_equal(split.held_out, np.arange(800, 1000))
    assert split.n_held_requests == 200


@pytest.mark.parametrize(
    ("sizes", "said"),
    [
        ([1000], "come in 1 request (the largest has 1,000 rows)"),
        ([300, 700], "come in 2 requests (the largest has 700 rows)"),  # 70% or all
        ([900, 100], "come in 2 requests (the largest has 900 rows)"),  # 10% in one request
    ],
)
def test_requests_too_large_to_split_are_refused(sizes: list[int], said: str) -> None:
    with pytest.raises(RefitRefused, match=r"^the held-out rows are the latest requests") as e:
        latest_requests(shuffled_requests(sizes, 0), 0.2)
    assert said in str(e.value)
    assert "holds out 5%-50% of the rows in at least 2 requests" in str(e.value)
    assert str(e.value).endswith("widen the window with --since/--until")


def test_two_small_requests_may_be_held_out_after_a_large_one() -> None:
    split = latest_requests(shuffled_requests([900, 50, 50], 0), 0.2)
    assert len(split.held_out) == 100 and split.n_held_requests == 2


@pytest.mark.parametrize(
    "served", [np.arange(5, dtype=np.float64), np.arange(4), np.arange(10).reshape(5, 2)]
)
def test_serving_times_must_be_one_integer_per_row(served: np.ndarray) -> None:
    with pytest.raises(ParameterError, match=r"served_us=.* must be 5 integer times"):
        check_served_us(served, 5)


def test_one_row_per_request_is_the_row_bootstrap_draw_for_draw() -> None:
    values = np.random.default_rng(0).normal(size=500)
    got = request_bootstrap_se(values, np.arange(500), seed=3)
    assert got == pytest.approx(bootstrap_se(values, 3), rel=1e-12)


def test_whole_requests_are_resampled() -> None:
    """Rows of a request that share their value are one observation, not many: the SE is
    that of the request means, and above what resampling the rows would say."""
    means = np.random.default_rng(1).normal(size=40)
    values, requests = np.repeat(means, 25), np.repeat(np.arange(40), 25)
    got = request_bootstrap_se(values, requests, seed=2)
    assert got == pytest.approx(bootstrap_se(means, 2), rel=1e-12)
    assert got > 4 * bootstrap_se(values, 2)  # rows resampled: about sqrt(25) times smaller
