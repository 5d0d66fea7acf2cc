"""``GateRefit`` on the world's bundles: it never learns from the rows it is judged on, and
it refits the bundle's own gate with the settings the bundle records."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.training.refit.conftest import FIXED_IABMA, Gates, World
from training.combiners.iabma_gate import IABMAGate
from training.datasets import simulate
from training.errors import ParameterError
from training.refit.data import RefitRefused
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


def test_the_bundles_own_gate_and_settings_are_refitted(gates: Gates, outcomes: Any) -> None:
    X, y, served = outcomes
    fixed = GateRefit(gates.store / "demo" / gates.fixed).fit(X, y, served)
    assert isinstance(fixed.combiner_, IABMAGate)
    params = fixed.combiner_.get_params()
    assert {k: params[k] for k in FIXED_IABMA} == FIXED_IABMA
    assert fixed.combiner_.search_results_ == []  # fixed settings: nothing to search
    assert fixed.combiner_.selected_["kl_weight"] == 0.3
    assert fixed.combiner_.prior_temperature_ == 4.0
    assert fixed.settings_["random_state"] == 0 and fixed.settings_["kl_weight"] == 0.3

    told = GateRefit(
        gates.store / "demo" / gates.fixed, params={"kl_weight": 0.01}, random_state=4
    ).fit(X, y, served)
    params = told.combiner_.get_params()
    assert params["kl_weight"] == 0.01 and params["random_state"] == 4
    assert {k: params[k] for k in FIXED_IABMA if k != "kl_weight"} == {
        k: v for k, v in FIXED_IABMA.items() if k != "kl_weight"
    }


def test_settings_the_gate_does_not_take_are_named(gates: Gates, outcomes: Any) -> None:
    X, y, served = outcomes
    refit = GateRefit(gates.store / "demo" / gates.stacking, params={"kl_weight": 0.1})
    with pytest.raises(ParameterError, match=r"kl_weight=0.1 is not a parameter of the 'stacking'"):
        refit.fit(X, y, served)
    with pytest.raises(ParameterError, match=r"combiner='mean' must be one of"):
        GateRefit(gates.store / "demo" / gates.stacking, combiner="mean").fit(X, y, served)


def test_a_recorded_setting_this_gate_no_longer_takes_is_refused(
    gates: Gates, tmp_path: Path, outcomes: Any
) -> None:
    path = Path(shutil.copytree(gates.store / "demo" / gates.fixed, tmp_path / gates.fixed))
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["gate"]["params"]["dropout"] = 0.5
    (path / "manifest.json").write_text(json.dumps(manifest))
    X, y, served = outcomes
    said = r"records dropout=0.5, which is not a parameter of 'iabma' here; --combiner iabma"
    with pytest.raises(RefitRefused, match=said):
        GateRefit(path).fit(X, y, served)
    fresh = GateRefit(path, combiner="iabma").fit(X, y, served)  # its defaults: kl "auto"
    assert fresh.combiner_.get_params()["kl_weight"] == "auto"
