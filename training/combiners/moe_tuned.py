"""``moe_tuned``: the mixture of experts given everything the default IA-BMA gets.

The same network, the same candidate search over training length with early stopping,
the same path toward stacking's pool (``pool_kl_weight``), the same mixture temperature
and the same check against the plain combiners, with
``lambda`` fixed at 0 and the ``marginal`` objective: what is left is maximum-likelihood
MoE. Beside it, the difference IA-BMA makes is what the adaptive prior adds. The ``moe``
row stays the paper's setting (10 epochs, no early stopping, no temperature).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from training.combiners.iabma_gate import IABMAGate
from training.nn.net import HIDDEN


class TunedMoEGate(IABMAGate):
    """:class:`~training.combiners.iabma_gate.IABMAGate` at ``kl_weight=0``,
    ``objective="marginal"``; every other setting as there."""

    name = "moe_tuned"

    def __init__(
        self,
        temperature: float | Literal["auto"] | None = "auto",
        early_stopping: bool = True,
        stopping_rule: Literal["one_se", "min"] = "one_se",
        n_iter_no_change: int | None = 4,
        selection_folds: int | Literal["auto"] = "auto",
        selection_repeats: int | Literal["auto"] = "auto",
        validation_fraction: float = 0.2,
        search_max_rows: int | None = 5000,
        hidden_layer_sizes: Sequence[int] = HIDDEN,
        learning_rate: float = 1e-3,
        batch_size: int = 64,
        epochs: int = 40,
        fallback: bool = True,
        guard_se: float = 1.0,
        bagging: bool = True,
        tempered: bool = True,
        random_state: int = 0,
        verbose: bool = False,
    ) -> None:
        super().__init__(
            kl_weight=0.0,
            objective="marginal",
            temperature=temperature,
            early_stopping=early_stopping,
            stopping_rule=stopping_rule,
            n_iter_no_change=n_iter_no_change,
            selection_folds=selection_folds,
            selection_repeats=selection_repeats,
            validation_fraction=validation_fraction,
            search_max_rows=search_max_rows,
            hidden_layer_sizes=hidden_layer_sizes,
            learning_rate=learning_rate,
            batch_size=batch_size,
            epochs=epochs,
            fallback=fallback,
            guard_se=guard_se,
            bagging=bagging,
            tempered=tempered,
            random_state=random_state,
            verbose=verbose,
        )
