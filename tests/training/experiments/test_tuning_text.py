"""The words every results.json carries for how a searched gate was tuned say what the
search and the guard do in the code."""

from __future__ import annotations

import inspect

import pytest

from training.combiners import selection
from training.combiners.iabma_gate import IABMAGate
from training.combiners.moe_tuned import TunedMoEGate
from training.experiments.methods import TUNING

#: The rows whose gate runs the default search and guard.
SEARCHED = (
    "iabma",
    "moe_tuned",
    "iabma_lambda0",
    "iabma_no_temp",
    "iabma_prior_tau",
    "iabma_s_sigma",
)


def default(cls: type, name: str) -> object:
    return inspect.signature(cls).parameters[name].default


@pytest.mark.parametrize("name", SEARCHED)
def test_a_searched_row_names_the_guard_the_code_runs(name: str) -> None:
    text = TUNING[name]["search"]
    # The guard's rival is stacking's pool, judged on rows that did not choose the network,
    # by more than guard_se standard errors; not the old check against two plain gates.
    assert "stacking's pool" in text and "took no part in choosing it" in text
    assert "uniform average and the best expert" not in text
    for cls in (IABMAGate, TunedMoEGate):
        assert default(cls, "fallback") is True and default(cls, "guard_se") == 1.0
    assert "by more than one corrected resampled standard error" in text
    # Folds up to the last AUTO_FOLDS bound, then one split of validation_fraction.
    assert f"above {selection.AUTO_FOLDS[-1][0]} rows" in text
    assert default(IABMAGate, "validation_fraction") == 0.2 and "80/20 split" in text
    assert "path toward stacking's pool" in text and default(IABMAGate, "pool_kl_weight") == "auto"
