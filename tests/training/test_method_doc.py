"""docs/method.md's table of defaults says what the code does."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from training.combiners import fallback, selection, stacking
from training.combiners.iabma_gate import KL_GRID, IABMAGate
from training.combiners.pool_path import POOL_KL_GRID

DOC = Path(__file__).resolve().parents[2] / "docs" / "method.md"


@pytest.fixture(scope="module")
def documented() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    table = text.split("### Defaults, as the code has them", 1)[1].split("\n\n## ", 1)[0]
    rows = re.findall(r"^\| ([^|]+?) \| ([^|]+?) \|$", table, flags=re.M)
    return {k: v for k, v in rows if k not in ("setting", "---")}


def numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", text)]


def default(name: str):
    return inspect.signature(IABMAGate).parameters[name].default


def test_every_documented_default_is_the_codes(documented) -> None:
    assert numbers(documented["candidates"]) == list(KL_GRID)
    assert "`elbo`" in documented["candidates"] and default("objective") == "auto"
    assert numbers(documented["epochs"]) == [default("epochs")]
    assert numbers(documented["patience (`n_iter_no_change`)"]) == [default("n_iter_no_change")]
    assert numbers(documented["halving"]) == [selection.SURVIVORS, 1, selection.HALVING_FRACTION]
    folds = numbers(documented["selection folds"])
    assert folds == [5, 999, 3, 3000, 1, 20]
    assert selection.AUTO_FOLDS == ((999, 5), (3000, 3))
    assert default("validation_fraction") == 0.2
    assert numbers(documented["selection repeats"]) == [1] and selection.AUTO_REPEATS == ()
    assert numbers(documented["search row cap (`search_max_rows`)"]) == [default("search_max_rows")]
    assert documented["stopping rule"] == default("stopping_rule")
    grid = fallback.TEMPERATURE_GRID
    assert numbers(documented["temperature grid"]) == [len(grid), 0.25, 4]
    np.testing.assert_allclose(grid[[0, -1]], [0.25, 4.0])
    np.testing.assert_allclose(np.diff(np.log(grid)), np.log(grid[1] / grid[0]))
    assert numbers(documented["guard"]) == [default("guard_se")]
    assert numbers(documented["pool path (`pool_kl_weight`)"]) == list(POOL_KL_GRID)
    assert default("pool_kl_weight") == "auto"
    assert numbers(documented["pool penalty"]) == [
        stacking.FOLDS,
        selection.AUTO_FOLDS[0][0],
        fallback.POOL_PENALTY,
    ]
    assert default("pool_penalty") == "auto"
