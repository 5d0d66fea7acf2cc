"""Building combiners by name."""

from __future__ import annotations

import pytest

from training.combiners.base import UniformCombiner
from training.combiners.bhs import BHSCombiner
from training.combiners.dla import DLACombiner
from training.combiners.iabma_gate import IABMAGate
from training.combiners.moe import MoECombiner
from training.combiners.moe_tuned import TunedMoEGate
from training.combiners.registry import COMBINER_NAMES, make_combiner
from training.combiners.smc import SMCCombiner
from training.combiners.stacking import EnsembleSelectionCombiner, StackingCombiner
from training.combiners.static import AccuracyWeightedCombiner, BestSingleCombiner, BMACombiner
from training.errors import ParameterError

EXPECTED = {
    "best_single": BestSingleCombiner,
    "uniform": UniformCombiner,
    "accuracy_weighted": AccuracyWeightedCombiner,
    "bma": BMACombiner,
    "moe": MoECombiner,
    "dla": DLACombiner,
    "smc": SMCCombiner,
    "bhs": BHSCombiner,
}


def test_names() -> None:
    extra = ("moe_tuned", "stacking", "ensemble_selection")
    assert (*EXPECTED, "iabma", *extra) == COMBINER_NAMES


def test_practitioner_baselines_by_name() -> None:
    assert type(make_combiner("stacking")) is StackingCombiner
    assert type(make_combiner("ensemble_selection")) is EnsembleSelectionCombiner
    moe = make_combiner("moe_tuned")
    assert type(moe) is TunedMoEGate
    assert (moe.kl_weight, moe.objective, moe.temperature) == (0.0, "marginal", "auto")


@pytest.mark.parametrize("name", list(EXPECTED))
def test_make_by_name(name: str) -> None:
    comb = make_combiner(name)
    assert type(comb) is EXPECTED[name]
    assert comb.name == name


def test_paper_defaults() -> None:
    assert make_combiner("moe").get_params() == {
        "hidden_layer_sizes": (64, 32, 16),
        "learning_rate": 1e-3,
        "batch_size": 64,
        "epochs": 10,
        "random_state": 0,
    }
    assert make_combiner("dla").get_params() == {"k": 50, "temperature": 1.0, "alpha": 1.0}
    smc = make_combiner("smc").get_params()
    assert (smc["threshold"], smc["quantile"], smc["min_coverage"], smc["shrinkage"]) == (
        0.6,
        0.3,
        20,
        0.9,
    )
    assert make_combiner("bhs").slab_scale == 5.0


def test_parameters_are_passed_and_random_state_is_optional() -> None:
    assert make_combiner("dla", k=7).k == 7
    assert make_combiner("moe", random_state=5).random_state == 5
    # Deterministic combiners take no seed; callers may still pass one uniformly.
    assert isinstance(make_combiner("bhs", random_state=5), BHSCombiner)


def test_unknown_name() -> None:
    with pytest.raises(ParameterError, match="must be one of best_single") as err:
        make_combiner("stacked_generalisation")
    assert err.value.parameter == "combiner"
    assert err.value.value == "stacked_generalisation"


def test_unknown_parameter() -> None:
    with pytest.raises(ParameterError) as err:
        make_combiner("dla", n_neighbors=5)
    assert err.value.parameter == "n_neighbors"


def test_iabma_by_name() -> None:
    comb = make_combiner("iabma", random_state=3)
    assert type(comb) is IABMAGate
    assert comb.name == "iabma"
    assert comb.random_state == 3
