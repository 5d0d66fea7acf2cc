"""Combiners by name, as ``--combiner`` and ``results.json`` spell them."""

from __future__ import annotations

from typing import Any

from training.combiners.base import Combiner, UniformCombiner
from training.combiners.bhs import BHSCombiner
from training.combiners.dla import DLACombiner
from training.combiners.iabma_gate import IABMAGate
from training.combiners.moe import MoECombiner
from training.combiners.moe_tuned import TunedMoEGate
from training.combiners.names import COMBINER_NAMES
from training.combiners.smc import SMCCombiner
from training.combiners.stacking import EnsembleSelectionCombiner, StackingCombiner
from training.combiners.static import AccuracyWeightedCombiner, BestSingleCombiner, BMACombiner
from training.errors import ParameterError

_COMBINERS: dict[str, type[Combiner]] = {
    cls.name: cls
    for cls in (
        BestSingleCombiner,
        UniformCombiner,
        AccuracyWeightedCombiner,
        BMACombiner,
        MoECombiner,
        DLACombiner,
        SMCCombiner,
        BHSCombiner,
        StackingCombiner,
        EnsembleSelectionCombiner,
        IABMAGate,
        TunedMoEGate,
    )
}


def combiner_class(name: str) -> type[Combiner]:
    """The class registered under ``name``."""
    if name not in _COMBINERS:
        raise ParameterError("combiner", name, f"must be one of {', '.join(COMBINER_NAMES)}")
    return _COMBINERS[name]


def make_combiner(name: str, **params: Any) -> Combiner:
    """An unfitted combiner ``name`` with the given hyperparameters (paper defaults otherwise).

    ``random_state`` is accepted for every name so callers can seed whichever combiner they
    build; the deterministic ones (no random initialisation or sampling) ignore it. Any
    other parameter the combiner does not have is an error.

    Raises
    ------
    ParameterError
        For an unknown name or parameter.
    """
    cls = combiner_class(name)
    accepted = set(cls._get_param_names())
    if "random_state" not in accepted:
        params.pop("random_state", None)
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise ParameterError(
            unknown[0],
            params[unknown[0]],
            f"is not a parameter of {name!r}; it takes {', '.join(sorted(accepted)) or 'none'}",
        )
    return cls(**params)
