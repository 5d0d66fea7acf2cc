"""``GateRefit`` on the world's bundle: it never learns from the rows it is judged on."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.training.refit.conftest import World
from training.datasets import simulate
from training.refit.gate import GateRefit

REQUESTS, ROWS = 60, 10  # 600 outcome rows in requests of 10, served in a shuffled order


@pytest.fixture(scope="module")
def outcomes() -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    data = simulate(REQUESTS * ROWS, 21)
    served = np.random.default_rng(0).permutation(np.repeat(np.arange(REQUESTS) * 1000, ROWS))
    return data.X, data.y.to_numpy(), served


def probe(refit: GateRefit) -> np.ndarray:
    """The refitted gate's weights on fixed rows, through its own encoder."""
    X = simulate(200, 5).X
    return refit.combiner_.weights(refit.encoder_.transform(refit.schema_.columns(X)))


def test_the_held_out_requests_take_no_part_in_the_fit(world: World, outcomes: Any) -> None:
    """Change every held-out row's input and outcome: the refitted gate is the same, bit
    for bit, while the comparison sees the change. Change one fitted request: it moves."""
    X, y, served = outcomes
    path = world.store / "demo" / world.version
    first = GateRefit(path).fit(X, y, served)
    held, fit_rows = first.held_out_, first.fit_rows_
    assert len(held) == 120 and first.n_held_requests_ == 12
    assert served[fit_rows].max() < served[held].min()
    assert first.served_ranges_ == {"fit": (0, 47_000), "held_out": (48_000, 59_000)}

    X2, y2 = X.copy(), y.copy()
    X2.iloc[held] = X2.iloc[held].to_numpy()[::-1] * 3.0 + 1.0
    y2[held] = 1 - y2[held]
    second = GateRefit(path).fit(X2, y2, served)
    assert np.array_equal(second.held_out_, held)
    assert np.array_equal(probe(second), probe(first))
    assert second.temperature_ == first.temperature_
    assert second.comparison_["new_nll"] != first.comparison_["new_nll"]

    y3 = y.copy()
    y3[served == served[fit_rows].max()] ^= 1  # the latest fitted request's outcomes
    third = GateRefit(path).fit(X, y3, served)
    assert not np.array_equal(probe(third), probe(first))
